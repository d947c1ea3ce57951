"""A worker process's acknowledgements written by a thread of their own (``worker/acks.py``) on a store whose
commits are a server's work (PostgreSQL) and with one worker thread, while that thread runs its next jobs;
written by each worker thread itself on LMDB, with several threads, and whenever a receiver listens to the
job signals."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf, signals
from queue_max_django.engine import State
from queue_max_django.worker.acks import AckLine
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess
from tests.testapp import tasks as t

pytestmark = pytest.mark.store_neutral  # each test chooses its stores itself

BOUND = 10.0  # no wait here lasts longer


class Flushes:
    """A flush that records (items, thread name) and can be held back until the test lets it go."""

    def __init__(self) -> None:
        self.done: list[tuple[list[Any], str]] = []
        self.started = threading.Semaphore(0)
        self.go = threading.Event()
        self.go.set()

    def __call__(self, items: list[Any]) -> None:
        self.started.release()
        assert self.go.wait(BOUND)
        if "boom" in items:
            raise RuntimeError("a bug in the flush")
        self.done.append((items, threading.current_thread().name))


def test_batches_are_flushed_in_order_in_the_line_s_thread_and_close_ends_it() -> None:
    flushes = Flushes()
    exits: list[str] = []
    line = AckLine(flushes, lambda: exits.append(threading.current_thread().name), name="acks-test")
    for batch in range(5):
        line.send([batch])
    line.close()
    assert [item for items, _ in flushes.done for item in items] == [0, 1, 2, 3, 4]
    assert {name for _, name in flushes.done} == {"acks-test"}
    assert exits == ["acks-test"]  # the thread released its resources itself, once
    line.close()  # idempotent
    line.send(["late"])  # after close: flushed in the caller's thread
    assert flushes.done[-1] == (["late"], threading.current_thread().name)


def test_the_batches_that_waited_are_flushed_together_and_send_waits_when_the_line_is_full() -> None:
    """While a flush is in flight, up to ``most_waiting`` batches wait and are then written in one flush;
    one more send waits (a slow store slows the worker threads down rather than letting unacknowledged
    successes pile up)."""
    flushes = Flushes()
    flushes.go.clear()
    line = AckLine(flushes, lambda: None, name="acks-test", most_waiting=2)
    line.send(["first"])
    assert flushes.started.acquire(timeout=BOUND)  # the thread took it: it is in flight
    line.send(["a", "b"])
    line.send(["c"])  # two batches wait: the line is full
    fourth_sent = threading.Event()
    sender = threading.Thread(target=lambda: (line.send(["d"]), fourth_sent.set()))
    sender.start()
    assert not fourth_sent.wait(0.05)  # send() waits
    flushes.go.set()
    assert fourth_sent.wait(BOUND)
    sender.join(BOUND)
    line.drain()
    assert [items for items, _ in flushes.done][:2] == [["first"], ["a", "b", "c"]]
    assert [item for items, _ in flushes.done for item in items] == ["first", "a", "b", "c", "d"]
    line.close()


def test_a_flush_that_raises_is_logged_and_the_next_batches_are_still_flushed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flushes = Flushes()
    flushes.go.clear()
    line = AckLine(flushes, lambda: None, name="acks-test")
    with caplog.at_level(logging.ERROR, logger="queue_max_django.worker"):
        line.send(["boom"])
        assert flushes.started.acquire(timeout=BOUND)
        flushes.go.set()
        line.drain()
        line.send(["a"])
        line.close()
    assert flushes.done == [(["a"], "acks-test")]
    assert "acks-test: acknowledging 1 job(s) failed" in caplog.text
    assert "a bug in the flush" in caplog.text


# ---------------------------------------------------------------------- in a worker process


STORES = {  # a store of the test's own -> its QUEUE_MAX, and whether its commits are a server's work
    "lmdb": lambda request, tmp: ({"DATA_DIR": tmp / "store"}, False),
    "lmdb-SYNC": lambda request, tmp: ({"DATA_DIR": tmp / "store", "SYNC": True}, False),
    "postgres": lambda request, tmp: (
        {"STORE": "postgresql", "URL": request.getfixturevalue("pg_url")},
        True,
    ),
}


@pytest.fixture
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[bool]:
    """The store ``request.param`` names, as this process's QUEUE_MAX. -> whether its commits are a
    server's work."""
    settings, server = STORES[request.param](request, tmp_path)
    with override_settings(QUEUE_MAX={**settings, "MAX_RETRIES": 0}):
        conf.reset()
        signals.reset_stats()
        yield server
        conf.reset()
        signals.reset_stats()


def drain_watching_acks(threads: int = 1) -> list[str]:
    """Run what is queued through a worker process in this process (burst); -> the name of the thread of
    each ``ack_many`` call."""
    queue = conf.get_queue()
    names: list[str] = []
    ack_many = queue.ack_many

    def watched(done: Any) -> Any:
        names.append(threading.current_thread().name)
        return ack_many(done)

    queue.ack_many = watched  # type: ignore[method-assign]
    try:
        options = WorkerOptions(processes=1, threads=threads, burst=True, scheduler=False, verbosity=0)
        assert WorkerProcess(queue, options, 0).run() == 0
    finally:
        del queue.ack_many
    return names


@pytest.mark.parametrize(
    ("store", "threads"),
    [
        pytest.param("postgres", 1, marks=pytest.mark.postgres, id="postgres-1-thread"),
        pytest.param("postgres", 2, marks=pytest.mark.postgres, id="postgres-2-threads"),
        pytest.param("lmdb", 1, id="lmdb"),
        pytest.param("lmdb-SYNC", 1, id="lmdb-SYNC"),
    ],
    indirect=["store"],
)  # fmt: skip
def test_a_worker_s_successes_are_stored_whichever_thread_acknowledges_them(
    store: bool, threads: int
) -> None:
    """The line acknowledges for a process with one thread on PostgreSQL; elsewhere each worker thread
    does (measured no faster with the line: worker/acks.py's Batch.flush). Either way, every job is
    stored done with its result, and the line's thread is gone once the process ends."""
    handles = t.add.map(range(300), 1)
    failed = t.fail_always.delay("boom")
    names = drain_watching_acks(threads)

    queue = conf.get_queue()
    assert queue.server_commits is store
    line = store and threads == 1
    for n, handle in enumerate(handles):
        job = queue.job(int(handle.id))
        assert job is not None and (job.state, job.result) == (State.DONE, n + 1)
    assert queue.job(int(failed.id)).state is State.FAILED
    stats = queue.stats()
    assert (stats["done"], stats["failed"], stats["running"], stats["pending"]) == (300, 1, 0, 0)
    assert t.add.get_stats()["succeeded"] == 300
    assert names and all(name.startswith("queue-acks-" if line else "queue-worker-") for name in names)
    assert not [thread.name for thread in threading.enumerate() if thread.name.startswith("queue-acks-")]


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_with_a_signal_receiver_the_worker_thread_acknowledges_its_jobs_itself(store: bool) -> None:
    """``job_succeeded`` is sent from the thread that ran the job, as without the line."""
    senders: list[str] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        senders.append(threading.current_thread().name)

    signals.job_succeeded.connect(receiver)
    try:
        t.add.map(range(50), 1)
        names = drain_watching_acks()
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert len(senders) == 50 and all(name.startswith("queue-worker-") for name in senders)
    assert names and all(name.startswith("queue-worker-") for name in names)
