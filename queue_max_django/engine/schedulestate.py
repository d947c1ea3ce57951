"""Schedules kept in the store: what one is, how its record is packed, and how the store keeps it.

A ``StoredSchedule`` is either a schedule of its own (``task`` set: a registered task's name, the arguments
of each tick, an interval or a cron expression with its zone, the queue and priority of its jobs, its
misfire policy), or the kept state of a schedule declared in code by ``@periodic_task`` (``task`` None:
only whether it is enabled and until when it is paused; everything else is the code's). Both say who
changed them last (``changed_by``) and when (``changed_at``, the store's clock).

A schedule ticks while it is ``enabled`` and not paused (``paused_until`` None or past). Pausing without an
end disables it; resuming enables it and drops the end. What a tick does is the scheduler's
(``queue_max_django/worker/scheduler.py``); the engine only keeps the records, each under its name, as the
bytes ``pack`` gives (a msgpack map: readers ignore keys they do not know). The checks of a schedule's
content against the registered tasks are the Django layer's (``queue_max_django/scheduling``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import msgpack

from .errors import InvalidJob, QueueError
from .validate import bad_character

MAX_SCHEDULE_NAME = 200  # characters of a schedule's name, as a task's


class ScheduleExists(InvalidJob):
    """A schedule of that name is kept already (or declared in code): choose another name, or change the
    one there."""


class UnknownSchedule(QueueError, LookupError):
    """No schedule of that name is kept: ``queue_schedule list`` shows those there are."""


@dataclass(frozen=True)
class StoredSchedule:
    """One kept schedule (see the module docstring). Times are unix seconds on the store's clock."""

    name: str
    task: str | None = None  # None: the kept state of a code-declared schedule of that name
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    interval: float | None = None
    cron: str | None = None
    tz: str | None = None
    queue: str | None = None  # None: the task's own queue
    priority: int | None = None  # None: the task's own priority
    misfire_grace_time: float = 60.0
    coalesce: bool = False
    enabled: bool = True
    paused_until: float | None = None
    changed_by: str | None = None
    changed_at: float = 0.0
    created_at: float = 0.0

    @property
    def declared(self) -> bool:
        """Is this the kept state of a schedule declared in code (``@periodic_task``)?"""
        return self.task is None

    def paused(self, now: float) -> bool:
        """Is it held back at ``now``: disabled, or paused until later."""
        return not self.enabled or (self.paused_until is not None and self.paused_until > now)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_FIELDS = tuple(StoredSchedule.__dataclass_fields__)


def check_name(name: Any) -> str:
    """A schedule's name: 1 to ``MAX_SCHEDULE_NAME`` characters, none a control character."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_SCHEDULE_NAME:
        raise InvalidJob(
            f"a schedule's name must be a non-empty str of at most {MAX_SCHEDULE_NAME} characters, "
            f"not {name!r}"
        )
    why = bad_character(name)
    if why is not None:
        raise InvalidJob(f"a schedule's name cannot contain {why}: {name!r}")
    return name


def pack(schedule: StoredSchedule) -> bytes:
    values = schedule.as_dict()
    del values["name"]  # the key
    return bytes(msgpack.packb(values))


def unpack(name: str, raw: bytes) -> StoredSchedule | None:
    """The schedule kept under ``name`` as ``raw``; None for bytes that do not decode as one (the
    scheduler skips it and logs why; ``queue_schedule remove`` drops it)."""
    try:
        values = msgpack.unpackb(raw)
        if not isinstance(values, dict):
            return None
        known = {key: value for key, value in values.items() if key in _FIELDS and key != "name"}
        made = StoredSchedule(name, **known)
        if not isinstance(made.args, list) or not isinstance(made.kwargs, dict):
            return None
        return made
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


Edit = Callable[[StoredSchedule | None], StoredSchedule | None]


def editor(name: str, edit: Edit, now: Callable[[], float]) -> Callable[[bytes | None], bytes | None]:
    """A store's ``change`` function from an edit of ``StoredSchedule``s: a new or changed schedule gets
    ``changed_at`` (and a new one ``created_at``) from ``now``, read inside the store's transaction."""

    def change(raw: bytes | None) -> bytes | None:
        old = None if raw is None else unpack(name, raw)
        new = edit(old)
        if new is None:
            return None
        moment = now()
        created = moment if old is None or old.declared != new.declared else old.created_at
        return pack(replace(new, name=name, changed_at=moment, created_at=created))

    return change
