"""``Problem``: one mistake the system checks report (checks.py, each store kind's checks, the metrics
check), before it is a Django ``CheckMessage``; and how the problem of a ``QUEUE_MAX`` value is worded (a
wrong type, a number out of range), which the settings' checks and each store kind's share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .defaults import DATA_DIR_NAME, DEFAULTS

PREFIX = "queue_max_django"  # every check id starts with it: queue_max_django.E001 ...


@dataclass(frozen=True)
class Problem:
    """One mistake in the settings or the store they point at: a check id, what is wrong, how to fix it."""

    id: str
    msg: str
    hint: str

    @property
    def is_error(self) -> bool:
        return self.id.rpartition(".")[2].startswith("E")


@dataclass(frozen=True)
class _Number:
    kind: Literal["int", "seconds"]
    minimum: float
    maximum: float | None
    optional: bool = False

    @property
    def description(self) -> str:
        text = "an int" if self.kind == "int" else "a number of seconds"
        return f"{text} or None" if self.optional else text


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(number)


def _path(*keys: object) -> str:
    return "QUEUE_MAX" + "".join(f"[{key!r}]" for key in keys)


def _default_text(keys: tuple[str, ...]) -> str:
    if keys == ("DATA_DIR",):
        return f"BASE_DIR / {DATA_DIR_NAME!r}"
    value: Any = DEFAULTS
    for key in keys:
        value = value[key]
    return repr(dict(value) if isinstance(value, Mapping) else value)


def _or_remove(keys: tuple[str, ...]) -> str:
    if keys[0] == "QUEUE_RATE_LIMITS" and len(keys) == 2:
        return "or remove it to leave that queue without a limit of its own"
    return f"or remove it to use the default ({_default_text(keys)})"


def _wrong_type(keys: tuple[str, ...], value: Any, expected: str) -> Problem:
    return Problem(
        f"{PREFIX}.E003",
        f"{_path(*keys)} must be {expected}, not {value!r} ({type(value).__name__}).",
        f"Set {_path(*keys)} to {expected}, {_or_remove(keys)}.",
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_problems(keys: tuple[str, ...], value: Any, spec: _Number) -> list[Problem]:
    if value is None and spec.optional:
        return []
    if not _is_number(value) or (spec.kind == "int" and not isinstance(value, int)):
        return [_wrong_type(keys, value, spec.description)]
    low, high = spec.minimum, spec.maximum
    if math.isfinite(value) and low <= value and (high is None or value <= high):
        return []
    span = f"at least {_fmt(low)}" if high is None else f"from {_fmt(low)} to {_fmt(high)}"
    return [
        Problem(
            f"{PREFIX}.E004",
            f"{_path(*keys)} must be {span}, not {value!r}.",
            f"Set {_path(*keys)} to a value in that range, {_or_remove(keys)}.",
        )
    ]
