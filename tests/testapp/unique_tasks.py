"""Fixture ``@task``s with unique keys, for tests/django/test_unique_jobs.py. Not autodiscovered (only
``tasks.py`` is): the test module imports it."""

from __future__ import annotations

from queue_max_django import task


@task(unique_key=True)
def sync_account(account_id: int, full: bool = False) -> int:
    return account_id


@task(unique_key=lambda account_id, **_: f"report:{account_id}", on_duplicate="replace")
def rebuild_report(account_id: int, *, note: str = "") -> str:
    return note


@task(unique_key="nightly-export", on_duplicate="raise", unique_until="finished")
def nightly_export() -> None:
    return None


@task(unique_key=lambda account_id: account_id)  # returns an int: refused at enqueue
def bad_key(account_id: int) -> None:
    return None


@task(unique_key=lambda account_id: 1 / 0)  # raises: refused at enqueue
def failing_key(account_id: int) -> None:
    return None
