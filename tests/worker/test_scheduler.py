"""The periodic scheduler in-process, on an injected clock: leadership, handover, and exactly-once ticks.

A new leader catches up the ticks from its predecessor's last renewal (a clean stop leaves the lock's record
expired), within the grace time; the first leader of a store starts from now."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import LockHolder, Queue, State
from queue_max_django.periodic import PeriodicTask
from queue_max_django.worker.scheduler import LOCK, MAX_CATCH_UP, STEP, Scheduler, tick_key
from tests.engine.locations import StoreLocation

from ..engine.conftest import FakeClock
from .conftest import probe

START = 1_800_000_000.0  # a whole minute: ticks of a 60 s interval fall on it


def report() -> None:
    return None


TASK: PeriodicTask[[], None] = PeriodicTask(report, interval=60, name="tests.report")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 1)


@pytest.fixture
def location(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreLocation:
    """This test's store: LMDB in ``tmp_path``, or the PostgreSQL store in the test's database."""
    if store_kind == "postgres":
        return StoreLocation(store_kind, str(request.getfixturevalue("pg_url")))
    return StoreLocation(store_kind, str(tmp_path / "store"))


@pytest.fixture
def queue(location: StoreLocation, clock: FakeClock) -> Iterator[Queue]:
    with location.open_queue(clock=clock) as made:
        yield made


def scheduler(queue: Queue, clock: FakeClock, owner: str) -> Scheduler:
    return Scheduler(queue, owner, tasks=lambda: [TASK], clock=clock, lock_ttl=10.0)


def ticks(queue: Queue) -> list[float]:
    return sorted(job.enqueued_at for state in State for job in queue.jobs(state, name=TASK.name, limit=100))


def test_only_the_leader_enqueues_and_each_tick_once(queue: Queue, clock: FakeClock) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    assert a.step() == 0  # the tick at START, a second before any scheduler ran: not enqueued
    assert b.step() == 0 and not b.leading and a.leading
    for _ in range(3):
        clock.advance(60)
        assert a.step() == 1
        assert b.step() == 0
    assert a.step() == 0  # the same moment again: nothing new is due
    assert ticks(queue) == [START + 1 + 60 * n for n in range(1, 4)]
    assert queue.lock_holder(LOCK).owner == "a"  # type: ignore[union-attr]


def test_a_new_leader_takes_over_when_the_lease_runs_out_without_repeating_a_tick(
    queue: Queue, clock: FakeClock
) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    assert a.step() == 0 and a.leading
    clock.advance(60)  # a's lease expired long ago (it stopped stepping: a pause or a crash)
    assert b.step() == 1  # b leads and enqueues the tick at START + 60, missed since a's last renewal
    assert a.step() == 0 and not a.leading  # a came back: b holds the lease now
    assert ticks(queue) == [START + 61]


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
    assert a.step() == 0
    clock.advance(60 * 30 + 5)  # thirty ticks passed while nothing ran
    assert a.step() == 1  # only the latest of them
    assert len(ticks(queue)) == 1


def test_stop_gives_the_leadership_up(queue: Queue, clock: FakeClock) -> None:
    a, b = scheduler(queue, clock, "a"), scheduler(queue, clock, "b")
    a.step()
    a.stop()
    assert queue.lock_holder(LOCK) is None
    assert queue.last_lock_holder(LOCK) == LockHolder("a", clock.now, clock.now)  # kept, expired at the stop
    clock.advance(60)
    assert b.step() == 1 and b.leading


def test_tick_keys_fit_the_engine_limit_for_long_names() -> None:
    due = dt.datetime.fromtimestamp(START, dt.UTC)
    assert tick_key("x" * 200, due) != tick_key("y" * 200, due)
    assert len(tick_key("x" * 200, due)) <= 200
    assert tick_key("short", due) == f"periodic:short:{int(START * 1_000_000)}"


# ------------------------------------------------------------------------ misfires: catch-up, grace, coalesce


def tick_times(queue: Queue, name: str) -> list[float]:
    """The due times of the ticks of ``name`` enqueued so far, from the unique keys the store holds."""
    prefix = f"periodic:{name}:"
    keys = probe(queue).unique_keys()
    return sorted(int(key[len(prefix) :]) / 1_000_000 for key in keys if key.startswith(prefix))


def every_second() -> None:
    return None


def steps(clock: FakeClock, until: float, *schedulers: Scheduler) -> None:
    """Step each scheduler every STEP seconds (as their threads do) until the clock reads ``until``."""
    while clock.now < until:
        clock.advance(STEP)
        for made in schedulers:
            made.step()


@pytest.mark.parametrize("coalesce", [False, True], ids=["each-tick", "coalesce"])
def test_a_new_leader_enqueues_every_tick_its_predecessor_missed(
    queue: Queue, clock: FakeClock, coalesce: bool
) -> None:
    """A 1-second schedule, a leader that dies: the 10 s until its lease runs out are caught up by the next
    leader, one job per tick (only the latest with coalesce=True), and every tick is enqueued once."""
    task = PeriodicTask(every_second, interval=1, name="tests.every_second", coalesce=coalesce)
    a, b = (Scheduler(queue, owner, tasks=lambda: [task], clock=clock, lock_ttl=10.0) for owner in "ab")
    steps(clock, START + 20, a, b)
    died = clock.now
    assert a.leading and not b.leading
    taking_over = 0
    while not b.leading:  # a is dead: b waits for its lease to run out
        clock.advance(STEP)
        taking_over = b.step()
    assert clock.now - died == pytest.approx(10.0, abs=STEP)
    steps(clock, died + 30, b)

    times = tick_times(queue, task.name)
    assert queue.stats()["total"] == len(times)  # one job per tick, none twice
    if coalesce:
        assert taking_over == 1
        missed = [t for t in range(int(died) + 1, int(died) + 11) if t not in times]
        assert len(missed) == 9  # the latest of the ten was enqueued, as one job
    else:
        assert taking_over > 10  # the missed ticks, and those a enqueued again (no-ops, by their keys)
        assert times == [float(t) for t in range(int(times[0]), int(died) + 31)]  # no gap


def test_ticks_older_than_the_grace_time_are_skipped_and_the_rest_caught_up(
    queue: Queue, clock: FakeClock
) -> None:
    task = PeriodicTask(every_second, interval=1, name="tests.every_second", misfire_grace_time=5)
    a = Scheduler(queue, "a", tasks=lambda: [task], clock=clock)
    clock.now = START + 100
    a.step()
    assert tick_times(queue, task.name) == [START + 100]  # the first leader: from now
    clock.advance(30)  # a stalled: 30 ticks passed
    assert a.step() == 6
    assert tick_times(queue, task.name)[1:] == [START + 125 + n for n in range(6)]  # 5 s back, no more


def test_at_most_max_catch_up_ticks_of_a_task_in_one_step(queue: Queue, clock: FakeClock) -> None:
    task = PeriodicTask(every_second, interval=0.1, name="tests.fast", misfire_grace_time=60)
    a, b = (Scheduler(queue, owner, tasks=lambda: [task], clock=clock) for owner in "ab")
    clock.now = START
    assert a.step() == 1  # the first leader: the tick due now
    clock.now = START + 100  # a died: 600 ticks since its last renewal, within the grace time
    assert b.step() == MAX_CATCH_UP
    times = tick_times(queue, task.name)[1:]
    assert len(times) == MAX_CATCH_UP and times[-1] == START + 100  # the latest ones
    assert times[0] == pytest.approx(START + 100 - (MAX_CATCH_UP - 1) * 0.1)


def test_with_result_ttl_0_a_leader_paused_after_renewing_its_lock_enqueues_a_tick_once(
    location: StoreLocation, clock: FakeClock
) -> None:
    """a renews its lease, then stalls past it before it enqueues the tick at START + 60; meanwhile b takes
    over and enqueues that tick, a worker runs it and vacuum (RESULT_TTL 0) drops the done job at once.
    When a goes on and puts the tick, its unique key (kept a day, whatever RESULT_TTL) makes it a no-op."""
    with location.open_queue(clock=clock, result_ttl=0) as queue:
        paused = []

        def a_tasks() -> list[PeriodicTask[..., Any]]:
            if paused == ["now"]:  # a has just renewed its lease and read the clock
                paused[:] = ["done"]
                clock.advance(11.0)
                assert b.step() == 1 and b.leading  # b enqueues the tick at START + 60
                record = queue.get(timeout=0)
                record.ack()  # the tick ran
                queue.vacuum()  # and its done job is gone at once
                assert queue.stats()["done"] == 0
            return [TASK]

        a = Scheduler(queue, "a", tasks=a_tasks, clock=clock, lock_ttl=10.0)
        b = scheduler(queue, clock, "b")
        clock.now = START
        assert a.step() == 1  # START, due as a starts
        queue.get(timeout=0).ack()
        clock.advance(60)
        paused.append("now")
        a.step()  # puts the tick at START + 60, which b enqueued and which ran already
        assert paused == ["done"]

        assert tick_times(queue, TASK.name) == [START, START + 60]
        stats = queue.stats()
        assert stats["total"] == 2 and stats["pending"] == 0  # no second job of the tick at START + 60


def test_a_step_that_stalls_past_the_grace_time_puts_nothing(queue: Queue, clock: FakeClock) -> None:
    """The clock is read again before each put: a tick is never put later than its grace time after it was
    due (so never after its unique key could have been forgotten)."""
    task = PeriodicTask(every_second, interval=60, name="tests.minutely", misfire_grace_time=10)
    stalled = []

    def tasks() -> list[PeriodicTask[..., Any]]:
        if not stalled:
            stalled.append(True)
            clock.advance(20.0)  # between reading the clock and putting the tick at START
        return [task]

    a = Scheduler(queue, "a", tasks=tasks, clock=clock)
    clock.now = START  # the tick at START is due as a starts: a would put it, but for the stall
    assert a.step() == 0
    assert tick_times(queue, task.name) == [] and queue.stats()["total"] == 0


# ------------------------------------------------------------------------ where a new leader resumes


def jobs_enqueued_at(queue: Queue, when: float) -> int:
    """How many jobs were enqueued when the clock read ``when``."""
    return sum(1 for state in State for job in queue.jobs(state, limit=1000) if job.enqueued_at == when)


def test_the_first_leader_of_a_fresh_store_enqueues_no_past_tick(queue: Queue, clock: FakeClock) -> None:
    """No scheduler ever led this store (no lock record): the first leader enqueues only ticks that become
    due from now on, not the last minute of a 1-second task (before the fix: 60 jobs at once)."""
    task = PeriodicTask(every_second, interval=1, name="tests.every_second")
    assert task.misfire_grace_time == 60
    a = Scheduler(queue, "a", tasks=lambda: [task], clock=clock)
    clock.now = START + 30.25
    assert queue.last_lock_holder(LOCK) is None
    assert a.step() == 0 and a.leading
    assert queue.stats()["total"] == 0
    steps(clock, START + 35.25, a)
    assert tick_times(queue, task.name) == [START + 31 + n for n in range(5)]
    assert queue.stats()["total"] == 5


@pytest.mark.parametrize("ran", [5.0, 30.0], ids=["ran-5s", "ran-30s"])
def test_a_clean_stop_then_a_start_20_s_later_catches_up_the_20_s(
    queue: Queue, clock: FakeClock, ran: float
) -> None:
    """A deploy: a stops cleanly (its lock record stays, expired at the stop) and b starts 20 s later. b
    enqueues the 20 ticks due in between, one job each, and nothing from before a started (a ran for less
    than the lock ttl, or for more)."""
    task = PeriodicTask(every_second, interval=1, name="tests.every_second")
    a, b = (Scheduler(queue, owner, tasks=lambda: [task], clock=clock, lock_ttl=10.0) for owner in "ab")
    clock.now = START + 0.25
    steps(clock, START + 0.25 + ran, a)
    a.stop()
    stopped = clock.now
    assert not a.leading and queue.lock_holder(LOCK) is None
    assert tick_times(queue, task.name) == [START + 1 + n for n in range(int(ran))]

    clock.advance(20)
    before = tick_times(queue, task.name)
    b.step()
    assert b.leading
    new = sorted(set(tick_times(queue, task.name)) - set(before))
    assert new == [stopped + 0.75 + n for n in range(20)] and jobs_enqueued_at(queue, clock.now) == 20
    everything = [START + 1 + n for n in range(int(ran) + 20)]  # no gap, and nothing from before a started
    assert tick_times(queue, task.name) == everything
    assert queue.stats()["total"] == int(ran) + 20  # one job per tick


@pytest.mark.parametrize("how", ["stopped", "died"])
def test_a_gap_longer_than_the_grace_time_is_caught_up_within_it(
    queue: Queue, clock: FakeClock, how: str
) -> None:
    """Workers stopped (or the leader died) for 100 s: the next leader enqueues the ticks of the last
    misfire_grace_time (60 s) only, each as one job."""
    task = PeriodicTask(every_second, interval=1, name="tests.every_second")
    a, b = (Scheduler(queue, owner, tasks=lambda: [task], clock=clock, lock_ttl=10.0) for owner in "ab")
    clock.now = START + 0.25
    steps(clock, START + 10.25, a)
    if how == "stopped":
        a.stop()
    clock.advance(100)
    assert b.step() == 60 and b.leading
    caught_up = [START + 51 + n for n in range(60)]  # due within 60 s of the clock, START + 110.25
    assert jobs_enqueued_at(queue, clock.now) == 60
    assert tick_times(queue, task.name) == [START + 1 + n for n in range(10)] + caught_up
