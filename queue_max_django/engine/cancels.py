"""Cancelling a job in any state (``Queue.request_cancel``): what a cancel did, and the error it ends with.

A waiting or scheduled job is removed (as ``Queue.cancel`` does). A running job cannot be taken from its
holder, so it is marked "cancel requested": the mark is kept apart from the job's record (LMDB: the shard's
``cancels`` database; PostgreSQL: the ``qm_cancels`` table), and the heartbeat that renews the job's lease
reports it to the holder (``Record.cancel_requested``), which stops the job and fails it with ``Cancelled``:
a dead letter, not retried (``Cancelled`` is ``Permanent``), that ``requeue`` brings back (and forgets the
mark). A job released or retried while marked is still marked: its next holder sees the mark at its first
heartbeat. A mark stays while its job is stored: ``requeue`` drops it, and it goes with the job that
``delete``, ``purge``, the vacuum or a cancel removes (``Store.cancel_requested``).

A cancel is its own outcome, not a failure (issue 29): the request notes who asked and when in the running
job's metadata (``job.CANCEL_KEY``, in the same transaction as the mark; a holder's ``save_metadata`` keeps
it), the ended job reads as ``Job.cancelled``, the stores count such dead letters within ``failed``
(``stats()["cancelled"]``, ``Store.cancel_counts``), and its ``nack`` sends ``JOB_CANCELLED`` instead of
``JOB_FAILED`` and reports nothing to the circuit breakers.
"""

from __future__ import annotations

import enum

from .classify import Permanent
from .job import CANCELLED


class Cancelled(Permanent):
    """The job was cancelled (``JobResult.cancel()``, ``manage.py queue_cancel``, the admin) while it ran.

    A task may raise it itself when it sees the cancel request; the worker records it as the error of a job
    that stopped after a cancel request, or that it ended after the grace period. A cancelled job is a dead
    letter (not retried); requeue it to run it again."""


MAX_CANCEL_BY = 200  # characters of ``request_cancel(by=)`` kept (who asked: a user, a command, a reason)


class CancelOutcome(enum.StrEnum):
    """What ``Queue.request_cancel`` did."""

    REMOVED = "removed"  # it was waiting or scheduled: gone, it never runs
    REQUESTED = "requested"  # it is running: marked; its holder stops it at its next heartbeat
    FINISHED = "finished"  # it already ended (done or a dead letter): nothing to cancel, nothing changed
    MISSING = "missing"  # no such job (never existed, or deleted, purged or vacuumed)


assert f"{Cancelled.__module__}.{Cancelled.__qualname__}" == CANCELLED  # the error type nack() stores for it


def is_cancel(error: object) -> bool:
    """Is ``error`` (what a job's attempt ended with) a cancel, not a failure?"""
    return isinstance(error, Cancelled)
