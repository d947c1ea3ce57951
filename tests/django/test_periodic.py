"""``@periodic_task``: registration, schedules, the periodic registry, and a task like any other."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

import queue_max_django
from queue_max_django.periodic import PeriodicTask, periodic_task, periodic_tasks, unscheduled_periodic_tasks
from queue_max_django.schedules import Cron, Interval
from queue_max_django.tasks import Task, registry

Configure = Callable[..., override_settings]
UTC = dt.UTC


pytestmark = pytest.mark.usefixtures("scratch_registry")  # the tasks each test registers leave with it


def test_exported_lazily_from_the_package() -> None:
    assert queue_max_django.periodic_task is periodic_task


def test_an_interval_task_is_registered_with_its_schedule() -> None:
    @periodic_task(interval=300, name="periodic.cleanup", queue="maintenance", priority=5)
    def cleanup() -> str:
        return "cleaned"

    assert isinstance(cleanup, PeriodicTask) and isinstance(cleanup, Task)
    assert registry["periodic.cleanup"] is cleanup
    assert (cleanup.queue, cleanup.priority) == ("maintenance", 5)
    assert cleanup.schedule == Interval(300)
    assert cleanup.schedule_error is None
    assert cleanup.next_run_after(dt.datetime(2026, 1, 1, 0, 4, tzinfo=UTC)) == dt.datetime(
        2026, 1, 1, 0, 5, tzinfo=UTC
    )
    assert cleanup() == "cleaned"
    assert cleanup in periodic_tasks()
    assert repr(cleanup) == "<PeriodicTask periodic.cleanup (every 300s)>"


def test_a_cron_task_in_a_zone() -> None:
    @periodic_task(cron="0 9 * * mon-fri", tz="Europe/Berlin")
    def report() -> None: ...

    assert report.name == f"{__name__}.test_a_cron_task_in_a_zone.<locals>.report"
    assert report.schedule == Cron("0 9 * * mon-fri", tz=ZoneInfo("Europe/Berlin"))
    # 2026-11-27 is a Friday: next is Monday 09:00 CET
    after = dt.datetime(2026, 11, 27, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    assert report.next_run_after(after) == dt.datetime(2026, 11, 30, 8, tzinfo=UTC)


def test_a_schedule_that_does_not_parse_is_recorded_not_raised() -> None:
    @periodic_task(cron="61 * * * *", name="periodic.bad")
    def bad() -> int:
        return 1

    assert registry["periodic.bad"] is bad
    assert bad.schedule is None
    assert bad.schedule_error == "cron '61 * * * *': the minute field '61': 61 is out of range 0-59"
    assert bad.next_run_after(dt.datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert bad not in periodic_tasks()
    assert bad in unscheduled_periodic_tasks()
    assert bad() == 1


def test_task_options_are_still_checked_at_decoration() -> None:
    with pytest.raises(ValueError, match="priority must be an int"):

        @periodic_task(interval=5, priority=1000)
        def loud() -> None: ...


def test_periodic_tasks_lists_only_periodic_tasks_by_name() -> None:
    @periodic_task(interval=60, name="periodic.b")
    def b() -> None: ...

    @periodic_task(interval=60, name="periodic.a")
    def a() -> None: ...

    @queue_max_django.task(name="periodic.plain")
    def plain() -> None: ...

    names = [made.name for made in periodic_tasks()]
    assert "periodic.plain" not in names
    assert names.index("periodic.a") < names.index("periodic.b")


def test_a_refused_duplicate_name_is_not_scheduled() -> None:
    @periodic_task(interval=60, name="periodic.twice")
    def first() -> None: ...

    @periodic_task(interval=1, name="periodic.twice")
    def second() -> None: ...

    assert [made for made in periodic_tasks() if made.name == "periodic.twice"] == [first]


def test_delay_works_as_for_any_task(queue_max: Configure) -> None:
    @periodic_task(interval=60, name="periodic.delayed")
    def add(x: int, y: int) -> int:
        return x + y

    with queue_max(IMMEDIATE=True):
        result = add.delay(2, 3)
    assert result.return_value == 5


def test_the_misfire_policy_defaults_to_a_minute_of_catch_up_tick_by_tick() -> None:
    @periodic_task(interval=60, name="periodic.default_policy")
    def plain() -> None: ...

    @periodic_task(
        cron="0 9 * * *", name="periodic.report", misfire_grace_time=dt.timedelta(hours=3), coalesce=True
    )
    def report() -> None: ...

    assert (plain.misfire_grace_time, plain.coalesce) == (60.0, False)
    assert (report.misfire_grace_time, report.coalesce) == (3 * 3600.0, True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"misfire_grace_time": 0.5}, "misfire_grace_time must be a number of seconds .* from 1 to 43200"),
        ({"misfire_grace_time": 86_400}, "from 1 to 43200, not 86400"),
        ({"misfire_grace_time": float("nan")}, "misfire_grace_time"),
        ({"misfire_grace_time": True}, "misfire_grace_time"),
        ({"misfire_grace_time": "60"}, "misfire_grace_time"),
        ({"coalesce": 1}, "coalesce must be True or False, not 1"),
    ],
)
def test_a_bad_misfire_policy_raises_at_decoration(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):

        @periodic_task(interval=60, name="periodic.bad_policy", **options)  # type: ignore[arg-type]
        def bad() -> None: ...

    assert "periodic.bad_policy" not in registry.names()
