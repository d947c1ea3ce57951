"""Changing schedules: add, edit, pause, resume, remove and run now, each checked before anything is
written (``ScheduleError`` names the problem), each one transaction of the store (``Queue.change_schedule``).

A kept schedule names a registered task; its arguments must bind to the task's signature and encode as
JSON; its schedule is an interval (seconds) or a cron expression with a time zone (``schedules.py``); its
misfire policy is ``@periodic_task``'s. A code-declared schedule can only be paused and resumed: editing or
removing it is refused (change the code), and no kept schedule may take its name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..encryption.jobs import seal_put
from ..engine import Queue, QueueError
from ..engine.job import PRIORITY_MAX, PRIORITY_MIN
from ..engine.schedulestate import ScheduleExists, StoredSchedule, UnknownSchedule, check_name
from ..engine.validate import validate_queue_name
from ..periodic import DEFAULT_MISFIRE_GRACE_TIME, PeriodicTask, _grace_seconds
from ..running.registry import registry
from ..schedules import InvalidSchedule, parse_schedule
from ..tasks import Task
from .entries import SCHEDULE_KEY, ScheduleEntry, entry

MAX_BY = 200


class ScheduleError(ValueError):
    """A schedule change that was refused before anything was written; the message says why."""


def _task(name: Any) -> Task[..., Any]:
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"give the task's name (a registered task), not {name!r}")
    found = registry.get(name)
    if not isinstance(found, Task):
        raise ScheduleError(
            f"unknown task {name!r}: no task of that name is registered (see the admin's Schedules page, or "
            f"`manage.py queue_schedule add --help`, for how tasks are named: module.function)"
        )
    return found


def check_arguments(task: Task[..., Any], args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """``args`` (a list) and ``kwargs`` (a dict of str keys), JSON-encodable and bound to ``task``'s
    signature. -> them, as lists and dicts."""
    if not isinstance(args, Sequence) or isinstance(args, (str, bytes)):
        raise ScheduleError(f"args must be a list, not {args!r}")
    if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
        raise ScheduleError(f"kwargs must be an object of named arguments, not {kwargs!r}")
    try:
        json.dumps([list(args), dict(kwargs)], allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"the arguments must be JSON (numbers, strings, lists, objects): {exc}") from None
    try:
        task._signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ScheduleError(f"the arguments do not fit {task.name}{task._signature}: {exc}") from None
    return list(args), dict(kwargs)


def build(
    name: str,
    task: str,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    interval: float | None = None,
    cron: str | None = None,
    tz: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    misfire_grace_time: float = DEFAULT_MISFIRE_GRACE_TIME,
    coalesce: bool = False,
    enabled: bool = True,
    by: str | None = None,
    served: frozenset[str] | None = None,
) -> StoredSchedule:
    """A kept schedule from its parts, every part checked (``ScheduleError``); nothing is written."""
    try:
        check_name(name)
    except QueueError as exc:
        raise ScheduleError(str(exc)) from None
    found = _task(task)
    bound_args, bound_kwargs = check_arguments(found, args, {} if kwargs is None else kwargs)
    if isinstance(interval, bool) or (
        interval is not None and (not isinstance(interval, (int, float)) or not math.isfinite(interval))
    ):
        raise ScheduleError(f"interval must be a number of seconds, not {interval!r}")
    try:
        parse_schedule(interval=interval, cron=cron or None, tz=tz or None)
    except InvalidSchedule as exc:
        raise ScheduleError(f"bad schedule: {exc}") from None
    if queue is not None:
        try:
            validate_queue_name(queue)
        except QueueError as exc:
            raise ScheduleError(str(exc)) from None
        if served is not None and queue not in served:
            raise ScheduleError(f"unknown queue {queue!r}: QUEUE_MAX['QUEUES'] lists {sorted(served)}")
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise ScheduleError(
            f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}"
        )
    try:
        grace = _grace_seconds(misfire_grace_time)
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None
    if not isinstance(coalesce, bool) or not isinstance(enabled, bool):
        raise ScheduleError("coalesce and enabled are True or False")
    return StoredSchedule(
        name, found.name, bound_args, bound_kwargs, None if interval is None else float(interval),
        cron or None, (tz or None) if cron else None, queue, priority, grace, coalesce, enabled,
        changed_by=_by(by),
    )  # fmt: skip


def _by(by: str | None) -> str | None:
    return None if by is None else str(by)[:MAX_BY]


def _declared(name: str) -> bool:
    return isinstance(registry.get(name), PeriodicTask)


def add(queue: Queue, schedule: StoredSchedule) -> StoredSchedule:
    """Keep the new schedule ``schedule`` (from ``build``); ``ScheduleError`` if its name is taken."""
    if _declared(schedule.name):
        raise ScheduleError(f"the name {schedule.name!r} is taken by a schedule declared in code")

    def edit(old: StoredSchedule | None) -> StoredSchedule:
        if old is not None:
            raise ScheduleExists(f"a schedule named {schedule.name!r} exists already: choose another name")
        return schedule

    return _change(queue, schedule.name, edit)


def edit(queue: Queue, schedule: StoredSchedule) -> StoredSchedule:
    """Replace the kept schedule of ``schedule.name`` (its pause state stays unless ``schedule`` says
    otherwise by being disabled); ``ScheduleError`` for a code-declared or missing one."""
    _refuse_declared(schedule.name, "edited")

    def change(old: StoredSchedule | None) -> StoredSchedule:
        if old is None or old.declared:
            raise UnknownSchedule(f"no schedule named {schedule.name!r} is kept")
        return replace(schedule, paused_until=old.paused_until)

    return _change(queue, schedule.name, change)


def pause(queue: Queue, name: str, *, until: float | None = None, by: str | None = None) -> StoredSchedule:
    """Pause ``name`` until ``until`` (unix seconds), or disable it (``until`` None) until resumed. Works
    on code-declared schedules too."""
    _exists(queue, name)
    if until is not None and (not isinstance(until, (int, float)) or not math.isfinite(until)):
        raise ScheduleError(f"until must be a time, not {until!r}")

    def change(old: StoredSchedule | None) -> StoredSchedule:
        base = _base(name, old)
        if until is None:
            return replace(base, enabled=False, paused_until=None, changed_by=_by(by))
        return replace(base, enabled=True, paused_until=float(until), changed_by=_by(by))

    return _change(queue, name, change)


def resume(queue: Queue, name: str, *, by: str | None = None) -> StoredSchedule:
    """Enable ``name`` and end its pause: it ticks from its next due time (missed ones are not caught up)."""
    _exists(queue, name)

    def change(old: StoredSchedule | None) -> StoredSchedule:
        return replace(_base(name, old), enabled=True, paused_until=None, changed_by=_by(by))

    return _change(queue, name, change)


def _base(name: str, old: StoredSchedule | None) -> StoredSchedule:
    """What a pause or resume changes: the kept record, or a code-declared schedule's first one."""
    if old is not None:
        return old
    if not _declared(name):  # removed since it was looked at
        raise UnknownSchedule(f"no schedule named {name!r} is kept")
    return StoredSchedule(name)


def remove(queue: Queue, name: str) -> None:
    """Remove the kept schedule ``name`` (or the pause state left by a ``@periodic_task`` that is gone from
    the code); ``ScheduleError`` for a code-declared or missing one."""
    _refuse_declared(name, "removed")

    def change(old: StoredSchedule | None) -> None:
        if old is None:
            raise UnknownSchedule(f"no schedule named {name!r} is kept")
        return None

    _change(queue, name, change)


def run_now(queue: Queue, name: str) -> int:
    """Enqueue one job of ``name`` now, with its arguments (outside its ticks: no tick is skipped for it).
    -> the job's id."""
    found = _exists(queue, name)
    if found.problem is not None:
        raise ScheduleError(f"schedule {name!r} cannot run: {found.problem}")
    return enqueue(queue, found, unique_key=None)


def enqueue(
    queue: Queue, found: ScheduleEntry, *, unique_key: str | None, task: Task[..., Any] | None = None
) -> int:
    """Put one job of ``found`` (the path of its ticks and of "run now"): its task's options (``task``:
    the task itself, else the registered one of its name), the kept schedule's queue and priority, and
    for a kept schedule its name in the job's metadata."""
    task = _task(found.task) if task is None else task
    if not found.declared:
        metadata = {**task.metadata, SCHEDULE_KEY: found.name}
        task = task.using(queue=found.queue, priority=found.priority, metadata=metadata)
    options = {**task._put_options(), "delay": None, "eta": None}
    task._prepare(queue)
    payload, options = seal_put(task, task._payload(tuple(found.args), found.kwargs), options)  # encrypted?
    return queue.put(payload, unique_key=unique_key, **options)


def _exists(queue: Queue, name: str) -> ScheduleEntry:
    try:
        found = entry(queue, name)
    except QueueError as exc:
        raise ScheduleError(str(exc)) from None
    if found is None:
        raise ScheduleError(f"no schedule named {name!r} (`manage.py queue_schedule list` shows them)")
    return found


def _refuse_declared(name: str, verb: str) -> None:
    if _declared(name):
        raise ScheduleError(
            f"{name!r} is declared in code (@periodic_task) and cannot be {verb} here: change the code, or "
            f"pause it"
        )


def _change(queue: Queue, name: str, edit: Any) -> StoredSchedule:
    try:
        kept = queue.change_schedule(name, edit)
    except (ScheduleExists, UnknownSchedule) as exc:
        raise ScheduleError(str(exc)) from None
    return kept  # type: ignore[return-value]  # None only after a removal, which returns nothing
