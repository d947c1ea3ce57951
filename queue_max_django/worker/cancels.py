"""The cancel requests of the jobs this worker process holds, and how a cancelled job ends.

The main thread's heartbeat renews the leases of held jobs and learns in the same round trip which of them
are marked "cancel requested" (``engine/cancels.py``): it adds them here (``request``). Task code asks
``requested()`` (the job this thread runs) or ``is_requested(job_id)`` and stops, by returning or by raising
``Cancelled``. Either way the job ends as a
dead letter with the error ``Cancelled`` (not retried): a job that returns after its cancel was requested
keeps no result (``after_run``), and a job claimed but not yet started when the request arrived never starts
(``before_start``). A task that does not stop within the worker's cancel grace period
(``QUEUE_MAX["WORKER"]["CANCEL_GRACE"]``, ``queue_worker --cancel-grace``) is ended as a timed-out one is:
the job is failed with ``Cancelled`` and its process is replaced (a thread cannot be stopped).

The registry is per process and safe to read from any thread (a set of ints under the GIL). Outside a
worker (the immediate mode, tests, a shell) nothing is ever requested.
"""

from __future__ import annotations

from typing import Any

# The registry itself is cancel_requests.py (outside this package, so that context.py's
# ``current_job().cancelled`` can read it without importing the worker): its names, here too.
from ..cancel_requests import forget, is_requested, request, requested, requested_ids, running
from ..engine import Cancelled, Record, State
from ..outcome import Outcome

__all__ = [
    "after_run", "before_start", "error", "forget", "is_requested", "request", "requested", "requested_ids",
    "running",
]  # fmt: skip


def error(record: Record, why: str = "") -> Cancelled:
    """The ``Cancelled`` a job ends with."""
    return Cancelled(f"job {record.job_id} ({record.name}) was cancelled{why}")


def before_start(record: Record) -> Outcome | None:
    """A job claimed but not started when its cancel was seen: a dead letter now, never run."""
    if not is_requested(record.job_id):
        return None
    cancelled = error(record, " before it started")
    return Outcome(record.job_id, record.nack(cancelled, permanent=True), error=cancelled, reason="cancelled")


def after_run(record: Record, outcome: Outcome, acks: list[tuple[Record, Any]] | None) -> Outcome:
    """A job whose cancel was requested while it ran and that then returned: its success (still waiting in
    ``acks`` for the batched acknowledgement) becomes a dead letter with ``Cancelled``, its result dropped.
    Any other outcome stands (a task that raised ``Cancelled`` is already a dead letter)."""
    if not is_requested(record.job_id) or outcome.state is not State.DONE or record.finished or acks is None:
        return outcome
    for index, (waiting, _result) in enumerate(acks):
        if waiting is record:
            del acks[index]
            break
    else:
        return outcome
    cancelled = error(record, ": it stopped when asked")
    return Outcome(record.job_id, record.nack(cancelled, permanent=True), error=cancelled, reason="cancelled")
