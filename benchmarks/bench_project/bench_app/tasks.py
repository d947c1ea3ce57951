"""The same no-op task for every queue under test."""

from __future__ import annotations

from django.tasks import task as django_task

from queue_max_django import task


def plain_noop() -> None:
    """django-q2 calls a function by its dotted path."""
    return None


@task
def noop() -> None:
    return None


@task
def noop_each(item: int) -> None:
    """The no-op for ``.map()`` (one job per item): the batched enqueue of benchmarks/peers_postgres.py."""
    return None


@django_task()
def tasks_noop() -> None:
    return None


@task
def collect(values: list[None]) -> int:
    """A chord's callback (benchmarks/workflow_bench.py): it gets the list of its group's results."""
    return len(values)
