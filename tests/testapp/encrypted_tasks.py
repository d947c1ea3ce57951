"""Fixture ``@task``s whose jobs are encrypted at rest (``encrypt=True``), for tests/security/ and
tests/django/test_encryption.py. Not autodiscovered (only ``tasks.py`` is), and registered only inside
``registered()``: the tests that use them do so with an autouse fixture."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from queue_max_django import current_job, task
from queue_max_django.tasks import registry


@task(encrypt=True, tags=("billing",))
def charge(card: str, amount: int = 1) -> dict[str, Any]:
    current_job().metadata["charged"] = f"{card}-done"
    return {"receipt": f"{card}-receipt", "amount": amount}


@task(encrypt=True, max_retries=0)
def leak(card: str) -> None:
    raise ValueError(f"card {card} was declined")


@task(encrypt=False)
def clear(card: str) -> str:
    return card


@task
def follows(card: str) -> str:
    return card


TASKS = (charge, leak, clear, follows)


def register() -> None:
    """Register the tasks (a worker subprocess's app does, for good: tests/security/encrypted_app)."""
    for one in TASKS:
        registry.register(one)


def unregister() -> None:
    for one in TASKS:
        registry.unregister(one.name)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """The tasks registered for the block only: a task with ``encrypt=True`` and no key in the settings is
    a system check error (E033), which every other test's settings would otherwise show."""
    register()
    try:
        yield
    finally:
        unregister()


unregister()  # registered by @task above: only inside registered() (or after register())
