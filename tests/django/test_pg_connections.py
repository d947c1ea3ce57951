"""The connections of a worker's threads on the PostgreSQL store (docs/howto/postgresql.md, "Connections"):
around each job a worker thread calls Django's ``close_old_connections()``, as Django does around a request,
so ``CONN_MAX_AGE`` holds for tasks and a task that breaks its Django connection does not poison the next
job; a thread that ends closes its Django connections and its store connection. Run by a worker process's
threads in this process (``WorkerProcess``, burst), on a real server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from queue_max_django import conf, task
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess
from tests.pgserver import connect, connections_to, server

from .pgdjango import ALIAS, alias_settings, database_alias

APP = "qm_django_test"  # application_name of Django's connections to the alias here
seen: list[dict[str, Any]] = []  # what each job saw


@task(name="tests.pg_connections.query")
def query() -> int:
    """A task using Django's connection of the alias: -> its server process id."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    seen.append({"django": connections[ALIAS].connection, "store": conf.get_queue()._store.db.connection()})
    return pid


@task(name="tests.pg_connections.breaks", max_retries=0)
def breaks() -> None:
    """A task whose Django connection dies under it (its server process is ended) and fails."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with contextlib.closing(connect(server().url)) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    seen.append({"django": connections[ALIAS].connection, "broken": True})
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")  # raises: the connection is gone


@pytest.fixture
def store(pg_url: str, django_db_blocker: Any) -> Iterator[Any]:
    """``store(conn_max_age)``: the PostgreSQL store in the alias ``ALIAS`` (its Django connections named
    ``APP``, kept ``conn_max_age`` seconds; None: for good)."""
    stack = contextlib.ExitStack()

    def configure(conn_max_age: int | None) -> None:
        from django.test import override_settings

        entry = {**alias_settings(pg_url), "CONN_MAX_AGE": conn_max_age, "OPTIONS": {"application_name": APP}}
        stack.enter_context(django_db_blocker.unblock())
        stack.enter_context(database_alias(ALIAS, entry))
        stack.enter_context(override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": ALIAS,
                                                         "LISTEN": False, "RETRY_BACKOFF": 0}))  # fmt: skip
        conf.reset()

    seen.clear()
    with stack:
        yield configure
        conf.reset()
    seen.clear()


def value(handle: Any) -> Any:
    handle.refresh()
    return handle.return_value


def drain(threads: int = 1) -> None:
    options = WorkerOptions(processes=1, threads=threads, burst=True, scheduler=False, verbosity=0)
    assert WorkerProcess(conf.get_queue(), options, 0).run() == 0


def test_a_job_gets_a_fresh_django_connection_when_conn_max_age_is_0(store: Any, pg_url: str) -> None:
    store(0)
    handles = [query.delay() for _ in range(3)]
    drain()
    pids = [value(handle) for handle in handles]
    assert len(set(pids)) == 3  # each job its own: the last one was closed after its job, as a request's
    assert all(job["django"].closed and job["store"].closed for job in seen)
    assert connections_to(pg_url, APP) == 0


def test_a_broken_django_connection_does_not_poison_the_next_job(store: Any, pg_url: str) -> None:
    """With persistent connections (CONN_MAX_AGE None) the thread keeps its connection from job to job,
    except the one a task left broken: the next job on that thread connects again and succeeds."""
    store(None)
    first = query.delay()
    broken = breaks.delay()
    after = [query.delay() for _ in range(2)]
    drain()
    broken.refresh()
    assert broken.status == "FAILED"
    pids = [value(handle) for handle in [first, *after]]
    assert pids[1] == pids[2] != pids[0]  # reconnected once, then kept
    assert seen[0]["django"] is seen[1]["django"]  # the same connection until it broke
    assert seen[2]["django"] is not seen[1]["django"]
    # the worker thread ended: its Django connection and its store connection are closed
    assert all(job["django"].closed for job in seen)
    assert seen[-1]["store"].closed
    assert connections_to(pg_url, APP) == 0
