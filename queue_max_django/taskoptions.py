"""The checks of a task's own options (``@task(...)``, ``Task.using(...)``): ``ValueError`` naming the bad
one when the task is made or copied, before any job of it is stored."""

from __future__ import annotations

import math

from .engine.job import PRIORITY_MAX, PRIORITY_MIN
from .engine.validate import validate_queue_name


def check_options(
    *,
    priority: int,
    queue: str,
    max_retries: int | None,
    retry_backoff: float | None,
    timeout: float | None,
) -> None:
    if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}")
    validate_queue_name(queue)
    if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
        raise ValueError(f"max_retries must be None or an int >= 0, not {max_retries!r}")
    for label, value, minimum in (("retry_backoff", retry_backoff, 0.0), ("timeout", timeout, 0.001)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < minimum
        ):
            raise ValueError(f"{label} must be None or a number of seconds >= {minimum:g}, not {value!r}")
