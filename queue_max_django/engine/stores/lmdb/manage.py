"""A shard's management writes, asked for by an operator (the admin, the ``queue_*`` commands) rather than by
a job's holder: ``requeue`` a dead letter, ``delete`` a job that is not running (``Queue.cancel`` is a
delete of a pending or scheduled one). Each is one write transaction; a record met that does not decode
becomes a dead letter that says so first (``quarantine.load_or_quarantine``).
"""

from __future__ import annotations

import struct
from typing import Any

from ...cancels import CancelOutcome
from ...job import CORRUPTED
from ...metadata import with_cancel_note
from ...workflows import WORKFLOW_MARK
from ..types import CorruptedJobQuarantined
from . import workflows
from .access import ShardDbs, delete_job, index_job, store_record, unindex_job
from .keys import id_key, micros
from .layout import (
    DONE,
    F_ERROR,
    F_ERROR_TYPE,
    F_FINISHED_AT,
    F_METADATA,
    F_READY_AT,
    F_RETRIES,
    F_STARTED_AT,
    F_STATE,
    F_TRACEBACK,
    FAILED,
    PENDING,
    RUNNING,
    SCHEDULED,
)
from .quarantine import load_or_quarantine, report

NOT_RUNNING = (PENDING, SCHEDULED, DONE, FAILED)  # the states a job can be deleted in


def requeue(shard: ShardDbs, now: float, job_id: int) -> bool:
    """Failed -> pending with retries reset. False if the job is not failed (or gone), or is a dead letter
    quarantined as corrupted (error type ``Corrupted``: what it would run is not what was put, or nothing),
    or its record does not decode: then it becomes such a dead letter first (``quarantine``)."""
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> bool:
        found.clear()
        record = load_or_quarantine(shard, txn, job_id, now_us, found)
        if record is None or found or record[F_STATE] != FAILED or record[F_ERROR_TYPE] == CORRUPTED:
            return False
        unindex_job(shard, txn, job_id, record)
        record[F_STATE] = PENDING
        record[F_RETRIES] = 0
        record[F_READY_AT] = now_us
        record[F_STARTED_AT] = record[F_FINISHED_AT] = None
        record[F_ERROR] = record[F_ERROR_TYPE] = record[F_TRACEBACK] = None
        index_job(shard, txn, job_id, record)
        store_record(shard, txn, job_id, record)
        txn.delete(id_key(job_id), db=shard.cancels)  # a cancelled job requeued runs afresh
        if record[F_METADATA] is not None and WORKFLOW_MARK in record[F_METADATA]:
            workflows.requeued(shard, txn, record)  # its node queued again, and what it cancelled waits
        return True

    requeued = shard.env.write(txn_fn)
    report(shard, found)
    return requeued


def delete(shard: ShardDbs, job_id: int, states: tuple[int, ...] = NOT_RUNNING, *, now: float) -> bool:
    """Delete the job, record and index entries in one transaction, if its state is one of ``states``
    (never running: its holder still works on it). False otherwise (or gone). A job whose record does
    not decode is a dead letter first (``quarantine``): deleted if ``states`` has failed ones."""
    assert RUNNING not in states
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> bool:
        found.clear()
        record = load_or_quarantine(shard, txn, job_id, now_us, found)
        if record is None or record[F_STATE] not in states:
            return False
        delete_job(shard, txn, job_id, record)
        for item in found:
            item.deleted = True
        return True

    deleted = shard.env.write(txn_fn)
    report(shard, found)
    return deleted


_WHEN = struct.Struct(">Q")


def cancel(shard: ShardDbs, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
    """Remove the job if it is pending or scheduled; if it is running, mark it "cancel requested" in the
    ``cancels`` database (its holder's next ``touch`` reports it) and note who asked and when in its
    metadata (``job.CANCEL_KEY``); else change nothing. One transaction."""
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> CancelOutcome:
        found.clear()
        record = load_or_quarantine(shard, txn, job_id, now_us, found)
        if record is None:
            return CancelOutcome.FINISHED if found else CancelOutcome.MISSING
        state = record[F_STATE]
        if state in (PENDING, SCHEDULED):
            delete_job(shard, txn, job_id, record)
            return CancelOutcome.REMOVED
        if state == RUNNING:
            txn.put(id_key(job_id), _WHEN.pack(now_us), db=shard.cancels)
            record[F_METADATA] = with_cancel_note(record[F_METADATA], {"by": by, "at": now_us / 1_000_000})
            store_record(shard, txn, job_id, record)
            return CancelOutcome.REQUESTED
        return CancelOutcome.FINISHED

    outcome: CancelOutcome = shard.env.write(txn_fn)
    report(shard, found)
    return outcome
