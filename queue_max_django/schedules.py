"""Schedules of periodic tasks: ``Interval(seconds)`` and ``Cron("*/15 * * * *", tz=...)``. Pure: no Django.

Every schedule answers one question, ``next_after(after) -> datetime``: the first due time (in UTC)
strictly after the aware datetime ``after``. A tick is identified by its due time, so several schedulers
asking the same question get the same answer (the scheduler of ``queue_worker`` builds on that).

- ``Interval``: ticks at the unix epoch plus whole multiples of the interval (UTC), not "seconds after the
  worker started": every process agrees on the ticks.
- ``Cron``: the standard five fields ``minute hour day-of-month month day-of-week`` with ``*``, lists
  (``1,2``), ranges (``1-5``), steps (``*/15``, ``1-30/5``, ``5/15`` = ``5-59/15``), month and day names
  (``jan``..``dec``, ``sun``..``sat``), day-of-week 0-7 (0 and 7 are Sunday) and the macros ``@yearly``
  (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``. When both
  day-of-month and day-of-week are restricted (neither starts with ``*``) a day matches if EITHER matches;
  otherwise both must. An expression that can never match (``0 0 30 2 *``) is refused at parse time with a
  ``ValueError``, so ``next_after`` always returns a datetime.

Time zones: a cron expression is evaluated on the wall clock of its zone (default UTC). Across a daylight
saving change:

- a wall time that does not exist (the hour skipped in spring) fires once, at the instant the gap ends
  (``30 2 * * *`` in Europe/Berlin runs at 03:00 CEST that day; ticks falling in the gap collapse into one);
- a wall time that exists twice (the hour repeated in autumn) fires once, at its first occurrence, unless the
  hour field starts with ``*``: then it fires on both passes (``*/15 * * * *`` keeps ticking every 15 minutes
  of real time, ``30 2 * * *`` still runs once). This is Vixie cron's rule.

``next_after`` returns UTC datetimes for both kinds: compare and store instants, not wall times (Python's
``==`` between zones is always False for a wall time that exists twice, PEP 495). ``ticks_between`` lists
the due times of a span, the latest N of them: what a scheduler catching up missed ticks asks.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Cron", "Interval", "InvalidSchedule", "Schedule", "parse_schedule", "ticks_between"]

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_MINUTE = dt.timedelta(minutes=1)
_SEARCH_YEARS = 400  # the Gregorian calendar repeats every 400 years: no match within them means never


class InvalidSchedule(ValueError):
    """A schedule that does not parse; the message names the problem."""


@runtime_checkable
class Schedule(Protocol):
    def next_after(self, after: dt.datetime) -> dt.datetime:
        """The first due time strictly after ``after`` (aware), in UTC."""
        ...


def _require_aware(after: dt.datetime) -> None:
    if not isinstance(after, dt.datetime):
        raise TypeError(f"next_after takes an aware datetime, not {after!r}")
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError(f"next_after takes an aware datetime, not the naive {after.isoformat()}")


# --------------------------------------------------------------------------------------------- interval


class Interval:
    """Every ``seconds`` (a positive finite number, or a timedelta), on the epoch's grid, to the
    microsecond."""

    def __init__(self, seconds: float | dt.timedelta) -> None:
        value: object = seconds.total_seconds() if isinstance(seconds, dt.timedelta) else seconds
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidSchedule(
                f"interval must be a number of seconds (or a timedelta), not {seconds!r} "
                f"({type(seconds).__name__})"
            )
        if not math.isfinite(value) or value <= 0:
            raise InvalidSchedule(f"interval must be a positive, finite number of seconds, not {value!r}")
        if round(value * 1_000_000) < 1:
            raise InvalidSchedule(f"interval must be at least one microsecond, not {value!r}")
        self.seconds: float = value

    def __repr__(self) -> str:
        return f"Interval({self.seconds!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Interval) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(self.seconds)

    @property
    def _step_us(self) -> int:
        return round(self.seconds * 1_000_000)

    def next_after(self, after: dt.datetime) -> dt.datetime:
        _require_aware(after)
        step = self._step_us
        elapsed = (after - EPOCH) // dt.timedelta(microseconds=1)
        return EPOCH + dt.timedelta(microseconds=(elapsed // step + 1) * step)

    def __str__(self) -> str:
        return f"every {self.seconds:g}s"


# ------------------------------------------------------------------------------------------------- cron

_MONTHS = {name.lower(): n for n, name in enumerate(calendar.month_abbr) if name}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class _Field:
    label: str
    low: int
    high: int
    names: dict[str, int] = field(default_factory=dict)


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _DAYS),
)


def _value(spec: _Field, text: str) -> int:
    lowered = text.lower()
    if lowered in spec.names:
        return spec.names[lowered]
    if not text.isdigit():
        names = f" or a name ({', '.join(spec.names)})" if spec.names else ""
        raise InvalidSchedule(f"{text!r} is not a number{names}")
    number = int(text)
    if not spec.low <= number <= spec.high:
        raise InvalidSchedule(f"{number} is out of range {spec.low}-{spec.high}")
    return number


def _parse_field(spec: _Field, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise InvalidSchedule("an empty list item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise InvalidSchedule(f"the step in {item!r} must be a whole number of at least 1")
            step = int(step_text)
        if base == "*":
            low, high = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _value(spec, first), _value(spec, last)
            if low > high:
                raise InvalidSchedule(f"the range {base!r} runs backwards")
        else:
            low = _value(spec, base)
            high = spec.high if slash else low  # "5/15" is 5-59/15, as in cronie
        values.update(range(low, high + 1, step))
    return frozenset(values)


def _zone(tz: str | dt.tzinfo | None) -> dt.tzinfo:
    if tz is None:
        return UTC
    if isinstance(tz, dt.tzinfo):
        return tz
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidSchedule(f"unknown time zone {tz!r}") from None
    raise InvalidSchedule(f"tz must be a time zone name or a tzinfo, not {tz!r} ({type(tz).__name__})")


class Cron:
    """A five-field cron expression evaluated in the zone ``tz`` (a zoneinfo name or a tzinfo; default
    UTC). Raises ``InvalidSchedule`` (a ``ValueError``) naming the field and the problem."""

    def __init__(self, expression: str, tz: str | dt.tzinfo | None = None) -> None:
        if not isinstance(expression, str):
            raise InvalidSchedule(
                f"cron must be a str of five fields, not {expression!r} ({type(expression).__name__})"
            )
        self.expression = expression
        self.tz = _zone(tz)
        text = expression.strip()
        if text.startswith("@"):
            if text.lower() not in _MACROS:
                raise InvalidSchedule(f"cron {expression!r}: unknown macro; use one of {', '.join(_MACROS)}")
            text = _MACROS[text.lower()]
        parts = text.split()
        if len(parts) != 5:
            raise InvalidSchedule(
                f"cron {expression!r} has {len(parts)} field{'' if len(parts) == 1 else 's'}; it needs 5: "
                f"minute hour day-of-month month day-of-week"
            )
        sets: list[frozenset[int]] = []
        for spec, part in zip(_FIELDS, parts, strict=True):
            try:
                sets.append(_parse_field(spec, part))
            except InvalidSchedule as exc:
                raise InvalidSchedule(
                    f"cron {expression!r}: the {spec.label} field {part!r}: {exc}"
                ) from None
        minutes, hours, days, months, weekdays = sets
        self.minutes = tuple(sorted(minutes))
        self.hours = tuple(sorted(hours))
        self.days = days
        self.months = tuple(sorted(months))
        self.weekdays = frozenset(d % 7 for d in weekdays)
        self._hour_star = parts[1].startswith("*")
        dom_star, dow_star = parts[2].startswith("*"), parts[4].startswith("*")
        self._either_day = not dom_star and not dow_star  # both restricted: either matches
        if dow_star or not self._either_day:
            longest = max(29 if m == 2 else calendar.monthrange(2001, m)[1] for m in self.months)
            if min(self.days) > longest:
                raise InvalidSchedule(
                    f"cron {expression!r} never matches: no month in the month field has day {min(self.days)}"
                )

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, tz={self.tz!s})"

    def __str__(self) -> str:
        return f"cron {self.expression!r} ({self.tz!s})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cron) and (other.expression, str(other.tz)) == (
            self.expression,
            str(self.tz),
        )

    def __hash__(self) -> int:
        return hash((self.expression, str(self.tz)))

    # ------------------------------------------------------------------ matching

    def _day_matches(self, day: dt.date) -> bool:
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        return (dom or dow) if self._either_day else (dom and dow)

    def _next_wall(self, start: dt.datetime) -> dt.datetime:
        """The first matching naive wall time at or after ``start`` (whole minutes)."""
        limit = start.year + _SEARCH_YEARS
        t = start.replace(second=0, microsecond=0)
        if t < start:
            t += _MINUTE
        while True:
            if t.year > limit:  # unreachable once __init__ accepted the expression
                raise InvalidSchedule(f"cron {self.expression!r} matches no time in {_SEARCH_YEARS} years")
            if t.month not in self.months:
                month = _first_at_least(self.months, t.month)
                t = dt.datetime(t.year + (month is None), month or self.months[0], 1)
                continue
            if not self._day_matches(t.date()):
                t = dt.datetime(t.year, t.month, t.day) + dt.timedelta(days=1)
                continue
            if t.hour not in self.hours:
                hour = _first_at_least(self.hours, t.hour)
                t = _next_day(t) if hour is None else t.replace(hour=hour, minute=0)
                continue
            minute = _first_at_least(self.minutes, t.minute)
            if minute is None:
                t = t.replace(minute=0) + dt.timedelta(hours=1)
                continue
            return t.replace(minute=minute)

    def _instants(self, wall: dt.datetime) -> list[dt.datetime]:
        """The instants at which the wall time ``wall`` fires (see the module's notes on DST)."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        second = wall.replace(tzinfo=self.tz, fold=1)
        if first.utcoffset() == second.utcoffset():
            return [first]
        if first.astimezone(UTC).astimezone(self.tz).replace(tzinfo=None) == wall:  # exists twice
            return [first, second] if self._hour_star else [first]
        return [_gap_end(second.astimezone(UTC), first.astimezone(UTC), self.tz)]

    def next_after(self, after: dt.datetime) -> dt.datetime:
        _require_aware(after)
        local = after.astimezone(self.tz)
        offsets = (local.replace(fold=0).utcoffset(), local.replace(fold=1).utcoffset())
        assert offsets[0] is not None and offsets[1] is not None
        spread = abs(offsets[1] - offsets[0])  # not zero only inside a repeated hour
        # Inside a repeated hour the second pass has earlier wall times than ``after``: look back that far.
        wall = local.replace(tzinfo=None, second=0, microsecond=0) - spread
        best: dt.datetime | None = None
        stop: dt.datetime | None = None
        while True:
            wall = self._next_wall(wall)
            if stop is not None and wall > stop:
                assert best is not None
                return best
            for instant in self._instants(wall):
                # In UTC: Python compares two datetimes of one tzinfo by wall time, ignoring fold.
                instant = instant.astimezone(UTC)
                if instant > after and (best is None or instant < best):
                    best = instant
            if best is not None and stop is None:
                stop = wall + spread
            wall += _MINUTE


def _first_at_least(values: Sequence[int], value: int) -> int | None:
    for candidate in values:
        if candidate >= value:
            return candidate
    return None


def _next_day(t: dt.datetime) -> dt.datetime:
    return dt.datetime(t.year, t.month, t.day) + dt.timedelta(days=1)


def _gap_end(before: dt.datetime, after: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """The instant a clock change happens, between ``before`` (old offset) and ``after`` (new offset), to
    the second: the first instant whose wall time follows the skipped ones."""

    def offset(instant: dt.datetime) -> dt.timedelta | None:
        return instant.astimezone(tz).utcoffset()

    old = offset(before)
    low, high = int(before.timestamp()), math.ceil(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if offset(dt.datetime.fromtimestamp(middle, UTC)) == old:
            low = middle
        else:
            high = middle
    return dt.datetime.fromtimestamp(high, UTC).astimezone(tz)


# ------------------------------------------------------------------------------------------------ ticks


def ticks_between(
    schedule: Schedule, start: dt.datetime, end: dt.datetime, *, limit: int
) -> tuple[list[dt.datetime], int]:
    """The due times of ``schedule`` from ``start`` to ``end`` (both included, aware): the latest ``limit``
    of them, oldest first, and how many earlier ones were left out. An ``Interval`` answers by arithmetic
    (any number of ticks costs the same); other schedules are walked with ``next_after``."""
    _require_aware(start)
    _require_aware(end)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit!r}")
    if end < start:
        return [], 0
    if isinstance(schedule, Interval):
        step = schedule._step_us
        first = -(-((start - EPOCH) // dt.timedelta(microseconds=1)) // step)  # ceil: the first at or after
        last = ((end - EPOCH) // dt.timedelta(microseconds=1)) // step
        if last < first:
            return [], 0
        kept_from = max(first, last - limit + 1)
        due = [EPOCH + dt.timedelta(microseconds=k * step) for k in range(kept_from, last + 1)]
        return due, kept_from - first
    found: deque[dt.datetime] = deque(maxlen=limit)
    seen = 0
    tick = schedule.next_after(start - dt.timedelta(microseconds=1))
    while tick <= end:
        found.append(tick)
        seen += 1
        tick = schedule.next_after(tick)
    return list(found), seen - len(found)


# ------------------------------------------------------------------------------------------------ parse


def parse_schedule(
    interval: float | dt.timedelta | None = None,
    cron: str | None = None,
    tz: str | dt.tzinfo | None = None,
) -> Interval | Cron:
    """The schedule of ``@periodic_task``: exactly one of ``interval`` (seconds) and ``cron`` (with its
    zone ``tz``). Raises ``InvalidSchedule`` (a ``ValueError``) naming the problem."""
    if interval is None and cron is None:
        raise InvalidSchedule("give a schedule: interval= (seconds) or cron= (five fields)")
    if interval is not None and cron is not None:
        raise InvalidSchedule("give interval= or cron=, not both")
    if interval is not None:
        if tz is not None:
            raise InvalidSchedule("tz= applies to cron= only; an interval counts real seconds")
        return Interval(interval)
    assert cron is not None
    return Cron(cron, tz)
