"""``@periodic_task``: a task that also has a schedule (``schedules.py``).

The decorated function is a ``Task`` like any other (registered by name, callable directly, ``.delay()``),
plus ``.schedule`` and ``.next_run_after(dt)``. A schedule that does not parse does not raise here: the task
is registered without a schedule, ``.schedule_error`` says why, and ``manage.py check`` reports it
(``queue_max_django.E014``). ``periodic_tasks()`` lists the tasks the scheduler of ``queue_worker`` enqueues:
each tick calls the task with no arguments, and a tick is identified by its due time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from .schedules import Cron, Interval, InvalidSchedule, parse_schedule
from .tasks import Task, registry

__all__ = ["PeriodicTask", "periodic_task", "periodic_tasks", "unscheduled_periodic_tasks"]

P = ParamSpec("P")
R = TypeVar("R")


class PeriodicTask(Task[P, R]):
    """A task with a schedule. ``schedule`` is None when the one given did not parse (``schedule_error``)."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        interval: float | dt.timedelta | None = None,
        cron: str | None = None,
        tz: str | dt.tzinfo | None = None,
        **options: Any,
    ) -> None:
        super().__init__(func, **options)
        self.schedule: Interval | Cron | None = None
        self.schedule_error: str | None = None
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


def periodic_task(
    *,
    interval: float | dt.timedelta | None = None,
    cron: str | None = None,
    tz: str | dt.tzinfo | None = None,
    **options: Any,
) -> Callable[[Callable[P, R]], PeriodicTask[P, R]]:
    """``@periodic_task(interval=seconds)`` or ``@periodic_task(cron="*/5 * * * *", tz="Europe/Berlin")``,
    with any option of ``@task``. Registers the task; a bad schedule is reported by the system checks."""

    def decorate(function: Callable[P, R]) -> PeriodicTask[P, R]:
        made: PeriodicTask[P, R] = PeriodicTask(function, interval=interval, cron=cron, tz=tz, **options)
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
