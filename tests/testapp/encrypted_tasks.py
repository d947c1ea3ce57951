"""Fixture ``@task``s whose jobs are encrypted at rest (``encrypt=True``), for tests/security/ and
tests/django/test_encryption.py. Not autodiscovered (only ``tasks.py`` is): the tests import it."""

from __future__ import annotations

from typing import Any

from queue_max_django import current_job, task


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
