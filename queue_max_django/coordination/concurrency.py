"""Concurrency limits in the Django layer: ``@task(concurrency=N, concurrency_key=...)`` and
``QUEUE_MAX["QUEUE_CONCURRENCY"]``, turned into the engine's per-job limits at enqueue
(``engine/concurrency.py``); the setting's system check (``queue_max_django.E028``) is ``conf/checks.py``'s.

A job's limits, broadest first: its queue's (``"queue:<queue>"``, from ``QUEUE_CONCURRENCY``), then its
task's: ``"task:<name>"`` (``concurrency`` alone: at most N of the task), or ``"task:<name>:<key>"`` (with
``concurrency_key``: at most N per key). The key is evaluated at enqueue from the call's arguments and
stored with the job; a worker never evaluates it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..engine.concurrency import MAX_KEY, MAX_N, check_limits
from ..engine.validate import bad_character

QUEUE_KEY = "queue:"
TASK_KEY = "task:"
KeyFunction = Callable[..., Any]
T = TypeVar("T")


class TaskConcurrency:
    """A task's ``concurrency`` and ``concurrency_key``, checked when the task is declared:
    ``concurrency`` an int from 1 (``ValueError`` otherwise, ``TypeError`` for another type);
    ``concurrency_key`` None, the name of one of the task's parameters, or a callable that takes the call's
    arguments as the task does and returns the key (a non-empty str)."""

    def __init__(
        self, task_name: str, signature: inspect.Signature, concurrency: Any, concurrency_key: Any
    ) -> None:
        if concurrency is None:
            if concurrency_key is not None:
                raise ValueError(
                    f"task {task_name!r}: concurrency_key needs concurrency=N (the limit per key)"
                )
        elif type(concurrency) is not int:
            raise TypeError(f"task {task_name!r}: concurrency must be an int >= 1, not {concurrency!r}")
        elif not 1 <= concurrency <= MAX_N:
            raise ValueError(
                f"task {task_name!r}: concurrency must be an int from 1 to {MAX_N}, not {concurrency}"
            )
        if isinstance(concurrency_key, str):
            parameter = signature.parameters.get(concurrency_key)
            if parameter is None or parameter.kind in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                names = [
                    name
                    for name, p in signature.parameters.items()
                    if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
                ]
                raise ValueError(
                    f"task {task_name!r}: concurrency_key={concurrency_key!r} names no parameter of the task "
                    f"(its parameters: {', '.join(names) or 'none'})"
                )
        elif concurrency_key is not None and not callable(concurrency_key):
            raise TypeError(
                f"task {task_name!r}: concurrency_key must be a parameter name (str) or a callable of the "
                f"call's arguments, not {concurrency_key!r}"
            )
        self.task_name = task_name
        self.signature = signature
        self.limit: int | None = concurrency
        self.key: str | KeyFunction | None = concurrency_key

    def key_value(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key of one call: its argument's value (a str, or an int as its digits), or what the key
        function returns for it (a non-empty str). ``TypeError``/``ValueError`` naming the task otherwise,
        before anything is written."""
        where = f"task {self.task_name!r}"
        if isinstance(self.key, str):
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            value = bound.arguments[self.key]
            if type(value) is int:
                value = str(value)
            elif not isinstance(value, str):
                raise TypeError(
                    f"{where}: its concurrency key, argument {self.key!r}, must be a str or an int, not "
                    f"{type(value).__name__} ({value!r})"
                )
        else:
            assert self.key is not None
            try:
                value = self.key(*args, **kwargs)
            except Exception as exc:
                raise ValueError(f"{where}: its concurrency_key function raised {exc!r}") from exc
            if not isinstance(value, str):
                raise TypeError(
                    f"{where}: its concurrency_key function must return a str, not {type(value).__name__} "
                    f"({value!r})"
                )
        room = MAX_KEY - len(TASK_KEY) - len(self.task_name) - 1
        if not value or len(value) > room or bad_character(value) is not None:
            raise ValueError(
                f"{where}: a concurrency key must be a non-empty str of at most {room} characters with no "
                f"control character, not {value!r}"
            )
        return value


def job_limits(
    task: TaskConcurrency | None,
    queue: str,
    queue_limits: Mapping[str, int],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[tuple[str, int], ...] | None:
    """The engine's ``concurrency`` option for one call of a task (None: no limit applies)."""
    limits: list[tuple[str, int]] = []
    queue_limit = queue_limits.get(queue)
    if queue_limit is not None:
        limits.append((QUEUE_KEY + queue, queue_limit))
    if task is not None and task.limit is not None:
        key = TASK_KEY + task.task_name
        if task.key is not None:
            key += ":" + task.key_value(args, kwargs)
        limits.append((key, task.limit))
    return check_limits(limits) if limits else None


def store_by_limits(limits: list[Any], store: Callable[[list[int], Any], list[T]]) -> list[T]:
    """``.map()`` of items under different limits (a key per item): ``store(indexes, limits)`` once per
    distinct limits, in the order they first appear, with the indexes of its items. -> what ``store``
    gave for each item, in the items' order."""
    parts: dict[Any, list[int]] = {}
    for index, item in enumerate(limits):
        parts.setdefault(item, []).append(index)
    out: list[Any] = [None] * len(limits)
    for item, indexes in parts.items():
        for index, done in zip(indexes, store(indexes, item), strict=True):
            out[index] = done
    return out
