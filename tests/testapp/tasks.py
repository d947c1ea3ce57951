"""Fixture tasks for the Django tests (found by autodiscovery: this app is in tests/settings.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from queue_max_django import retryable_task, task
from queue_max_django.engine import Permanent

CALLS: list[Any] = []  # what record_call saw, in order
ATTEMPTS: Counter[str] = Counter()  # attempts per key of flaky / flaky_direct


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def record_call(value: Any) -> None:
    CALLS.append(value)


@task(name="testapp.custom")
def custom_name() -> str:
    return "custom"


@task(priority=10, queue="mail", max_retries=0, timeout=5)
def send_mail(to: str, subject: str = "hello") -> str:
    return f"{to}: {subject}"


@task
def fail_always(message: str) -> None:
    raise ValueError(message)


@task
def fail_permanent() -> None:
    raise Permanent("bad input")


@task(permanent_on=(KeyError,))
def lookup(key: str) -> Any:
    return {}[key]


@task(retry_backoff=100)
def slow_backoff() -> None:
    raise RuntimeError("try later")


@task(max_retries=3)
def flaky(key: str, failures: int) -> str:
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] <= failures:
        raise ConnectionError(f"attempt {ATTEMPTS[key]} failed")
    return "ok"


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def unstorable_result() -> Any:
    return object()


@task(rate_limit="10/m")
def limited() -> str:
    return "limited"


@task(circuit_breaker={"THRESHOLD": 2, "TIMEOUT": 30})
def guarded() -> str:
    return "guarded"


@task(circuit_breaker=True)
def guarded_default() -> str:
    return "guarded"


@retryable_task(max_retries=2, retry_on=[ConnectionError], retry_backoff=0.5)
def flaky_direct(key: str, failures: int) -> str:
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] <= failures:
        raise ConnectionError(f"attempt {ATTEMPTS[key]} failed")
    return "ok"


from . import workflow_tasks as workflow_tasks  # noqa: E402  (registered with these, by autodiscovery)
