"""Concurrency limits held by real ``queue_worker`` processes (docs/howto/concurrency-limits.md): two commands
of two processes each never run more of a limited task at once than its limit, per key too; and a worker
SIGKILLed while it holds a slot gives the slot back when its lease expires, with nothing run by hand."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from queue_max_django.coordination.concurrency import job_limits
from queue_max_django.engine import State

from .conftest import TASKS, Site, wait_for


def workapp() -> Any:
    """The worker's task module, imported when a test runs, not when this file is collected: it declares a
    periodic task, which would then be registered for every test of the session (the admin's dashboard
    shows it)."""
    from tests.worker.workapp import tasks

    return tasks


def put_call(site: Site, task: Any, *args: Any) -> int:
    """Enqueue ``task(*args)`` as ``.delay()`` stores it: its payload, name and concurrency limits."""
    limits = job_limits(task.concurrency, task.queue, {}, args, {})
    with site.queue() as queue:
        return queue.put({"args": list(args), "kwargs": {}}, name=task.name, concurrency=limits)


def all_done(queue: Any, ids: list[int]) -> bool:
    return all(queue.job(job_id).state is State.DONE for job_id in ids)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` spans that overlap at one instant."""
    events = sorted([(start, 1) for start, _end in spans] + [(end, -1) for _start, end in spans])
    running = peak = 0
    for _when, step in events:  # an end sorts before a start at the same instant (-1 < 1)
        running += step
        peak = max(peak, running)
    return peak


def test_a_limit_holds_across_four_processes_of_two_commands(site: Site) -> None:
    assert workapp().capped.name == TASKS + "capped"
    ids = [put_call(site, workapp().capped, n, 0.15) for n in range(16)]
    for _ in range(2):  # one thread each: two running at once means two processes at once
        site.start("--processes", "2", "--threads", "1")
    with site.queue() as queue:
        wait_for(lambda: all_done(queue, ids), 90, "the 16 jobs to run")
    spans = [value.split(":") for value, _pid in site.marks("span")]
    assert len(spans) == 16
    assert most_at_once([(float(start), float(end)) for _v, start, end in spans]) == 2
    assert len({pid for _value, pid in site.marks("span")}) >= 2
    for worker in site.workers:
        worker.signal()
        assert worker.wait() == 0, worker.output()


def test_a_keyed_limit_holds_per_key_across_processes(site: Site) -> None:
    ids = [put_call(site, workapp().per_account, account, n, 0.1) for n in range(6) for account in ("a", "b")]
    for _ in range(2):
        site.start("--processes", "2", "--threads", "1")
    with site.queue() as queue:
        wait_for(lambda: all_done(queue, ids), 90, "the 12 jobs to run")
    spans = [value.split(":") for value, _pid in site.marks("span")]
    for account in ("a", "b"):
        mine = [(float(start), float(end)) for key, _v, start, end in spans if key == account]
        assert len(mine) == 6 and most_at_once(mine) == 1
    both = [(float(start), float(end)) for _key, _v, start, end in spans]
    assert most_at_once(both) == 2  # the two keys ran side by side
    for worker in site.workers:
        worker.signal()
        assert worker.wait() == 0, worker.output()


def test_a_killed_workers_slot_comes_back_when_its_lease_expires(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "1.0"
    first = put_call(site, workapp().hold_once, 1, 60.0)
    worker = site.start("--processes", "1", "--threads", "1")
    wait_for(lambda: site.marks("held"), 60, "the first job to start")
    second = put_call(site, workapp().hold_once, 2, 0.0)
    os.killpg(worker.proc.pid, signal.SIGKILL)  # the whole command: supervisor and worker process
    worker.proc.wait(10)
    with site.queue() as queue:
        assert queue.job(first).state is State.RUNNING  # type: ignore[union-attr]
        assert queue.job(second).state is State.PENDING  # type: ignore[union-attr]  # held by the slot
        assert queue.job(second).attempts == 0  # type: ignore[union-attr]
    again = site.start("--processes", "1", "--threads", "1")
    with site.queue() as queue:
        wait_for(lambda: all_done(queue, [first, second]), 60, "both jobs to finish after the lease expired")
        assert queue.job(first).retries == 1  # type: ignore[union-attr]  # charged: its lease expired
        assert queue._store.concurrency.running() == {}
    again.signal()
    assert again.wait() == 0, again.output()


pytestmark = pytest.mark.slow
