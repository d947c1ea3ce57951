"""PgBouncer in transaction mode from Django (docs/howto/postgresql.md#pgbouncer): ``TRANSACTION_POOLING``
and what it follows from an alias, its checks (E025, W004) against their exact output, and a real
``queue_worker`` (two processes, two threads each, the periodic scheduler on) whose every connection goes
through a PgBouncer with two server connections (``tests/pgbouncer.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.test import override_settings

from queue_max_django.checks import check_settings
from queue_max_django.conf import get_config
from queue_max_django.engine import Queue
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests.pgbouncer import Bouncer, backends
from tests.pgbouncer import bouncer as bouncer

from .pgdjango import ALIAS, Worker, alias_settings, database_alias, sql, wait_for
from .pgdjango import pg_alias as pg_alias
from .pgdjango import start_worker as start_worker

ID = "queue_max_django."
TASK = "tests.testapp.tasks.add"
POOLED = (
    f"DATABASES[{ALIAS!r}] sets DISABLE_SERVER_SIDE_CURSORS, which says its connections go through a pooler "
    f"in transaction mode (QUEUE_MAX['TRANSACTION_POOLING'] is not given, so it follows)"
)


@pytest.fixture
def pooled_alias(pg_url: str, django_db_blocker: Any) -> Any:
    """``configure(options=None, **queue_max)``: the alias ``ALIAS`` with DISABLE_SERVER_SIDE_CURSORS (and
    ``options``), and QUEUE_MAX naming it with ``queue_max``; -> (check messages, config or None)."""

    def configure(options: dict[str, Any] | None = None, **queue_max: Any) -> tuple[list[Any], Any]:
        entry = {**alias_settings(pg_url), "DISABLE_SERVER_SIDE_CURSORS": True, "OPTIONS": options or {}}
        with (
            django_db_blocker.unblock(),
            database_alias(ALIAS, entry),
            override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": ALIAS, **queue_max}),
        ):
            messages = check_settings()
            config = None if any(m.is_serious() for m in messages) else get_config()
        return messages, config

    return configure


def test_an_alias_behind_transaction_pooling_turns_listen_and_prepared_statements_off(
    pooled_alias: Callable[..., tuple[list[Any], Any]],
) -> None:
    messages, config = pooled_alias()
    assert messages == []
    pg = config.postgres
    assert (pg.transaction_pooling, pg.listen, pg.prepare_threshold, pg.notify) == (True, False, None, True)
    _, config = pooled_alias(TRANSACTION_POOLING=False)  # the pooler is in session mode: the user says so
    pg = config.postgres
    assert (pg.transaction_pooling, pg.listen, pg.prepare_threshold) == (False, True, 5)
    _, config = pooled_alias({"prepare_threshold": None}, TRANSACTION_POOLING=False)
    assert config.postgres.prepare_threshold is None  # the alias's own intent, for the store's connections


def test_a_url_is_not_pooled_unless_said(pg_url: str) -> None:
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url}):
        assert check_settings() == []
        assert (get_config().postgres.transaction_pooling, get_config().postgres.listen) == (False, True)  # type: ignore[union-attr]
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url, "TRANSACTION_POOLING": True}):
        assert (get_config().postgres.listen, get_config().postgres.prepare_threshold) == (False, None)  # type: ignore[union-attr]


def test_e025_listen_with_transaction_pooling(
    pooled_alias: Callable[..., tuple[list[Any], Any]], pg_url: str
) -> None:
    hint = (
        "Remove LISTEN (it is off then: idle workers poll, at most POLL_INTERVAL late); if the pooler runs "
        "in session mode, set QUEUE_MAX['TRANSACTION_POOLING'] to False instead."
    )
    tail = (
        ": such a pooler hands the listener's connection back to its pool after each transaction, and no "
        "notification reaches it."
    )
    assert pooled_alias(LISTEN=True) == (
        [Error(f"QUEUE_MAX['LISTEN'] is True, but {POOLED}{tail}", hint=hint, id=ID + "E025")],
        None,
    )
    with override_settings(
        QUEUE_MAX={"STORE": "postgresql", "URL": pg_url, "TRANSACTION_POOLING": True, "LISTEN": True}
    ):
        assert check_settings() == [
            Error(
                f"QUEUE_MAX['LISTEN'] is True, but QUEUE_MAX['TRANSACTION_POOLING'] is True{tail}",
                hint=hint,
                id=ID + "E025",
            )
        ]
    messages, _ = pooled_alias(LISTEN=False)
    assert messages == []


def test_w004_django_connection_prepares_behind_transaction_pooling(
    pooled_alias: Callable[..., tuple[list[Any], Any]],
) -> None:
    messages, config = pooled_alias({"server_side_binding": True})
    assert messages == [
        Warning(
            f"DATABASES[{ALIAS!r}] binds parameters on the server (OPTIONS 'server_side_binding') and so "
            f"prepares statements, but {POOLED}: PgBouncer in transaction mode loses prepared statements "
            f"(before 1.21, or without max_prepared_statements), and jobs enqueued inside a transaction of "
            f"that alias are written through Django's connection.",
            hint=f"Set DATABASES[{ALIAS!r}]['OPTIONS']['prepare_threshold'] to None, or remove "
            f"'server_side_binding' (the store's own connections prepare nothing here already).",
            id=ID + "W004",
        )
    ]
    assert config.postgres.prepare_threshold is None
    assert pooled_alias({"server_side_binding": True, "prepare_threshold": None})[0] == []
    assert pooled_alias({"server_side_binding": True}, TRANSACTION_POOLING=False)[0] == []


@pytest.mark.slow
def test_a_queue_worker_behind_transaction_pooling(
    bouncer: Bouncer, pg_url: str, start_worker: Callable[..., Worker]
) -> None:
    """Every connection of the worker (its store, its scheduler's locks, its registry) goes through the
    bouncer; jobs put through the bouncer too run once each, woken by polling."""
    worker = start_worker(
        bouncer.url, "--processes", "2", "--threads", "2", scheduler=True,
        DJANGO_SETTINGS_MODULE="tests.django.pgbouncer_worker_settings",
    )  # fmt: skip
    store = PostgresStore.open(bouncer.url, listen=False, prepare_threshold=None)
    with Queue(store) as queue:
        ids = queue.put_many([{"args": [n, n], "kwargs": {}} for n in range(60)], name=TASK)
        ids += [queue.put({"args": [n, 1], "kwargs": {}}, name=TASK) for n in range(40)]
        wait_for(lambda: queue.stats()["done"] == 100, 120, f"the jobs to run; log:\n{worker.output()}")
        assert [queue.job(job_id).result for job_id in ids] == [2 * n for n in range(60)] + [  # type: ignore[union-attr]
            n + 1 for n in range(40)
        ]
        wait_for(lambda: len(queue.workers()) == 2, 30, "both processes to report")
        assert queue.verify() == []
        assert backends(pg_url) <= bouncer.pool_size  # all of it through the bouncer's two sessions
    assert worker.stop() == 0, worker.output()
    assert "prepared statement" not in worker.output(), worker.output()
    assert sql(pg_url, "SELECT count(*) FROM qm_jobs WHERE state = 2") == [(0,)]
    assert {row[0] for row in sql(pg_url, "SELECT state FROM qm_finished")} == {3}  # done, none failed
