"""Cancelling a running job, above the store: the cancel requests of the jobs this process runs, and how a
cancelled job ends. (The engine's half is ``engine/cancels.py``: ``Queue.request_cancel``, what it did, and
the ``Cancelled`` error; each store keeps the "cancel requested" marks in its own ``cancels``.)

The main thread's heartbeat renews the leases of held jobs and learns in the same round trip which of them
are marked "cancel requested" (``engine/cancels.py``): it adds them here (``request``). Task code asks
``requested()`` (the job this thread runs) or ``is_requested(job_id)`` and stops, by returning or by raising
``Cancelled``. Either way the job ends as a
dead letter with the error ``Cancelled`` (not retried): a job that returns after its cancel was requested
keeps no result (``after_run``: the worker's completer, ``acks.Batch``, applies it to each success it would
hold), and a job claimed but not yet started when the request arrived never starts (``before_start``, the
first step of that completer's ``run``). A task that does not stop within the worker's cancel grace period
(``QUEUE_MAX["WORKER"]["CANCEL_GRACE"]``, ``queue_worker --cancel-grace``) is ended as a timed-out one is:
the job is failed with ``Cancelled`` and its process is replaced (a thread cannot be stopped).

The registry is per process and safe to read from any thread (a set of ints under the GIL). Outside a
worker (the immediate mode, tests, a shell) nothing is ever requested.

A cancel is an outcome someone asked for, not a failure (issue 29): the worker logs it at INFO with who asked
and when (``log_cancelled``, no traceback), counts it as cancelled, never as failed; the engine sends no
``job_failed`` for it and no circuit breaker counts it (``engine/consuming.py``).
"""

from __future__ import annotations

import logging
import threading
import time

from ..engine import Cancelled, CancelNote, Queue, QueueError, Record, State
from ..engine.cancels import is_cancel
from ..engine.job import CANCEL_KEY
from .completer import INLINE, Completer, Kind, Verdict
from .outcome import Outcome

logger = logging.getLogger("queue_max_django.worker")

_requested: set[int] = set()
_thread = threading.local()  # .job_id: the job this worker thread runs now


def requested() -> bool:
    """Was a cancel requested of the job that the calling thread runs (in a worker)? False elsewhere."""
    job_id = getattr(_thread, "job_id", None)
    return job_id is not None and job_id in _requested


def running(job_id: int | None) -> None:
    """The calling worker thread starts running job ``job_id`` (None: it finished it)."""
    _thread.job_id = job_id


def is_requested(job_id: int | str) -> bool:
    """Was a cancel of job ``job_id`` (run by this process) requested? Task code polls it and stops."""
    if not _requested:  # the common case: asked twice for each job a worker runs
        return False
    try:
        return int(job_id) in _requested
    except (TypeError, ValueError):
        return False


def request(job_id: int) -> None:
    _requested.add(job_id)


def forget(job_id: int) -> None:
    _requested.discard(job_id)


def requested_ids() -> frozenset[int]:
    return frozenset(_requested)


__all__ = [
    "after_run", "before_start", "ended_by_cancel", "error", "forget", "is_requested", "learn",
    "log_cancelled", "request", "requested", "requested_ids", "running", "who", "who_of",
]  # fmt: skip


def who(note: CancelNote | None) -> str:
    """`` by alice at 14:02:07`` (local time, as the log's own), or ``""`` when nothing was noted."""
    if note is None:
        return ""
    by = f" by {note.by}" if note.by else ""
    return f"{by} at {time.strftime('%H:%M:%S', time.localtime(note.at))}"


def who_of(record: Record) -> str:
    """``who`` of the note in ``record.metadata`` (``learn`` put it there)."""
    return who(CancelNote.of(record.metadata))


def error(record: Record, why: str = "") -> Cancelled:
    """The ``Cancelled`` a job ends with: who asked and when, as the job's metadata notes it."""
    return Cancelled(
        f"job {record.job_id} ({record.name}) was cancelled{who(CancelNote.of(record.metadata))}{why}"
    )


def ended_by_cancel(outcome: Outcome) -> bool:
    """Did this attempt end the job because it was cancelled (a dead letter with ``Cancelled``)?"""
    return outcome.state is State.FAILED and is_cancel(outcome.error)


def log_cancelled(record: Record, error: object) -> None:
    """One INFO line, no traceback: a cancel is an outcome someone asked for, not a failure. The error of a
    cancel the worker ended says who asked and when (``error``); one the task raised itself gets them here."""
    text = str(error)
    if not text.startswith(f"job {record.job_id} ("):
        text = (
            f"job {record.job_id} ({record.name}) was cancelled{who(CancelNote.of(record.metadata))}: {text}"
        )
    logger.info("%s; not retried (a cancel, not a failure)", text,
                extra={"job_id": str(record.job_id), "task": record.name, "queue": record.queue,
                       "cancelled": True})  # fmt: skip


def learn(queue: Queue, record: Record) -> None:
    """The heartbeat found ``record``'s job marked: read who asked and when (the note the cancel wrote in
    the job's metadata) into ``record.metadata``, which holds the metadata as stored, for ``error`` and
    ``log_cancelled``. A store that fails leaves them unsaid, nothing worse."""
    try:
        job = queue.job(record.job_id)
    except QueueError:
        return
    if job is not None and job.cancel_note is not None:
        record.metadata = {**record.metadata, CANCEL_KEY: job.cancel_note.stored()}


def before_start(record: Record, completer: Completer = INLINE) -> Outcome | None:
    """A job claimed but not started when its cancel was seen: a dead letter now, never run (written by
    ``completer``). None: no cancel was requested, run it."""
    if not is_requested(record.job_id):
        return None
    return completer.write(record, Verdict.cancelled(error(record, " before it started")))


def after_run(record: Record, verdict: Verdict) -> Verdict:
    """A job whose cancel was requested while it ran and that then returned: the verdict of its success,
    which the worker's completer would hold for its batched acknowledgement, becomes a dead letter with
    ``Cancelled``, its result dropped. Any other verdict stands (a task that raised ``Cancelled`` is
    already a dead letter), and so does a success whose record no longer holds its job."""
    if verdict.kind is not Kind.DONE or record.finished or not is_requested(record.job_id):
        return verdict
    return Verdict.cancelled(error(record, ": it stopped when asked"))
