"""Fixture tasks of Django's Tasks framework (``django.tasks``, Django >= 6.0), for test_backend.py.

Not autodiscovered (only ``tasks.py`` is): the test module imports it. The same functions run under Django's
``ImmediateBackend`` and under ``QueueMaxBackend``: task code moves between backends unchanged.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from django.tasks import TaskContext, task

from queue_max_django.engine import Retry


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def pair(a: int, b: int) -> tuple[int, int]:
    return (a, b)  # a tuple: Django normalizes it to a JSON list


@task(priority=-10)
def low() -> str:
    return "low"


@task(priority=50)
def high() -> str:
    return "high"


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def retry_in_an_hour() -> None:
    raise Retry(delay=3600, reason="not yet")


@task
def unstorable() -> Any:
    return {1, 2}  # a set: not JSON data, so not a return value Django accepts


@task
def exits(code: int) -> None:
    sys.exit(code)  # as argparse or click code given bad arguments does


@task
def interrupted() -> None:
    raise KeyboardInterrupt("from the task")


@task(takes_context=True)
def with_context(context: TaskContext[Any, Any], value: int) -> dict[str, Any]:
    return {
        "attempt": context.attempt,
        "id_is_set": bool(context.task_result.id),
        "status": str(context.task_result.status),
        "value": value,
    }


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b
