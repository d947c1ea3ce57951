"""The PostgreSQL store's connection of a thread lives as long as the thread (``connection.py``): counted on
the server (``pg_stat_activity``), the connections of threads that used the store are gone once the threads
end, once a thread pool shuts down, and at once for a thread that calls ``Queue.end_thread()``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from queue_max_django.engine import Queue
from tests.pgserver import connections_to

THREADS = 4


def settles(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def quiet_queue(url: str) -> Queue:
    return Queue(url, do_recover=False, do_vacuum=False, sync_interval=3600)  # no background connections


def test_the_connections_of_threads_close_when_the_threads_end(pg_url: str) -> None:
    with quiet_queue(pg_url) as queue:
        queue.stats()  # this thread's connection
        before = connections_to(pg_url)
        release = threading.Event()
        ready = threading.Barrier(THREADS + 1)

        def work() -> None:
            queue.put({"from": threading.get_ident()})
            ready.wait(30)
            release.wait(30)

        threads = [threading.Thread(target=work) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        ready.wait(30)
        assert connections_to(pg_url) == before + THREADS
        assert queue._store.db.thread_connections() == 1 + THREADS  # type: ignore[attr-defined]
        release.set()
        for thread in threads:
            thread.join(30)
        assert settles(lambda: connections_to(pg_url) == before), connections_to(pg_url)
        assert queue._store.db.thread_connections() == 1  # type: ignore[attr-defined]
        assert queue.stats()["pending"] == THREADS  # the store goes on, on this thread's connection


def test_a_thread_pool_that_shuts_down_leaves_no_connection(pg_url: str) -> None:
    with quiet_queue(pg_url) as queue:
        queue.stats()
        before = connections_to(pg_url)
        pool = ThreadPoolExecutor(THREADS)
        barrier = threading.Barrier(
            THREADS
        )  # every pool thread takes one: THREADS threads, THREADS connections

        def put(n: int) -> int:
            job_id = queue.put({"n": n})
            barrier.wait(30)
            return job_id

        assert len(set(pool.map(put, range(THREADS)))) == THREADS
        assert connections_to(pg_url) == before + THREADS
        pool.shutdown(wait=True)
        assert settles(lambda: connections_to(pg_url) == before), connections_to(pg_url)


def test_end_thread_closes_this_threads_connection_at_once(pg_url: str) -> None:
    with quiet_queue(pg_url) as queue:
        queue.stats()
        before = connections_to(pg_url)
        queue.end_thread()
        assert settles(lambda: connections_to(pg_url) == before - 1)
        assert queue.stats()["total"] == 0  # the next operation opens a new one
        assert connections_to(pg_url) == before
    assert settles(lambda: connections_to(pg_url) == 0)
