"""The periodic scheduler in-process, on an injected clock: leadership, handover, and exactly-once ticks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_max_django.engine import Queue, State
from queue_max_django.periodic import PeriodicTask
from queue_max_django.worker.scheduler import LOCK, Scheduler, tick_key

from ..engine.conftest import FakeClock

START = 1_800_000_000.0  # a whole minute: ticks of a 60 s interval fall on it


def report() -> None:
    return None


TASK: PeriodicTask[[], None] = PeriodicTask(report, interval=60, name="tests.report")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 1)


@pytest.fixture
def queue(tmp_path: Path, clock: FakeClock) -> Iterator[Queue]:
    with Queue(tmp_path / "store", clock=clock, do_recover=False, do_vacuum=False) as made:
        yield made


def scheduler(queue: Queue, clock: FakeClock, owner: str) -> Scheduler:
    return Scheduler(queue, owner, tasks=lambda: [TASK], clock=clock, lock_ttl=10.0)


def ticks(queue: Queue) -> list[float]:
    return sorted(job.enqueued_at for state in State for job in queue.jobs(state, name=TASK.name, limit=100))


def test_only_the_leader_enqueues_and_each_tick_once(queue: Queue, clock: FakeClock) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    assert a.step() == 1  # the tick at START, one second ago (within the look-back)
    assert b.step() == 0 and not b.leading and a.leading
    for _ in range(3):
        clock.advance(60)
        assert a.step() == 1
        assert b.step() == 0
    assert a.step() == 0  # the same moment again: nothing new is due
    assert ticks(queue) == [START + 1 + 60 * n for n in range(4)]
    assert queue.lock_holder(LOCK).owner == "a"  # type: ignore[union-attr]


def test_a_new_leader_takes_over_when_the_lease_runs_out_without_repeating_a_tick(
    queue: Queue, clock: FakeClock
) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    assert a.step() == 1
    clock.advance(60)  # a's lease expired long ago (it stopped stepping: a pause or a crash)
    assert b.step() == 1  # b leads and enqueues the tick at START + 60
    assert a.step() == 0 and not a.leading  # a came back: b holds the lease now
    assert len(ticks(queue)) == 2


def test_two_schedulers_that_both_believe_they_lead_still_enqueue_a_tick_once(
    queue: Queue, clock: FakeClock
) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    due = dt.datetime.fromtimestamp(START, dt.UTC)
    assert a._enqueue(TASK, due)
    assert b._enqueue(TASK, due)
    assert len(ticks(queue)) == 1  # the unique key of the tick made the second put a no-op


def test_ticks_missed_while_no_scheduler_ran_are_not_replayed_one_by_one(
    queue: Queue, clock: FakeClock
) -> None:
    a = scheduler(queue, clock, "a")
    assert a.step() == 1
    clock.advance(60 * 30 + 5)  # thirty ticks passed while nothing ran
    assert a.step() == 1  # only the latest of them
    assert len(ticks(queue)) == 2


def test_stop_gives_the_leadership_up(queue: Queue, clock: FakeClock) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    a.step()
    a.stop()
    assert queue.lock_holder(LOCK) is None
    clock.advance(60)
    assert b.step() == 1 and b.leading


def test_tick_keys_fit_the_engine_limit_for_long_names() -> None:
    due = dt.datetime.fromtimestamp(START, dt.UTC)
    assert tick_key("x" * 200, due) != tick_key("y" * 200, due)
    assert len(tick_key("x" * 200, due)) <= 200
    assert tick_key("short", due) == f"periodic:short:{int(START * 1_000_000)}"
