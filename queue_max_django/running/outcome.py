"""What the two runners share: runner.py runs ``@task`` jobs, backend.py runs django.tasks jobs.

The ``Outcome`` of running one job, the error and text of the last resort that ends a job whose outcome
could not be stored (``OutcomeNotStored``, which completer.py's ``Completer.run`` applies), the payload key
that marks a django.tasks job, the thread's event loop that coroutine tasks run on, and the claim of one job
by the immediate mode. A leaf of the Django layer, so that backend.py needs nothing of runner.py, while
runner.py hands django.tasks jobs to backend.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from ..engine import JOB_STARTED, Queue, Record, State

__all__ = ["DJANGO_TASK_KEY", "Outcome", "OutcomeNotStored", "claim_now", "use_event_loop"]

DJANGO_TASK_KEY = "django_task"  # in a payload: a job of Django's Tasks framework (backend.py runs it)


@dataclass(frozen=True)
class Outcome:
    """What became of a job a runner ran (``Completer.write``'s answer): the job's new state (``DONE`` for a
    success a batching completer still holds), the return value (when done), the exception (when not), and
    why an error was classified as it was."""

    job_id: int
    state: State
    result: Any = None
    error: BaseException | str | None = None
    reason: str | None = None

    @classmethod
    def done(cls, job_id: int, result: Any = None) -> Outcome:
        """``Outcome(job_id, State.DONE, result=result)``, built without the frozen dataclass's ``__init__``
        (a worker builds one per success: a third of the time)."""
        outcome = object.__new__(cls)
        fields = outcome.__dict__
        fields["job_id"] = job_id
        fields["state"] = _DONE
        fields["result"] = result
        fields["error"] = None
        fields["reason"] = None
        return outcome


_DONE = State.DONE


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
