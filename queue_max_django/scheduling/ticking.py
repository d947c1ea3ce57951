"""What the worker's scheduler ticks (``worker/scheduler.py``): one ``Ticker`` per schedule, code-declared
or kept in the store, each with its own tick keys. Both kinds go through the same path: the leader puts a
tick with a unique key made of the schedule and the tick's due time (``tick_key``, ``stored_tick_key``),
so two schedulers never enqueue one tick twice.

A ticker that is paused or disabled enqueues nothing; ticks due at or before the last change of its record
(``not_before``: a resume, an edit) are never caught up, so resuming a schedule does not replay what it
missed while paused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine import Queue, QueueError
from ..engine.schedulestate import StoredSchedule
from ..periodic import PeriodicTask
from ..running.registry import registry
from ..schedules import Cron, Interval
from ..tasks import Task
from .editing import enqueue
from .entries import ScheduleEntry, all_declared, declared_entry, stored_entry

logger = logging.getLogger("queue_max_django.worker")


def _short(name: str) -> str:
    return name if len(name) <= 120 else hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


def tick_key(task_name: str, due: dt.datetime) -> str:
    """The unique key of one tick of a code-declared schedule; long task names are hashed to keep it
    within the engine's limit."""
    return f"periodic:{_short(task_name)}:{int(due.timestamp() * 1_000_000)}"


def stored_tick_key(name: str, due: dt.datetime) -> str:
    """The unique key of one tick of a schedule kept in the store (never a code-declared one's)."""
    return f"schedule:{_short(name)}:{int(due.timestamp() * 1_000_000)}"


@dataclass(frozen=True)
class Ticker:
    key: str  # the scheduler's own key of it: "periodic:<task>" or "schedule:<name>"
    label: str  # for the logs
    schedule: Interval | Cron
    misfire_grace_time: float
    coalesce: bool
    held: bool  # paused or disabled now: nothing is enqueued
    not_before: float  # ticks due at or before this (unix seconds) are never enqueued
    entry: ScheduleEntry
    task: Task[..., Any]

    def unique_key(self, due: dt.datetime) -> str:
        if self.entry.declared:
            return tick_key(self.entry.task, due)
        return stored_tick_key(self.entry.name, due)

    def enqueue(self, queue: Queue, due: dt.datetime) -> int:
        return enqueue(queue, self.entry, unique_key=self.unique_key(due), task=self.task)


def _ticker(item: ScheduleEntry, task: Task[..., Any], schedule: Interval | Cron, now: float) -> Ticker:
    record = item.kept
    return Ticker(
        key=("periodic:" if item.declared else "schedule:") + item.name,
        label=item.name if item.declared else f"schedule {item.name} ({item.task})",
        schedule=schedule,
        misfire_grace_time=item.misfire_grace_time,
        coalesce=item.coalesce,
        held=item.paused(now),
        not_before=0.0 if record is None else max(record.changed_at, record.paused_until or 0.0),
        entry=item,
        task=task,
    )


def declared_ticker(task: PeriodicTask[..., Any], kept: StoredSchedule | None = None) -> Ticker:
    """The ticker of the code-declared ``task`` (a valid schedule), paused as ``kept`` says."""
    assert task.schedule is not None
    return _ticker(declared_entry(task, kept), task, task.schedule, 0.0)


def tickers(
    queue: Queue, declared: Callable[[], list[PeriodicTask[..., Any]]], now: float, *, stored: bool = True
) -> list[Ticker]:
    """Every schedule that may tick: the code-declared ``declared()`` with a valid schedule (each paused
    as its record in the store says), and (with ``stored``) those kept in the store with no problem. A
    store whose schedules cannot be read leaves only the code-declared ones, none paused (logged)."""
    kept: dict[str, StoredSchedule] = {}
    if stored:
        try:
            kept = {schedule.name: schedule for schedule in queue.schedules()}
        except QueueError:
            logger.exception("scheduler: the schedules kept in the store could not be read")
    found = []
    code = [task for task in declared() if task.schedule is not None]
    for task in code:
        assert task.schedule is not None
        item = declared_entry(task, kept.get(task.name))
        found.append(_ticker(item, task, task.schedule, now))
    names = {task.name for task in code} | {task.name for task in all_declared()}
    for record in kept.values():
        if record.declared:
            continue
        item = stored_entry(record, names)
        registered = registry.get(item.task)
        if item.schedule is None or item.problem is not None or not isinstance(registered, Task):
            logger.debug("scheduler: %s does not tick: %s", item.name, item.problem)
            continue
        found.append(_ticker(item, registered, item.schedule, now))
    return found
