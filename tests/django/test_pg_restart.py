"""The PostgreSQL server crashes and restarts (``pg_ctl restart -m immediate``) while a ``queue_worker`` runs
jobs and a producer puts more: the worker does not die and goes on once the server is back, a put that could
not commit raises ``StoreError`` (never a silent loss), and every job whose put returned is done. And a
worker started while the server is down waits for it (or stops at once on SIGTERM), as a container started
before its database does.

The test has a cluster of its own (the session's is shared by every test), durable (each commit's WAL
written before it returns), so that what the server acknowledged survives the crash.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from queue_max_django.engine import Queue, State, StoreError
from queue_max_django.engine.stores.postgres import schema
from tests.pgserver import Cluster, PgUnavailable, connect, find_bindir, unavailable

from .pgdjango import Worker, wait_for
from .pgdjango import start_worker as start_worker

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TASK = "tests.testapp.tasks.add"


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    """A durable throwaway cluster of this test's own, with the store's schema. -> (it, its URL)."""
    bindir = find_bindir()
    if bindir is None:
        unavailable("the server binaries (initdb, pg_ctl) are not installed: this test restarts a server")
    made = Cluster(bindir)
    try:
        url = made.start(durable=True)
    except PgUnavailable as exc:
        unavailable(str(exc))
    try:
        with contextlib.closing(connect(url)) as conn:
            schema.create(conn)
        yield made, url
    finally:
        made.stop()


class Producer(threading.Thread):
    """Puts jobs one at a time until stopped, as a web process would; a put that raises is not retried
    (its job may or may not exist): only the ids of puts that returned are promised."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.queue = Queue(url, do_recover=False, do_vacuum=False)
        self.returned: list[int] = []
        self.refused: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            n += 1
            try:
                self.returned.append(self.queue.put({"args": [n, 1], "kwargs": {}}, name=TASK))
            except StoreError as exc:
                self.refused.append(str(exc))
                time.sleep(0.05)
            time.sleep(0.005)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        self.queue.close()


def test_a_server_crash_and_restart_mid_run_loses_no_job_whose_put_returned(
    cluster: tuple[Cluster, str], start_worker: Callable[..., Worker]
) -> None:
    server, url = cluster
    worker = start_worker(url, "--processes", "1", "--threads", "2", QUEUE_MAX_TEST_LEASE_TIME="2.0")
    producer = Producer(url)
    producer.start()
    try:
        with Queue(url, do_recover=False, do_vacuum=False) as queue:
            wait_for(lambda: queue.stats()["done"] >= 50, 60, f"jobs to run; log:\n{worker.output()}")
        before = len(producer.returned)

        server.restart("immediate")  # every connection broken; the server recovers from its WAL

        wait_for(lambda: len(producer.returned) >= before + 50, 60, "puts to succeed again")
        producer.stop()
        assert producer.refused, "no put failed while the server was down: the restart was not seen"
        assert all("may or may not have committed" in m or "connect" in m for m in producer.refused), (
            producer.refused[:5]
        )
        with Queue(url, do_recover=False, do_vacuum=False) as queue:
            ids = producer.returned

            def all_done() -> bool:
                return all(
                    (job := queue.job(job_id)) is not None and job.state is State.DONE for job_id in ids
                )

            wait_for(all_done, 60, f"every returned put's job to be done; log:\n{worker.output()}")
            assert worker.proc.poll() is None, f"the worker died; log:\n{worker.output()}"
            stats = queue.stats()
            assert stats["running"] == 0 or wait_for(lambda: queue.stats()["running"] == 0, 30)
            assert queue.verify() == []
    finally:
        producer.halt.set()
    assert worker.stop() == 0, worker.output()


def test_a_worker_started_before_its_server_waits_for_it_then_runs_jobs(
    cluster: tuple[Cluster, str], start_worker: Callable[..., Worker]
) -> None:
    server, url = cluster
    server.halt()
    worker = start_worker(url, "--processes", "1", "--threads", "1")
    wait_for(lambda: "waiting for the store: cannot connect" in worker.output(), 60, "the worker to wait")
    time.sleep(1.0)
    assert worker.proc.poll() is None, worker.output()

    server.resume()
    with Queue(url, do_recover=False, do_vacuum=False) as queue:
        ids = queue.put_many([{"args": [n, 1], "kwargs": {}} for n in range(10)], name=TASK)
        wait_for(
            lambda: all(queue.job(i).state is State.DONE for i in ids),  # type: ignore[union-attr]
            60,
            f"the jobs to run; log:\n{worker.output()}",
        )
    assert worker.stop() == 0, worker.output()
    assert worker.output().count("waiting for the store") == 1  # logged once, not once per try


def test_sigterm_while_waiting_for_the_server_stops_the_worker_at_once(
    cluster: tuple[Cluster, str], start_worker: Callable[..., Worker]
) -> None:
    server, url = cluster
    server.halt()
    worker = start_worker(url, "--processes", "1")
    wait_for(lambda: "waiting for the store" in worker.output(), 60, "the worker to wait")
    started = time.monotonic()
    assert worker.stop() == 0, worker.output()
    assert time.monotonic() - started < 10
    assert "stopped while waiting for the store" in worker.output()
