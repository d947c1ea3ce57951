"""Fixture ``@task``s that read and change their job's metadata (``current_job()``), for
tests/django/test_metadata.py. Not autodiscovered (only ``tasks.py`` is): the test module imports it."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_max_django import current_job, task
from queue_max_django.running import cancels


@task
def get_metadata() -> dict[str, Any]:
    return current_job().metadata


@task
def update_metadata(**changes: Any) -> None:
    current_job().metadata.update(changes)


@task(max_retries=1)
def update_metadata_and_fail(**changes: Any) -> None:
    job = current_job()
    job.metadata.update(changes, attempt=job.attempt)
    raise ValueError("failed after changing the metadata")


@task
def append_to_metadata_list(key: str, value: Any) -> None:
    current_job().metadata[key].append(value)


@task
def set_invalid_metadata() -> None:
    current_job().metadata["bad"] = object()


@task
def save_progress(steps: int) -> list[Any]:
    """Saves ``{"done": n, "of": steps}`` after each step; returns what the store held after each save."""
    from queue_max_django.conf import get_queue

    job = current_job()
    seen = []
    for step in range(1, steps + 1):
        job.metadata.update(done=step, of=steps)
        job.save_metadata()
        assert not job.metadata_modified
        stored = get_queue().job(job.job_id)
        assert stored is not None
        seen.append(stored.metadata)
    return seen


@task
async def save_progress_async(step: int) -> str:
    job = current_job()
    job.metadata["done"] = step
    await job.asave_metadata()
    await asyncio.sleep(0)
    return job.id


@task
def save_tuple_then_read() -> list[Any]:
    """A saved tuple reads back as a list, in the same dict the task holds; a later save of the context by
    another path (the django.tasks backend's) must not be undone by the runner's save at the end."""
    job = current_job()
    held = job.metadata
    held["pair"] = (1, 2)
    job.save_metadata()
    job.save_raw({**job.raw_metadata})  # as the django.tasks backend saves
    return [held, job.metadata_modified, held is job.metadata]


@task(max_retries=3)
def sees_its_cancel() -> dict[str, bool]:
    """Reads ``current_job().cancelled`` before and after its job is marked in this process's registry (what
    a worker's heartbeat does when the store reports the job's cancel request)."""
    job = current_job()
    before = job.cancelled
    cancels.request(job.job_id)
    return {"before": before, "after": job.cancelled}


@task(max_retries=3)
def saves_progress_until_cancelled(steps: int, cancel_at: int) -> int:
    """Saves its progress each step; its cancel is requested (as a heartbeat would) after step ``cancel_at``,
    so the next ``save_metadata()`` saves and then raises ``Cancelled``."""
    job = current_job()
    for step in range(1, steps + 1):
        job.metadata["done"] = step
        job.save_metadata()
        if step == cancel_at:
            cancels.request(job.job_id)
    return steps
