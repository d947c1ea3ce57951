"""Making dead letters for the admin's tests: a job that failed for good, with an error and a traceback."""

from __future__ import annotations

from typing import Any

from queue_max_django.engine import Queue


def fail(store: Queue, payload: Any = None, *, name: str = "tests.testapp.tasks.add", **options: Any) -> int:
    """Put a job and make it a dead letter at once: one attempt that raises ValueError with a traceback."""
    job_id = store.put({"args": [payload], "kwargs": {}}, name=name, max_retries=0, **options)
    record = store.claim(job_id)
    assert record is not None
    try:
        raise ValueError(f"boom {payload}")
    except ValueError as exc:
        record.nack(exc)
    return job_id
