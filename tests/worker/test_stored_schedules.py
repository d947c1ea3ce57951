"""A schedule kept in the store, ticked by two real ``queue_worker`` commands: while the leading one is
SIGKILLed (its whole process group), the other takes the lead and every one-second tick is enqueued exactly
once, with no gap (issue 34). The checks and the scheduler in-process are in
tests/django/test_schedules_stored.py."""

from __future__ import annotations

import itertools
import os
import signal

from queue_max_django.engine import State
from queue_max_django.engine.schedulestate import StoredSchedule

from .conftest import TASKS, Site, probe, wait_for

NAME = "stored every second"
LOCK = "periodic-scheduler"


def test_a_stored_schedule_ticks_once_per_period_while_the_leader_is_sigkilled(site: Site) -> None:
    with site.queue() as queue:
        made = StoredSchedule(NAME, TASKS + "stored_tick", ["s"], interval=1.0, changed_by="test")
        queue.change_schedule(NAME, lambda old: made)
    workers = {
        name: site.start("--processes", "1", "--worker-id", name, "--threads", "1") for name in ("one", "two")
    }
    with site.queue() as queue:
        leader = wait_for(lambda: queue.lock_holder(LOCK), 30, "a scheduler to lead")
        wait_for(lambda: len(site.marks("stored_ticks")) >= 2, 30, "two ticks of the stored schedule")
        os.killpg(workers[leader.owner].proc.pid, signal.SIGKILL)
        workers[leader.owner].proc.wait(10)
        killed_at = len(site.marks("stored_ticks"))
        survivor = "two" if leader.owner == "one" else "one"
        wait_for(
            lambda: (holder := queue.lock_holder(LOCK)) is not None and holder.owner == survivor,
            30,
            "the other scheduler to lead",
        )
        wait_for(lambda: len(site.marks("stored_ticks")) >= killed_at + 2, 30, "two more ticks")
    workers[survivor].signal(signal.SIGTERM)
    assert workers[survivor].wait() == 0, workers[survivor].output()

    with site.queue() as queue:
        jobs = [job for state in State for job in queue.jobs(state, name=TASKS + "stored_tick", limit=1000)]
        prefix = f"schedule:{NAME}:"
        due = sorted(int(key[len(prefix) :]) for key in probe(queue).unique_keys() if key.startswith(prefix))
    assert all(job.metadata["_schedule"] == NAME for job in jobs)
    assert len(jobs) >= 4
    assert len(jobs) == len(due) == len(set(due))  # one job per tick, never two
    assert [b - a for a, b in itertools.pairwise(due)] == [1_000_000] * (len(due) - 1)  # and no gap
    assert f"leads (after {leader.owner})" in workers[survivor].output()
