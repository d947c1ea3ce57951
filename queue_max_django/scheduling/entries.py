"""One list of every schedule: those declared in code (``@periodic_task``) and those kept in the store,
each a ``ScheduleEntry``, with what keeps it from ticking (paused, disabled, or a problem: an unknown task,
a schedule that does not parse, a kept name a code-declared one took since), its next runs, and its last
jobs.

A code-declared schedule is named by its task. The store may keep a record of the same name with no task
(``StoredSchedule.declared``): whether it is enabled and until when it is paused, the one thing of it that
can be changed without a deploy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ..engine import Job, Queue, State
from ..engine.schedulestate import StoredSchedule
from ..periodic import PeriodicTask, periodic_tasks, unscheduled_periodic_tasks
from ..running.registry import registry
from ..schedules import Cron, Interval, InvalidSchedule, parse_schedule

SCHEDULE_KEY = "_schedule"  # the metadata key of a kept schedule's jobs: its name (reserved: a "_" key)
NEXT_RUNS = 5
LAST_RUNS_SCAN = 50  # jobs of the task read per state to find a schedule's last runs: a bounded read


@dataclass(frozen=True)
class ScheduleEntry:
    """A schedule as the admin and ``queue_schedule`` show it. ``kept``: the store's record (for a
    code-declared one, its pause state; None: never paused)."""

    name: str
    declared: bool  # declared in code (only pause and resume apply)
    task: str
    schedule: Interval | Cron | None
    problem: str | None  # why it never ticks, or None
    misfire_grace_time: float
    coalesce: bool
    kept: StoredSchedule | None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "code" if self.declared else "stored"

    @property
    def enabled(self) -> bool:
        return self.kept is None or self.kept.enabled

    @property
    def paused_until(self) -> float | None:
        return None if self.kept is None else self.kept.paused_until

    def paused(self, now: float) -> bool:
        return self.kept is not None and self.kept.paused(now)

    def status(self, now: float) -> str:
        """ "active", "disabled", "paused" (until a time) or "invalid"."""
        if self.problem is not None:
            return "invalid"
        if not self.enabled:
            return "disabled"
        return "paused" if self.paused(now) else "active"

    @property
    def schedule_text(self) -> str:
        return f"invalid: {self.problem}" if self.schedule is None else str(self.schedule)

    @property
    def queue(self) -> str | None:
        return None if self.kept is None or self.declared else self.kept.queue

    @property
    def priority(self) -> int | None:
        return None if self.kept is None or self.declared else self.kept.priority

    def next_runs(self, now: float, count: int = NEXT_RUNS) -> list[dt.datetime]:
        """The next ``count`` due times after ``now`` (UTC), those of a pause left out; none while it is
        disabled or has a problem."""
        if self.schedule is None or self.problem is not None or not self.enabled:
            return []
        after = dt.datetime.fromtimestamp(max(now, self.paused_until or 0.0), dt.UTC)
        found = []
        for _ in range(count):
            after = self.schedule.next_after(after)
            found.append(after)
        return found

    def as_dict(self, now: float) -> dict[str, Any]:
        kept = self.kept
        return {
            "name": self.name,
            "kind": self.kind,
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "schedule": self.schedule_text,
            "interval": self.schedule.seconds if isinstance(self.schedule, Interval) else None,
            "cron": self.schedule.expression if isinstance(self.schedule, Cron) else None,
            "tz": str(self.schedule.tz) if isinstance(self.schedule, Cron) else None,
            "queue": self.queue,
            "priority": self.priority,
            "misfire_grace_time": self.misfire_grace_time,
            "coalesce": self.coalesce,
            "status": self.status(now),
            "enabled": self.enabled,
            "paused_until": self.paused_until,
            "problem": self.problem,
            "changed_by": None if kept is None else kept.changed_by,
            "changed_at": None if kept is None else kept.changed_at,
            "next_runs": [due.isoformat() for due in self.next_runs(now)],
        }


def all_declared() -> list[PeriodicTask[..., Any]]:
    """Every registered ``@periodic_task``, those whose schedule did not parse too."""
    return [*periodic_tasks(), *unscheduled_periodic_tasks()]


def declared_entry(task: PeriodicTask[..., Any], kept: StoredSchedule | None) -> ScheduleEntry:
    return ScheduleEntry(
        task.name, True, task.name, task.schedule, task.schedule_error, task.misfire_grace_time,
        task.coalesce, kept,
    )  # fmt: skip


def stored_entry(kept: StoredSchedule, declared_names: set[str]) -> ScheduleEntry:
    """The entry of a schedule kept in the store (``kept.task`` set)."""
    assert kept.task is not None
    problem = None
    schedule: Interval | Cron | None = None
    try:
        schedule = parse_schedule(interval=kept.interval, cron=kept.cron, tz=kept.tz)
    except InvalidSchedule as exc:
        problem = str(exc)
    if kept.name in declared_names:
        problem = f"a schedule declared in code has the name {kept.name!r} now: this one never ticks"
    elif kept.task not in registry:
        problem = f"no task named {kept.task!r} is registered in this process"
    return ScheduleEntry(
        kept.name, False, kept.task, schedule, problem, kept.misfire_grace_time, kept.coalesce, kept,
        list(kept.args), dict(kept.kwargs),
    )  # fmt: skip


def entries(queue: Queue, kept: list[StoredSchedule] | None = None) -> list[ScheduleEntry]:
    """Every schedule, code-declared and kept, by name (``kept``: the store's, if read already)."""
    records = {schedule.name: schedule for schedule in (queue.schedules() if kept is None else kept)}
    declared = {task.name: task for task in all_declared()}
    found = [declared_entry(task, records.get(name)) for name, task in declared.items()]
    found += [
        stored_entry(record, set(declared))
        for record in records.values()
        if not record.declared and record.task is not None
    ]
    return sorted(found, key=lambda entry: entry.name)


def entry(queue: Queue, name: str) -> ScheduleEntry | None:
    """The schedule named ``name``, code-declared or kept; None if there is none."""
    declared = registry.get(name)
    if isinstance(declared, PeriodicTask):
        return declared_entry(declared, queue.schedule(name))
    kept = queue.schedule(name)
    if kept is None or kept.declared:
        return None
    return stored_entry(kept, {task.name for task in all_declared()})


def last_runs(queue: Queue, entry: ScheduleEntry, limit: int = NEXT_RUNS) -> list[Job]:
    """The newest jobs of ``entry`` (any state), newest first: of a kept schedule, the jobs of its task
    that carry its name in their metadata; of a code-declared one, its task's jobs that carry none. Reads
    the newest ``LAST_RUNS_SCAN`` jobs of the task per state: older runs are not looked for."""
    mine = entry.name if not entry.declared else None
    found: list[Job] = []
    for state in State:
        for job in queue.jobs(state, name=entry.task, newest_first=True, limit=LAST_RUNS_SCAN):
            if job.metadata.get(SCHEDULE_KEY) == mine:
                found.append(job)
    found.sort(key=lambda job: job.enqueued_at or 0.0, reverse=True)
    return found[:limit]
