"""``queue_worker`` on the PostgreSQL store, as docs/howto/postgresql.md describes it: jobs put by one
process run in another, with LISTEN/NOTIFY or poll-only; and the connections a worker opens, counted on the
server (the budget the how-to gives for ``max_connections``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, State
from tests.pgserver import connections_to

from .pgdjango import Worker, sql, wait_for
from .pgdjango import start_worker as start_worker

TASK = "tests.testapp.tasks.add"


def steady(url: str, expected: int, worker: Worker) -> None:
    """The count reaches ``expected`` and stays there (reading the server's clock opens one briefly)."""
    wait_for(lambda: connections_to(url) == expected, 30, f"{expected} connections; log:\n{worker.output()}")
    time.sleep(1.0)
    assert connections_to(url) == expected


@pytest.mark.slow
@pytest.mark.parametrize(("listen", "per_process"), [("1", 3), ("0", 2)])
def test_the_connections_of_a_worker_host(
    pg_url: str, start_worker: Callable[..., Worker], listen: str, per_process: int
) -> None:
    """Per worker process: one per thread, its main thread (heartbeats, registry), its queue's maintenance
    thread, and the listener (none with LISTEN off); the supervisor: its main and maintenance threads, and
    the scheduler's with the scheduler on. A short lease makes the maintenance threads connect at once
    (their first recovery round comes after half a lease)."""
    env = {"QUEUE_MAX_TEST_LEASE_TIME": "1.0", "QUEUE_MAX_TEST_PG_LISTEN": listen}
    worker = start_worker(pg_url, "--processes", "2", "--threads", "3", **env)
    steady(pg_url, 2 * (3 + per_process) + 2, worker)
    with Queue(pg_url) as queue:
        ids = [queue.put({"args": [n, n], "kwargs": {}}, name=TASK) for n in range(20)]
        wait_for(lambda: queue.stats()["done"] == 20, 30, f"the jobs to run; log:\n{worker.output()}")
        assert [queue.job(job_id).result for job_id in ids] == [2 * n for n in range(20)]  # type: ignore[union-attr]
    assert worker.stop() == 0, worker.output()
    wait_for(lambda: connections_to(pg_url) == 0, 30, "every connection to close")

    scheduled = start_worker(pg_url, "--processes", "1", "--threads", "1", scheduler=True, **env)
    steady(pg_url, (1 + per_process) + 3, scheduled)
    assert scheduled.stop() == 0, scheduled.output()


@pytest.mark.slow
def test_jobs_put_elsewhere_run_and_nothing_is_left_running(
    pg_url: str, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker(pg_url, "--processes", "2", "--threads", "2")
    with Queue(pg_url) as queue:
        ids = queue.put_many([{"args": [n, 1], "kwargs": {}} for n in range(100)], name=TASK)
        wait_for(lambda: queue.stats()["done"] == 100, 60, f"the jobs to run; log:\n{worker.output()}")
        assert {queue.job(job_id).state for job_id in ids} == {State.DONE}  # type: ignore[union-attr]
        assert queue.verify() == []
    assert worker.stop() == 0, worker.output()
    assert sql(pg_url, "SELECT count(*) FROM qm_jobs") == [(0,)]


def test_a_worker_on_a_database_without_the_tables_names_migrate(
    pg_url: str, start_worker: Callable[..., Worker]
) -> None:
    sql(pg_url, "DROP TABLE qm_meta")  # as good as no tables: the schema version is gone
    worker = start_worker(pg_url, "--processes", "1")
    assert worker.proc.wait(60) == 1
    assert "queue_max_django.E023" in worker.output() and "Run `manage.py migrate`" in worker.output()
    assert connections_to(pg_url) == 0
