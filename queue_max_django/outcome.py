"""What the two runners share: runner.py runs ``@task`` jobs, backend.py runs django.tasks jobs.

The ``Outcome`` of running one job, the last resort that ends a job whose outcome could not be stored
(``ended``), the payload key that marks a django.tasks job, the thread's event loop that coroutine tasks
run on, and the claim of one job by the immediate mode. A leaf of the Django layer, so that backend.py
needs nothing of runner.py, while runner.py hands django.tasks jobs to backend.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .engine import JOB_STARTED, Queue, QueueCorrupted, Record, State

__all__ = ["DJANGO_TASK_KEY", "Outcome", "OutcomeNotStored", "claim_now", "ended", "use_event_loop"]

logger = logging.getLogger("queue_max_django.runner")

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


class OutcomeNotStored(Exception):
    """The outcome of a job's attempt could not be stored: running the job or storing what it left (its
    result, its error, its metadata) raised where the runner expects no error. The runners store each
    outcome that the store refuses as it is in a form it takes (metadata that cannot be stored fails the
    job with ``InvalidMetadata``, a result that cannot be stored fails it with an error that says so, an
    error's text is stored escaped); this is the last resort, for anything else: the job is failed for good
    (a dead letter) with this error, whose text names only the kind of exception, so that it can always be
    stored. The log of the process that ran the job has the traceback."""


UNSTORED = (
    "the outcome of this attempt could not be stored ({kind} raised while the job ran or its outcome was "
    "stored), so the job was failed for good instead: the log of the process that ran it has the traceback"
)


def ended(record: Record, run: Callable[..., Outcome], /, **options: Any) -> Outcome:
    """``run(record, **options)``, which runs the claimed job ``record`` and stores its outcome
    (``runner.run_job``'s work, or ``backend.run_django_task_job``'s), and the job ended even when that
    raised: it is then failed for good with ``OutcomeNotStored`` (the last resort), so that it is never
    left running, held by a process that renews its lease. Passed on: a ``QueueCorrupted`` (this process
    no longer holds the job: its lease expired, another may run it), what is raised once the job ended
    (``record.finished``), what is not an ``Exception`` (a ``KeyboardInterrupt``), and an error of the
    last resort's own store call (the store fails: the caller gives the job up, and its lease brings it
    back, an attempt counted)."""
    try:
        return run(record, **options)
    except QueueCorrupted:
        raise
    except Exception as exc:
        if record.finished:
            raise
        kind = type(exc).__qualname__
        logger.error("job %s (%s): its outcome could not be stored (%s); it is failed for good instead",
                     record.job_id, record.name, kind, exc_info=exc)  # fmt: skip
        error = OutcomeNotStored(UNSTORED.format(kind=kind))
        state = record.nack(error, permanent=True)
        return Outcome(record.job_id, state, error=error, reason="its outcome could not be stored")


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
