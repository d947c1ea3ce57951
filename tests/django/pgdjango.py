"""The PostgreSQL store from Django, for the tests: a ``DATABASES`` alias on a test's database
(``tests/pgserver.py``), ``QUEUE_MAX`` naming it, SQL that reads what is stored, and a real ``queue_worker``.

Django cannot ``override_settings(DATABASES=...)`` (it warns: the connections are already made), so
``database_alias`` adds an alias to the ``DATABASES`` dict in place (Django's connection handler reads that
very dict) and removes it afterwards, closing its connection. The tests use Django's connection to it
without pytest-django's test case (``django_db_blocker.unblock()``): no transaction wraps the test, so a
commit is a real commit that other processes see.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import override_settings

from tests.pgserver import connect

ALIAS = "queue_pg"  # the DATABASES alias of the tests' PostgreSQL store
ROOT = Path(__file__).resolve().parents[2]
URL_ENV = "QUEUE_MAX_TEST_PG_URL"  # the store's database, for the queue_worker subprocesses
BOUND = 60.0  # no wait in these tests lasts longer than this

Configure = Callable[..., override_settings]


def alias_settings(url: str) -> dict[str, Any]:
    """A ``DATABASES`` entry for the database at ``url``."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
    }


@contextlib.contextmanager
def database_alias(alias: str, entry: dict[str, Any]) -> Iterator[str]:
    """``DATABASES[alias] = entry`` while inside (the defaults Django fills in, filled in)."""
    assert alias not in settings.DATABASES
    settings.DATABASES[alias] = entry
    connections.configure_settings({DEFAULT_DB_ALIAS: settings.DATABASES[DEFAULT_DB_ALIAS], alias: entry})
    try:
        yield alias
    finally:
        with contextlib.suppress(Exception):
            connections[alias].close()
        with contextlib.suppress(Exception):
            del connections[alias]
        del settings.DATABASES[alias]


@pytest.fixture
def pg_alias(pg_url: str, django_db_blocker: Any) -> Iterator[str]:
    """The alias ``ALIAS`` of this test's database (the store's schema, no rows), Django's access to it
    unblocked (no test transaction around it)."""
    with django_db_blocker.unblock(), database_alias(ALIAS, alias_settings(pg_url)):
        yield ALIAS


@pytest.fixture
def pg_store(pg_alias: str) -> Configure:
    """``pg_store(KEY=value, ...)``: an ``override_settings`` of ``QUEUE_MAX`` with the PostgreSQL store in
    the alias ``ALIAS`` and those keys."""

    def configure(**keys: Any) -> override_settings:
        return override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": pg_alias, **keys})

    return configure


def sql(url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    """The rows of ``query`` on a connection of its own (it sees what is committed, nothing else)."""
    with contextlib.closing(connect(url)) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def stored_jobs(url: str) -> list[tuple[int, str, str | None]]:
    """(id, table, name) of every job in the store's two job tables, as committed, by id."""
    return [
        (row[0], row[1], row[2])
        for row in sql(
            url,
            "SELECT id, 'qm_jobs', name FROM qm_jobs "
            "UNION ALL SELECT id, 'qm_finished', name FROM qm_finished ORDER BY 1",
        )
    ]


def wait_for(condition: Callable[[], Any], timeout: float = BOUND, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Worker:
    """A ``manage.py queue_worker`` subprocess on the PostgreSQL store at ``url`` (its QUEUE_MAX names the
    database by URL: ``tests/django/pg_worker_settings.py``)."""

    def __init__(self, url: str, log: Path, *args: str, scheduler: bool = False, **env: str) -> None:
        self.log = log
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.django.pg_worker_settings",
            URL_ENV: url,
            "PYTHONPATH": str(ROOT),
            **env,
        }
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "django",
                    "queue_worker",
                    *([] if scheduler else ["--no-scheduler"]),
                    *args,
                ],
                cwd=ROOT,
                env=environment,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"queue_worker did not stop; log:\n{self.output()}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """``start_worker(url, *args, scheduler=False, **env)``: a running ``queue_worker`` on the store at
    ``url`` (with ``--no-scheduler`` unless ``scheduler``); killed at the end whatever the test did."""
    started: list[Worker] = []

    def start(url: str, *args: str, scheduler: bool = False, **env: str) -> Worker:
        worker = Worker(url, tmp_path / f"worker-{len(started)}.log", *args, scheduler=scheduler, **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
