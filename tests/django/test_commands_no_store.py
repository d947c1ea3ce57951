"""The commands that only read (queue_check, queue_stats, queue_list, queue_show, queue_health), the admin's
pages and the metrics view, pointed at a place that holds no store (a restore to the wrong path, a volume
not mounted, a database never migrated) say so and fail, and create nothing there; a command that writes,
and the worker, may still make a store."""

from __future__ import annotations

import contextlib
import io
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from queue_max_django import conf
from tests import pgserver
from tests.django.pgdjango import alias_settings, database_alias
from tests.testapp import tasks as t

ADMIN = "/admin/queue_max_django/job/"
READ_ONLY = {
    "queue_check": (),
    "queue_stats": (),
    "queue_list": ("--status", "pending"),
    "queue_show": ("1",),
    "queue_health": (),
}


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.lmdb
@pytest.mark.parametrize("command", sorted(READ_ONLY))
@pytest.mark.parametrize("place", ["missing", "an empty folder"])
def test_a_read_only_command_on_a_data_dir_without_a_store_says_so_and_creates_nothing(
    tmp_path: Path, command: str, place: str
) -> None:
    data_dir = tmp_path / "restored" / "queue_max_data"  # its parent is missing too
    if place == "an empty folder":  # the mount point of a volume that is not mounted
        data_dir.mkdir(parents=True)
    before = sorted(tmp_path.rglob("*"))
    with override_settings(QUEUE_MAX={"DATA_DIR": data_dir}):
        with pytest.raises(CommandError) as refused:
            call(command, *READ_ONLY[command])
        assert str(refused.value).startswith(f"no store at {data_dir}: ")
        assert sorted(tmp_path.rglob("*")) == before  # nothing was created, not even the folder
        # a command that writes may still make one, as the worker does
        call("queue_enqueue", "--task", t.add.name, "--args", "[1, 2]")
        assert (data_dir / "store.json").is_file()
        assert "pending" in call("queue_stats")  # and the commands that read find it
    conf.reset()


@pytest.fixture
def bare_database(pg_server: str) -> Iterator[str]:
    """The URL of a new database without the store's tables (never migrated)."""
    server = pgserver.server()
    name = f"qm_{server.tag}_bare_{secrets.token_hex(4)}"
    server.admin().execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    url = server.database_url(name)
    yield url
    server.drop_database(url)


def tables(url: str) -> list[str]:
    with contextlib.closing(pgserver.connect(url)) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_a_read_only_command_on_a_database_without_the_store_s_tables_says_so_and_creates_none(
    bare_database: str, django_db_blocker: Callable[..., object], command: str
) -> None:
    with (
        django_db_blocker.unblock(),  # type: ignore[attr-defined]
        database_alias("bare", alias_settings(bare_database)),
        override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": "bare"}),
    ):
        with pytest.raises(CommandError, match=r"has no queue_max tables.*run `manage\.py migrate`"):
            call(command, *READ_ONLY[command])
        conf.reset()
    assert tables(bare_database) == []


# ------------------------------------------------------------------ the admin and the metrics view


@pytest.mark.lmdb
@pytest.mark.django_db
@pytest.mark.parametrize("place", ["missing", "an empty folder"])
def test_the_admin_and_the_metrics_view_on_a_data_dir_without_a_store_say_so_and_create_nothing(
    tmp_path: Path, admin_client: Client, place: str
) -> None:
    """They made a new, empty store there (and the dashboard showed it healthy): now every admin page says
    "no store at PATH" (503, not a 500) and the metrics view answers 503 with the reason; the worker (and any
    writer) still makes the store."""
    data_dir = tmp_path / "restored" / "queue_max_data"
    if place == "an empty folder":
        data_dir.mkdir(parents=True)
    before = sorted(tmp_path.rglob("*"))
    with override_settings(QUEUE_MAX={"DATA_DIR": data_dir}):
        for url in (ADMIN, f"{ADMIN}panels/", f"{ADMIN}pending/", f"{ADMIN}failed/", f"{ADMIN}1/"):
            response = admin_client.get(url)
            assert response.status_code == 503, (url, response.status_code)
            shown = [str(message) for message in response.context["messages"]]
            assert len(shown) == 1 and shown[0].startswith(f"no store at {data_dir}: "), shown
        metrics = admin_client.get("/queue/metrics/")
        assert metrics.status_code == 503
        assert metrics.content.decode().startswith(f"no store at {data_dir}: ")
        assert sorted(tmp_path.rglob("*")) == before  # nothing was created, not even the folder

        call_command("queue_worker", "--burst", "--processes", "1", "--no-scheduler", stdout=io.StringIO(),
                     stderr=io.StringIO())  # fmt: skip
        assert (data_dir / "store.json").is_file()  # a worker makes the store
        assert admin_client.get(ADMIN).status_code == 200
        assert admin_client.get("/queue/metrics/").status_code == 200
    conf.reset()
