"""Fixture ``django.tasks`` tasks (Django >= 6.0) that read and change their job's metadata, for
tests/django/test_metadata.py: through Django's ``TaskContext`` (where the installed Django has metadata) and
through ``current_job()`` (any Django with ``django.tasks``)."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task

from queue_max_django import current_job


@task
def noop_task() -> None:
    return None


@task(takes_context=True)
def get_metadata(context: TaskContext) -> dict[str, Any]:
    return context.metadata  # type: ignore[attr-defined, no-any-return]


@task(takes_context=True)
def update_metadata(context: TaskContext, **changes: Any) -> None:
    context.metadata.update(changes)  # type: ignore[attr-defined]


@task(takes_context=True)
def update_metadata_and_fail(context: TaskContext, **changes: Any) -> None:
    context.metadata.update(changes)  # type: ignore[attr-defined]
    raise ValueError("failed")


@task(takes_context=True)
def set_invalid_metadata(context: TaskContext) -> None:
    context.metadata["bad"] = object()  # type: ignore[attr-defined]


@task(takes_context=True)
def save_metadata_explicitly(context: TaskContext, key: str, value: Any) -> dict[str, Any]:
    context.metadata[key] = value  # type: ignore[attr-defined]
    context.save_metadata()  # type: ignore[attr-defined]
    return context.metadata  # type: ignore[attr-defined, no-any-return]


@task
def progress_through_current_job(steps: int) -> int:
    job = current_job()
    for step in range(1, steps + 1):
        job.metadata["done"] = step
        job.save_metadata()
    return job.attempt
