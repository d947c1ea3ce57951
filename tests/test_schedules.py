"""``queue_max_django.schedules`` against hand-computed times. Pure: no Django involved."""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import pytest

from queue_max_django.schedules import Cron, Interval, InvalidSchedule, parse_schedule, ticks_between

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def ticks(schedule: Cron | Interval, start: dt.datetime, count: int) -> list[dt.datetime]:
    found, current = [], start
    for _ in range(count):
        current = schedule.next_after(current)
        found.append(current)
    return found


def utc_ticks(schedule: Cron | Interval, start: dt.datetime, count: int) -> list[str]:
    return [t.astimezone(UTC).strftime("%Y-%m-%d %H:%M") for t in ticks(schedule, start, count)]


# ------------------------------------------------------------------------------------------------ cron


def test_every_15_minutes() -> None:
    assert ticks(Cron("*/15 * * * *"), utc(2026, 1, 1, 10, 7, 30), 4) == [
        utc(2026, 1, 1, 10, 15),
        utc(2026, 1, 1, 10, 30),
        utc(2026, 1, 1, 10, 45),
        utc(2026, 1, 1, 11, 0),
    ]


def test_strictly_after() -> None:
    assert Cron("*/15 * * * *").next_after(utc(2026, 1, 1, 10, 15)) == utc(2026, 1, 1, 10, 30)
    assert Cron("*/15 * * * *").next_after(utc(2026, 1, 1, 10, 14, 59, 999999)) == utc(2026, 1, 1, 10, 15)


def test_weekdays_at_nine() -> None:
    # 2026-11-27 is a Friday
    assert utc_ticks(Cron("0 9 * * mon-fri"), utc(2026, 11, 27, 9), 3) == [
        "2026-11-30 09:00",
        "2026-12-01 09:00",
        "2026-12-02 09:00",
    ]
    assert Cron("0 9 * * 1-5").next_after(utc(2026, 11, 27, 8, 59)) == utc(2026, 11, 27, 9)


def test_last_minute_of_the_year_rolls_over() -> None:
    assert Cron("* * * * *").next_after(utc(2026, 12, 31, 23, 59)) == utc(2027, 1, 1, 0, 0)
    assert utc_ticks(Cron("59 23 31 12 *"), utc(2026, 12, 31, 23, 59), 2) == [
        "2027-12-31 23:59",
        "2028-12-31 23:59",
    ]


def test_february_29_waits_for_leap_years() -> None:
    assert utc_ticks(Cron("0 0 29 2 *"), utc(2024, 3, 1), 3) == [
        "2028-02-29 00:00",
        "2032-02-29 00:00",
        "2036-02-29 00:00",
    ]
    # 2100 is not a leap year: from 2096 to 2104
    assert Cron("0 0 29 2 *").next_after(utc(2096, 3, 1)) == utc(2104, 2, 29)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # the 13th or any Friday (2026-01-02 and -09 are Fridays, the 13th a Tuesday)
    assert utc_ticks(Cron("0 0 13 * fri"), utc(2026, 1, 1), 4) == [
        "2026-01-02 00:00",
        "2026-01-09 00:00",
        "2026-01-13 00:00",
        "2026-01-16 00:00",
    ]
    # a starred day-of-month (even with a step) makes it AND: Fridays that are odd days
    assert utc_ticks(Cron("0 0 */2 * 5"), utc(2026, 1, 1), 3) == [
        "2026-01-09 00:00",
        "2026-01-23 00:00",
        "2026-02-13 00:00",
    ]


def test_lists_ranges_steps_and_names() -> None:
    cron = Cron("1,2,10-30/10,50/5 */6 1 JAN,jul 7")
    assert cron.minutes == (1, 2, 10, 20, 30, 50, 55)
    assert cron.hours == (0, 6, 12, 18)
    assert cron.months == (1, 7)
    assert cron.weekdays == frozenset({0})
    assert Cron("0 0 * * 0").next_after(utc(2026, 1, 1)) == Cron("0 0 * * 7").next_after(utc(2026, 1, 1))
    assert Cron("@hourly").next_after(utc(2026, 1, 1, 0, 30)) == utc(2026, 1, 1, 1)
    assert Cron("@weekly").next_after(utc(2026, 1, 1)) == utc(2026, 1, 4)  # a Sunday


def test_a_far_match_is_fast() -> None:
    started = time.perf_counter()
    assert Cron("0 0 29 2 *").next_after(utc(2097, 1, 1)) == utc(2104, 2, 29)
    assert time.perf_counter() - started < 2.0  # a walk minute by minute over those 7 years takes minutes


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        Cron("* * * * *").next_after(dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware datetime"):
        Interval(5).next_after(dt.datetime(2026, 1, 1))


# ----------------------------------------------------------------------------------------- time zones


def test_evaluated_in_its_zone() -> None:
    assert Cron("0 9 * * *", tz="Europe/Berlin").next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 8)
    assert Cron("0 9 * * *", tz=BERLIN).next_after(utc(2026, 7, 1)) == utc(2026, 7, 1, 7)
    result = Cron("0 9 * * *", tz=BERLIN).next_after(utc(2026, 7, 1))
    assert result.tzinfo is UTC


def test_a_skipped_wall_time_fires_when_the_gap_ends() -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST (01:00 UTC)
    daily = Cron("30 2 * * *", tz=BERLIN)
    assert utc_ticks(daily, utc(2026, 3, 28, 12), 3) == [
        "2026-03-29 01:00",  # 03:00 CEST, the end of the gap
        "2026-03-30 00:30",
        "2026-03-31 00:30",
    ]
    # ticks in the gap collapse into one at 03:00 CEST, then go on
    found = ticks(Cron("*/30 * * * *", tz=BERLIN), utc(2026, 3, 29, 0, 45), 3)
    assert [t.astimezone(BERLIN).isoformat() for t in found] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]


def test_a_repeated_wall_time_fires_once_unless_the_hour_is_starred() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST goes back to 02:00 CET; 02:00-02:59 happen twice
    assert utc_ticks(Cron("30 2 * * *", tz=BERLIN), utc(2026, 10, 24, 12), 2) == [
        "2026-10-25 00:30",  # 02:30 CEST, the first pass only
        "2026-10-26 01:30",
    ]
    assert utc_ticks(Cron("*/30 * * * *", tz=BERLIN), utc(2026, 10, 24, 23, 45), 6) == [
        "2026-10-25 00:00",  # 02:00 CEST
        "2026-10-25 00:30",  # 02:30 CEST
        "2026-10-25 01:00",  # 02:00 CET
        "2026-10-25 01:30",  # 02:30 CET
        "2026-10-25 02:00",  # 03:00 CET
        "2026-10-25 02:30",
    ]
    # asked from inside the first pass, the second pass is not skipped
    assert Cron("0 * * * *", tz=BERLIN).next_after(utc(2026, 10, 25, 0, 40)) == utc(2026, 10, 25, 1)


# ------------------------------------------------------------------------------------------- interval


def test_interval_ticks_on_the_epoch_grid() -> None:
    assert ticks(Interval(7), utc(2026, 1, 1), 2) == [utc(2026, 1, 1, 0, 0, 7), utc(2026, 1, 1, 0, 0, 14)]
    assert Interval(60).next_after(utc(2026, 1, 1, 0, 0, 59, 999999)) == utc(2026, 1, 1, 0, 1)
    assert Interval(60).next_after(utc(2026, 1, 1, 0, 1)) == utc(2026, 1, 1, 0, 2)
    assert Interval(0.25).next_after(utc(2026, 1, 1, 0, 0, 0, 100)) == utc(2026, 1, 1, 0, 0, 0, 250000)
    assert Interval(dt.timedelta(hours=1)) == Interval(3600)
    berlin = dt.datetime(2026, 1, 1, 1, 30, tzinfo=BERLIN)
    assert Interval(3600).next_after(berlin) == utc(2026, 1, 1, 1)


# -------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "cron '* * * *' has 4 fields; it needs 5: minute hour day-of-month month day-of-week"),
        ("", "cron '' has 0 fields; it needs 5: minute hour day-of-month month day-of-week"),
        ("60 * * * *", "cron '60 * * * *': the minute field '60': 60 is out of range 0-59"),
        ("0 24 * * *", "cron '0 24 * * *': the hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "cron '0 0 0 * *': the day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 * 13 *", "cron '0 0 * 13 *': the month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "cron '0 0 * * 8': the day-of-week field '8': 8 is out of range 0-7"),
        (
            "*/0 * * * *",
            "cron '*/0 * * * *': the minute field '*/0': the step in '*/0' must be a whole number "
            "of at least 1",
        ),
        ("5-1 * * * *", "cron '5-1 * * * *': the minute field '5-1': the range '5-1' runs backwards"),
        ("1,,2 * * * *", "cron '1,,2 * * * *': the minute field '1,,2': an empty list item"),
        (
            "0 0 * * funday",
            "cron '0 0 * * funday': the day-of-week field 'funday': 'funday' is not a number or a name "
            "(sun, mon, tue, wed, thu, fri, sat)",
        ),
        ("x * * * *", "cron 'x * * * *': the minute field 'x': 'x' is not a number"),
        ("0 0 30 2 *", "cron '0 0 30 2 *' never matches: no month in the month field has day 30"),
        ("0 0 31 4,6 *", "cron '0 0 31 4,6 *' never matches: no month in the month field has day 31"),
        (
            "@often",
            "cron '@often': unknown macro; use one of @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly",
        ),
    ],
)
def test_invalid_cron(expression: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Cron(expression)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_impossible_day_with_a_weekday_is_allowed_by_the_or_rule() -> None:
    # day 30 of February never comes, but every Monday of February does
    assert Cron("0 0 30 2 mon").next_after(utc(2026, 1, 1)) == utc(2026, 2, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give a schedule: interval= (seconds) or cron= (five fields)"),
        ({"interval": 5, "cron": "* * * * *"}, "give interval= or cron=, not both"),
        ({"interval": 0}, "interval must be a positive, finite number of seconds, not 0"),
        ({"interval": -1.5}, "interval must be a positive, finite number of seconds, not -1.5"),
        ({"interval": float("inf")}, "interval must be a positive, finite number of seconds, not inf"),
        ({"interval": float("nan")}, "interval must be a positive, finite number of seconds, not nan"),
        ({"interval": "5"}, "interval must be a number of seconds (or a timedelta), not '5' (str)"),
        ({"interval": True}, "interval must be a number of seconds (or a timedelta), not True (bool)"),
        ({"interval": 1e-9}, "interval must be at least one microsecond, not 1e-09"),
        ({"interval": 5, "tz": "UTC"}, "tz= applies to cron= only; an interval counts real seconds"),
        ({"cron": 5}, "cron must be a str of five fields, not 5 (int)"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_invalid_schedule(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(**kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_parse_schedule_gives_the_schedule() -> None:
    assert parse_schedule(interval=30) == Interval(30)
    assert parse_schedule(cron="*/5 * * * *", tz="Europe/Berlin") == Cron("*/5 * * * *", tz=BERLIN)


# ------------------------------------------------------------------------------------------ ticks_between


@pytest.mark.parametrize("schedule", [Interval(900), Cron("*/15 * * * *")], ids=["interval", "cron"])
def test_ticks_between_lists_both_ends_and_keeps_the_latest(schedule: Cron | Interval) -> None:
    start, end = utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 11, 0)
    every = [utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 15), utc(2026, 1, 1, 10, 30),
             utc(2026, 1, 1, 10, 45), utc(2026, 1, 1, 11, 0)]  # fmt: skip
    assert ticks_between(schedule, start, end, limit=100) == (every, 0)
    assert ticks_between(schedule, start, end, limit=2) == (every[-2:], 3)
    assert ticks_between(schedule, start, end, limit=1) == (every[-1:], 4)
    one_us = dt.timedelta(microseconds=1)
    assert ticks_between(schedule, start + one_us, end - one_us, limit=100) == (every[1:-1], 0)
    assert ticks_between(schedule, start + one_us, start + dt.timedelta(minutes=14), limit=5) == ([], 0)
    assert ticks_between(schedule, end, start, limit=5) == ([], 0)


def test_ticks_between_of_a_fine_interval_over_a_long_span_costs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Half a day of a 1 ms interval (43 million ticks): the latest 3 by arithmetic, no walk."""
    end = utc(2026, 1, 1, 12, 0)

    def no_walk(self: Interval, after: dt.datetime) -> dt.datetime:
        raise AssertionError("walked tick by tick")

    monkeypatch.setattr(Interval, "next_after", no_walk)
    due, left_out = ticks_between(Interval(0.001), end - dt.timedelta(hours=12), end, limit=3)
    assert due == [end - dt.timedelta(milliseconds=2), end - dt.timedelta(milliseconds=1), end]
    assert left_out == 12 * 3600 * 1000 + 1 - 3


def test_ticks_between_across_a_repeated_hour_counts_both_passes() -> None:
    """Autumn in Berlin: */30 ticks on both passes of 02:00-03:00, each an instant of its own."""
    start, end = utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 30)  # 02:00 CEST .. 02:30 CET
    due, left_out = ticks_between(Cron("*/30 * * * *", tz=BERLIN), start, end, limit=10)
    assert due == [utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 0),
                   utc(2026, 10, 25, 1, 30)]  # fmt: skip
    assert left_out == 0
