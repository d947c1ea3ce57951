"""Jobs as people read them: arguments by parameter name and results as JSON, error types by their class
name, times as aware datetimes, attempts with the worker and the error of each. Text only: the templates
escape all of it."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import pprint
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..encryption.jobs import ENCRYPTED
from ..engine import Job, State
from ..engine.job import utc_datetime
from ..engine.sealing import is_sealed
from ..running.outcome import DJANGO_TASK_KEY
from ..running.registry import registry
from ..running.runner import _arguments as task_arguments

WIDTH = 100  # characters per line of pretty-printed values


def pretty(value: Any) -> str:
    return pprint.pformat(value, width=WIDTH, sort_dicts=False)


def duration(seconds: float) -> str:
    """A length of time for people: "4.2 s", "38 s", "3 min 5 s", "2 h 10 min", "1 day 4 h", "3 days 0 h"."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    days = whole // 86400
    return f"{days} day{'' if days == 1 else 's'} {whole % 86400 // 3600} h"


def when(seconds: float | None) -> dt.datetime | None:
    """Unix seconds -> an aware datetime (templates show it in the current time zone); None, shown as no
    time, for one no datetime can hold (a row edited past the engine: year 287168): a page still answers."""
    return utc_datetime(seconds)


@dataclass(frozen=True)
class Arguments:
    """A job's arguments as people read them: each value as JSON, labelled by its parameter's name where
    this process knows the task (else by position, keyword arguments by their keyword); a payload that is
    no task's call is shown whole, as stored."""

    values: list[tuple[str, str]]  # (label, the value as JSON)
    by_name: bool  # the labels are the task's parameter names
    django_task: str | None  # the backend alias of a job of Django's Tasks framework (django.tasks)
    raw: str | None  # the whole payload pretty-printed, when it is no task's call


def arguments(payload: Any, name: str | None) -> Arguments:
    """The arguments of a job of task ``name`` with this ``payload``: an ``@task`` job's ``{"args",
    "kwargs"}``, or a ``django.tasks`` job's (backend.py's payload), else the raw payload."""
    django_alias = _django_alias(payload)
    unpacked = task_arguments(_call_part(payload) if django_alias is not None else payload)
    if unpacked is None:
        return Arguments([], False, django_alias, pretty(payload))
    args, kwargs = unpacked
    function, skip = _function(name, payload, django_alias)
    named = _by_parameter(function, skip, args, kwargs)
    if named is not None:
        return Arguments([(label, as_json(value)) for label, value in named], True, django_alias, None)
    values = [(str(index), as_json(arg)) for index, arg in enumerate(args)]
    values += [(f"{key}=", as_json(value)) for key, value in kwargs.items()]
    return Arguments(values, False, django_alias, None)


JSON_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


def as_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON (what payloads and results are: msgpack data), bytes and other non-JSON values
    inside it by their repr; a value JSON cannot show (bytes or another non-JSON value as the whole value, a
    dict with keys that are not text, which JSON would turn into text) by its repr, pretty-printed."""
    if not isinstance(value, JSON_TYPES) or not _keys_are_text(value):
        return pretty(value)
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return pretty(value)


def _keys_are_text(value: Any) -> bool:
    """Whether every dict in ``value`` (nested in lists and dicts) has text keys only."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def short(payload: Any, limit: int = 80) -> str:
    """A one-line summary of the arguments for lists: ``1, 2, to="a@b"`` (values as JSON); an encrypted
    job's: ``(encrypted)``."""
    if is_sealed(payload):
        return ENCRYPTED
    django_alias = _django_alias(payload)
    unpacked = task_arguments(_call_part(payload) if django_alias is not None else payload)
    if unpacked is None:
        text = as_json(payload, indent=None)
    else:
        args, kwargs = unpacked
        text = ", ".join(
            [as_json(arg, indent=None) for arg in args]
            + [f"{key}={as_json(value, indent=None)}" for key, value in kwargs.items()]
        )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _django_alias(payload: Any) -> str | None:
    """The backend alias of a ``django.tasks`` job's payload (its ``DJANGO_TASK_KEY`` form), else None."""
    if type(payload) is not dict or DJANGO_TASK_KEY not in payload:
        return None
    return str(payload.get("backend"))


def _call_part(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: payload[key] for key in ("args", "kwargs") if key in payload}


def _function(
    name: str | None, payload: Any, django_alias: str | None
) -> tuple[Callable[..., Any] | None, int]:
    """The function this process runs for the job, and how many leading parameters the call does not
    fill (a ``django.tasks`` task that takes its context). Only tasks registered here: nothing is imported
    from a job's data."""
    if django_alias is None:
        found = registry.get(name) if name else None
        return (None if found is None else found.func), 0
    try:
        from ..backend import lookup
    except ImportError:  # Django < 6: no django.tasks here
        return None, 0
    django_task = lookup(payload.get("task"), django_alias)
    if django_task is None:
        return None, 0
    return django_task.func, 1 if django_task.takes_context else 0


def _by_parameter(
    function: Callable[..., Any] | None, skip: int, args: list[Any], kwargs: dict[str, Any]
) -> list[tuple[str, Any]] | None:
    """The call's values by the function's parameter names (``*args`` and ``**kwargs`` as one value each),
    or None when the function is unknown or the call does not fit its signature (it will fail)."""
    if function is None:
        return None
    try:
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())[skip:]
        bound = signature.replace(parameters=parameters).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    labels = {
        parameter.name: f"*{parameter.name}"
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL
        else f"**{parameter.name}"
        if parameter.kind is inspect.Parameter.VAR_KEYWORD
        else parameter.name
        for parameter in parameters
    }
    return [
        (labels[key], list(value) if isinstance(value, tuple) else value)
        for key, value in bound.arguments.items()
    ]


def class_name(error_type: str | None) -> str:
    """An error type as lists show it: the class name alone (``Cancelled`` for
    ``queue_max_django.engine.cancels.Cancelled``, as built-in ``ValueError`` is stored), "" for none. The
    dotted path stays in the cell's title and on the job's page."""
    return (error_type or "").rsplit(".", 1)[-1]


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


def allowed_attempts(job: Job) -> int:
    """How many attempts the job may have: its first and ``max_retries`` more."""
    return job.max_retries + 1


@dataclass(frozen=True)
class ErrorBox:
    """How a job's page heads the error it carries: a dead letter's error is the job's; any other job's is
    that of an earlier attempt (the job succeeded since, or will be tried again)."""

    heading: str
    note: str
    earlier: bool


def error_box(job: Job) -> ErrorBox:
    allowed = allowed_attempts(job)
    if job.cancelled:
        note = f"The job was cancelled at attempt {job.attempts} of {allowed}: not a failure, not retried."
        return ErrorBox("Cancelled", note, False)
    if job.state is State.FAILED:
        note = f"The job failed for good after {job.attempts} of {allowed} attempts."
        return ErrorBox("Error", note, False)
    if job.state is State.DONE:
        return ErrorBox(
            "An earlier attempt failed",
            f"The job succeeded at attempt {job.attempts} of {allowed}: this is the error of an earlier "
            f"attempt, not of the job.",
            True,
        )
    if job.state is State.RUNNING:
        note = f"Attempt {job.attempts} of {allowed} is running now: this is the error of the one before."
    else:
        note = f"It will be tried again: attempt {job.attempts + 1} of {allowed}."
    return ErrorBox("The last attempt failed", note, True)


def cancelled(job: Job) -> dict[str, Any] | None:
    """``{"by": "alice", "at": <datetime>}`` for a job cancelled while it ran (``Job.cancelled``: a dead
    letter by its state, but an outcome someone asked for, not a failure; either may be None when it was
    not noted); None for any other job."""
    if not job.cancelled:
        return None
    note = job.cancel_note
    return {"by": None if note is None else note.by, "at": None if note is None else when(note.at)}
