"""Jobs as people read them: arguments and results pretty-printed, times as aware datetimes, attempts with
the worker and the error of each. Text only: the templates escape all of it."""

from __future__ import annotations

import datetime as dt
import pprint
from dataclasses import dataclass
from typing import Any

from ..engine import Job, State
from ..runner import _arguments as task_arguments

WIDTH = 100  # characters per line of pretty-printed values


def pretty(value: Any) -> str:
    return pprint.pformat(value, width=WIDTH, sort_dicts=False)


def when(seconds: float | None) -> dt.datetime | None:
    """Unix seconds -> an aware datetime (templates show it in the current time zone)."""
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


@dataclass(frozen=True)
class Arguments:
    """A job's payload: the positional and keyword arguments of a task's job, else the raw payload."""

    args: list[str]  # each argument pretty-printed
    kwargs: list[tuple[str, str]]  # (name, pretty-printed value)
    raw: str | None  # the whole payload pretty-printed, when it is not a task's {"args", "kwargs"}


def arguments(payload: Any) -> Arguments:
    unpacked = task_arguments(payload)
    if unpacked is None:
        return Arguments([], [], pretty(payload))
    args, kwargs = unpacked
    return Arguments(
        [pretty(arg) for arg in args], [(key, pretty(value)) for key, value in kwargs.items()], None
    )


def short(payload: Any, limit: int = 80) -> str:
    """A one-line summary of the arguments for lists: ``(1, 2, to='a@b')``."""
    unpacked = task_arguments(payload)
    if unpacked is None:
        text = repr(payload)
    else:
        args, kwargs = unpacked
        text = ", ".join([repr(arg) for arg in args] + [f"{key}={value!r}" for key, value in kwargs.items()])
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job: who claimed it and how it failed (None for the attempt still running or that
    succeeded). The engine keeps the worker ids of the last 10 attempts."""

    number: int
    worker_id: str | None
    error_type: str | None
    error: str | None


def attempts(job: Job) -> list[Attempt]:
    """Each attempt with its worker and error. Both histories keep the latest entries, so they are matched
    from the end: the last error belongs to the last attempt, unless that one is running or succeeded."""
    count = max(job.attempts, len(job.worker_ids), len(job.errors))
    failed_until = count if job.state in (State.FAILED, State.PENDING, State.SCHEDULED) else count - 1
    workers: dict[int, str] = {count - i: worker for i, worker in enumerate(reversed(job.worker_ids))}
    errors = {failed_until - i: error for i, error in enumerate(reversed(job.errors))}
    return [
        Attempt(number, workers.get(number), *errors.get(number, (None, None)))
        for number in range(1, count + 1)
    ]
