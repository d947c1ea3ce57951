"""A job's stored record as the shard's transactions read and change it: the ``Job`` snapshot it reads as,
the ``Claimed`` a claim hands back, and the field changes of a claim, a release and a stand-in for a record
that does not decode. Plain functions of a decoded record (``layout.py``), no transaction.
"""

from __future__ import annotations

from typing import Any

from ... import codec
from ...job import SHARD_BITS, STATES, Job
from ...metadata import unpack_metadata
from ..types import Claimed
from .layout import (
    F_ATTEMPTS,
    F_CLAIM,
    F_ENQUEUED_AT,
    F_ERROR,
    F_ERROR_TYPE,
    F_ERRORS,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_MAX_RETRIES,
    F_METADATA,
    F_NAME,
    F_PARTITION_KEY,
    F_PRIORITY,
    F_QUEUE,
    F_READY_AT,
    F_RESULT,
    F_RETRIES,
    F_STARTED_AT,
    F_STATE,
    F_TIMEOUT,
    F_TOKEN,
    F_TRACEBACK,
    F_WORKERS,
    FAILED,
    HISTORY_MAX,
    PENDING,
    RECORD_FIELDS,
    RUNNING,
)


def record_to_job(job_id: int, record: list[Any], payload: bytes | None) -> Job:
    """The ``Job`` snapshot of a decoded record (``codec.job_from_stored``), with its payload if stored
    apart (``payload``; None: inline, or none)."""
    return codec.job_from_stored(
        job_id,
        STATES[record[F_STATE]],
        queue=record[F_QUEUE],
        name=record[F_NAME],
        priority=record[F_PRIORITY],
        payload=payload,
        result=record[F_RESULT],
        retries=record[F_RETRIES],
        max_retries=record[F_MAX_RETRIES],
        error=record[F_ERROR],
        error_type=record[F_ERROR_TYPE],
        traceback=record[F_TRACEBACK],
        enqueued_us=record[F_ENQUEUED_AT],
        started_us=record[F_STARTED_AT],
        finished_us=record[F_FINISHED_AT],
        ready_us=record[F_READY_AT],
        lease_us=record[F_LEASE_UNTIL],
        attempts=record[F_ATTEMPTS],
        timeout=record[F_TIMEOUT],
        partition_key=record[F_PARTITION_KEY],
        worker_ids=record[F_WORKERS],
        errors=tuple((error_type, error) for error_type, error in record[F_ERRORS] or ()),
        metadata=record[F_METADATA],
    )


def start_running(
    job_id: int,
    record: list[Any],
    payload: Any,
    now_us: int,
    lease_us: int,
    token: bytes,
    worker: str | None,
    alone: bool,
) -> Claimed:
    """A claimed job's record: running from now, held by ``token`` until ``lease_us``, one more attempt,
    claimed alone (``claim_many`` marks the jobs of a batch ``CLAIM_BATCH`` once there are two). -> the
    neutral ``Claimed`` of it, ``payload`` its decoded payload. Its metadata is the JSON of a dict when it
    is there (``layout`` checked its type; a claim that decodes it reads what a put wrote). (One function
    for both: a claim of a batch calls it for every job.)"""
    attempts = (record[F_ATTEMPTS] or 0) + 1
    record[F_STATE] = RUNNING
    record[F_STARTED_AT] = now_us
    record[F_LEASE_UNTIL] = lease_us
    record[F_TOKEN] = token
    record[F_ATTEMPTS] = attempts
    record[F_CLAIM] = None
    workers = record[F_WORKERS]
    if worker is not None:
        workers = record[F_WORKERS] = [*workers, worker][-HISTORY_MAX:] if workers else [worker]
    claimed = Claimed(
        job_id, token, payload, record[F_RETRIES], record[F_MAX_RETRIES], attempts,
        record[F_ENQUEUED_AT] / 1_000_000, record[F_PRIORITY], record[F_QUEUE], record[F_NAME],
        record[F_TIMEOUT], lease_us / 1_000_000, tuple(workers or ()), alone,
    )  # fmt: skip
    if record[F_METADATA] is not None:
        claimed.metadata = metadata_of(record)
    return claimed


def metadata_of(record: list[Any]) -> dict[str, Any]:
    """The record's metadata as a dict; ``{}`` for JSON that does not decode (``Job.damage`` says so)."""
    try:
        return unpack_metadata(record[F_METADATA])
    except ValueError:
        return {}


def mark_pending_uncharged(record: list[Any]) -> None:
    """A running job's record back to pending, no attempt charged: at its old place in its queue (its
    ready time is unchanged), no holder."""
    record[F_STATE] = PENDING
    record[F_TOKEN] = None
    record[F_LEASE_UNTIL] = None
    record[F_STARTED_AT] = None


def unreadable_record(job_id: int) -> list[Any]:
    """The record that stands in for one that does not decode: queue "default", no name, priority 0, no
    retries, enqueued (and ready) when its id says: the id's sequence is the put's time in µs (job.py)."""
    record: list[Any] = [None] * RECORD_FIELDS
    record[F_STATE], record[F_QUEUE], record[F_PRIORITY] = FAILED, "default", 0
    record[F_RETRIES], record[F_MAX_RETRIES], record[F_ATTEMPTS] = 0, 0, 0
    record[F_ENQUEUED_AT] = record[F_READY_AT] = job_id >> SHARD_BITS
    return record
