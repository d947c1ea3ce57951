"""``@periodic_task``: a task that also has a schedule (``schedules.py``).

The decorated function is a ``Task`` like any other (registered by name, callable directly, ``.delay()``),
plus ``.schedule`` and ``.next_run_after(dt)``. A schedule that does not parse does not raise here: the task
is registered without a schedule, ``.schedule_error`` says why, and ``manage.py check`` reports it
(``queue_max_django.E014``). ``periodic_tasks()`` lists the tasks the scheduler of ``queue_worker`` enqueues:
each tick calls the task with no arguments, and a tick is identified by its due time.

What happens to ticks that were not enqueued on time (no scheduler ran, a leader died and the next one took
over, a step was late) is the task's misfire policy, as in APScheduler: a tick is still enqueued up to
``misfire_grace_time`` seconds after it was due, each missed one as its own job, or with ``coalesce=True``
only the latest of them; older ones are skipped (worker/scheduler.py applies it).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from .engine.stores.types import UNIQUE_KEY_MIN_TTL
from .schedules import Cron, Interval, InvalidSchedule, parse_schedule
from .tasks import Task, registry

__all__ = ["PeriodicTask", "periodic_task", "periodic_tasks", "unscheduled_periodic_tasks"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_MISFIRE_GRACE_TIME = 60.0  # seconds: a leader's handover (10 s) and a quick restart are caught up
MIN_MISFIRE_GRACE_TIME = 1.0  # the scheduler steps every 0.5 s: less would skip ticks that are on time
# A tick is only ever enqueued within its grace time, while its unique key lives a day at least: half a day
# leaves the other half for a scheduler paused between its last look at the clock and its put.
MAX_MISFIRE_GRACE_TIME = UNIQUE_KEY_MIN_TTL / 2


class PeriodicTask(Task[P, R]):
    """A task with a schedule. ``schedule`` is None when the one given did not parse (``schedule_error``).
    ``misfire_grace_time`` (seconds) and ``coalesce`` are its misfire policy."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        interval: float | dt.timedelta | None = None,
        cron: str | None = None,
        tz: str | dt.tzinfo | None = None,
        misfire_grace_time: float | dt.timedelta = DEFAULT_MISFIRE_GRACE_TIME,
        coalesce: bool = False,
        **options: Any,
    ) -> None:
        self.misfire_grace_time: float = _grace_seconds(misfire_grace_time)
        if not isinstance(coalesce, bool):
            raise ValueError(f"coalesce must be True or False, not {coalesce!r}")
        self.coalesce = coalesce
        super().__init__(func, **options)
        self.schedule: Interval | Cron | None = None
        self.schedule_error: str | None = None  # checks.py reports E014 from it, knowing no PeriodicTask
        try:
            self.schedule = parse_schedule(interval=interval, cron=cron, tz=tz)
        except InvalidSchedule as exc:
            self.schedule_error = str(exc)

    def __repr__(self) -> str:
        what = self.schedule_error if self.schedule is None else str(self.schedule)
        return f"<{type(self).__name__} {self.name} ({what})>"

    def next_run_after(self, after: dt.datetime) -> dt.datetime | None:
        """The first due time strictly after the aware datetime ``after``; None for a task whose schedule
        did not parse (it is never scheduled)."""
        return None if self.schedule is None else self.schedule.next_after(after)


def _grace_seconds(value: float | dt.timedelta) -> float:
    seconds: object = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or not MIN_MISFIRE_GRACE_TIME <= seconds <= MAX_MISFIRE_GRACE_TIME
    ):
        raise ValueError(
            f"misfire_grace_time must be a number of seconds (or a timedelta) from "
            f"{MIN_MISFIRE_GRACE_TIME:g} to {MAX_MISFIRE_GRACE_TIME:g}, not {value!r}"
        )
    return float(seconds)


def periodic_task(
    *,
    interval: float | dt.timedelta | None = None,
    cron: str | None = None,
    tz: str | dt.tzinfo | None = None,
    misfire_grace_time: float | dt.timedelta = DEFAULT_MISFIRE_GRACE_TIME,
    coalesce: bool = False,
    **options: Any,
) -> Callable[[Callable[P, R]], PeriodicTask[P, R]]:
    """``@periodic_task(interval=seconds)`` or ``@periodic_task(cron="*/5 * * * *", tz="Europe/Berlin")``,
    with any option of ``@task``. ``misfire_grace_time``: how late (seconds) a missed tick is still
    enqueued; ``coalesce``: of several missed ticks, enqueue only the latest. Registers the task; a bad
    schedule is reported by the system checks, a bad option raises ``ValueError`` here."""

    def decorate(function: Callable[P, R]) -> PeriodicTask[P, R]:
        made: PeriodicTask[P, R] = PeriodicTask(
            function,
            interval=interval,
            cron=cron,
            tz=tz,
            misfire_grace_time=misfire_grace_time,
            coalesce=coalesce,
            **options,
        )
        registry.register(made)
        return made

    return decorate


def _registered() -> list[PeriodicTask[..., Any]]:
    found = []
    for name in registry.names():
        registered = registry.get(name)
        if isinstance(registered, PeriodicTask):
            found.append(registered)
    return found


def periodic_tasks() -> list[PeriodicTask[..., Any]]:
    """The registered periodic tasks with a valid schedule, by name: what the scheduler enqueues."""
    return [made for made in _registered() if made.schedule is not None]


def unscheduled_periodic_tasks() -> list[PeriodicTask[..., Any]]:
    """The registered periodic tasks whose schedule did not parse, by name (check E014)."""
    return [made for made in _registered() if made.schedule is None]
