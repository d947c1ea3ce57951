"""The dashboard's periodic tasks: each ``@periodic_task`` with its schedule, its next tick, its last finished
job, and which worker's scheduler leads (enqueues the ticks) now.

Two engine reads per task (its newest done job by finish time, its newest dead letter by id), so the panel
costs the same on a store of any size.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..engine import Job, LockHolder, Queue, State
from ..periodic import periodic_tasks, unscheduled_periodic_tasks


@dataclass(frozen=True)
class PeriodicRow:
    name: str
    schedule: str  # the schedule as written, or why it did not parse
    valid: bool
    next_run: dt.datetime | None
    last_run: Job | None  # the task's newest finished job, done or dead letter

    @property
    def last_finished(self) -> dt.datetime | None:
        finished = None if self.last_run is None else self.last_run.finished_at
        return None if finished is None else dt.datetime.fromtimestamp(finished, tz=dt.UTC)


def rows(queue: Queue, now: float) -> list[PeriodicRow]:
    """Every registered periodic task by name, those whose schedule did not parse too (never enqueued)."""
    moment = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    found = [
        PeriodicRow(
            task.name, str(task.schedule), True, task.next_run_after(moment), last_run(queue, task.name)
        )
        for task in periodic_tasks()
    ]
    found += [
        PeriodicRow(task.name, f"invalid: {task.schedule_error}", False, None, last_run(queue, task.name))
        for task in unscheduled_periodic_tasks()
    ]
    return sorted(found, key=lambda row: row.name)


def last_run(queue: Queue, name: str) -> Job | None:
    """The newest finished job of the task ``name``: done or failed, whichever finished last."""
    finished = [
        jobs[0]
        for jobs in (
            queue.jobs(State.DONE, name=name, newest_first=True, limit=1),
            queue.jobs(State.FAILED, name=name, newest_first=True, limit=1),
        )
        if jobs
    ]
    return max(finished, key=lambda job: job.finished_at or 0.0, default=None)


def leader(queue: Queue) -> LockHolder | None:
    """The worker whose scheduler enqueues the ticks now (its worker id is the lock's owner), or None."""
    from ..worker.scheduler import LOCK  # here: a web process need not import the worker runtime otherwise

    return queue.lock_holder(LOCK)
