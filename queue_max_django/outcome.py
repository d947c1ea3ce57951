"""What the two runners share: runner.py runs ``@task`` jobs, backend.py runs django.tasks jobs.

The ``Outcome`` of running one job, the payload key that marks a django.tasks job, the thread's event loop
that coroutine tasks run on, and the claim of one job by the immediate mode. A leaf of the Django layer, so
that backend.py needs nothing of runner.py, while runner.py hands django.tasks jobs to backend.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from .engine import JOB_STARTED, Queue, Record, State

__all__ = ["DJANGO_TASK_KEY", "Outcome", "claim_now", "use_event_loop"]

DJANGO_TASK_KEY = "django_task"  # in a payload: a job of Django's Tasks framework (backend.py runs it)


@dataclass(frozen=True)
class Outcome:
    """What ``run_job`` did: the job's new state, the return value (when done), the exception (when not),
    and why an error was classified as it was."""

    job_id: int
    state: State
    result: Any = None
    error: BaseException | str | None = None
    reason: str | None = None


_thread = threading.local()


def use_event_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """Run this thread's coroutine tasks on ``loop`` (a worker thread keeps one loop for all its jobs)
    instead of a new loop per job. None: back to ``asyncio.run``."""
    _thread.loop = loop


def _run_coroutine(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """On this thread's loop (``use_event_loop``), else ``asyncio.run`` it; in a thread of its own when
    this thread already runs an event loop."""
    loop = getattr(_thread, "loop", None)
    if loop is not None and not loop.is_running():
        return loop.run_until_complete(coroutine)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:  # this context too (current_job())
        return pool.submit(contextvars.copy_context().run, asyncio.run, coroutine).result()


def claim_now(queue: Queue, job_id: int) -> Record | None:
    """Claim job ``job_id`` to run it here, now (the immediate mode), and send ``JOB_STARTED`` for it, as
    a worker's ``get()`` does (``claim()`` does not). -> None if the job was not waiting."""
    record = queue.claim(job_id)
    if record is not None and queue.events.listening(JOB_STARTED):
        queue.events.emit(
            JOB_STARTED, job_id=job_id, queue=record.queue, name=record.name, attempt=record.attempts
        )
    return record
