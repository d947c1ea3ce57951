"""A job's row as the PostgreSQL store reads it: the columns it selects, and the ``Job`` snapshot or the
``Claimed`` a row becomes. Times are stored as integer microseconds (``micros``), as the LMDB store keeps
them; payloads and results are the msgpack bytes the Queue packed; a partition key is msgpack too, and
metadata is jsonb (the JSON of an object).

Those three kinds of column are what a row can hold that this code cannot read (bytes or JSON written past
the engine, by hand or by another program): a read keeps what it cannot decode and says why (``Job.damage``),
``verify`` names it (reads.py), and a claim moves the job to the dead letters (``as_claimed`` raises
``QueueCorrupted``, the store quarantines)."""

from __future__ import annotations

from typing import Any

import msgpack

from ... import codec
from ...errors import QueueCorrupted
from ...job import STATES, Job
from ...metadata import unpack_metadata
from ..types import Claimed

HISTORY_MAX = 10  # the error and worker histories keep the last ten, as on LMDB
CLAIM_BATCH = 1  # a job claimed with others: a lease expiry goes back uncharged, to be claimed alone
CLAIM_ALONE_NEXT = 2  # its lease once expired: the next claim takes it alone

# The columns of a live job (qm_jobs) that a Job or a Claimed is made of, in this order.
LIVE = (
    "id, state, queue, name, priority, ready_us, retries, max_retries, attempts, enqueued_us, started_us, "
    "lease_us, token, claim, timeout, partition_key, payload, worker_ids, error_types, error_msgs, error, "
    "error_type, traceback, metadata::text"
)
# The same of a finished job (qm_finished): no ready time, lease, token or claim; a finish time and a result.
FINISHED = (
    "id, state, queue, name, priority, NULL::bigint, retries, max_retries, attempts, enqueued_us, "
    "started_us, NULL::bigint, NULL::bytea, NULL::smallint, timeout, partition_key, payload, worker_ids, "
    "error_types, error_msgs, error, error_type, traceback, metadata::text, finished_us, result"
)
LIVE_AS_FINISHED = LIVE + ", NULL::bigint, NULL::bytea"  # a live row in FINISHED's shape


def micros(seconds: float) -> int:
    """Unix seconds -> integer microseconds, truncated as the LMDB store does (an ETA read back is never
    later than the time it was set for)."""
    value = int(seconds * 1_000_000)
    return value if value > 0 else 0


def seconds(us: int | None) -> float | None:
    return None if us is None else us / 1_000_000


def pack_key(value: Any) -> bytes | None:
    """A partition key (validated by the Queue: None, str, int or bytes) as stored."""
    return None if value is None else bytes(msgpack.packb(value, use_bin_type=True))


def unpack_key(raw: bytes | None, job_id: int) -> Any:
    """A stored partition key; ``QueueCorrupted`` if its bytes do not decode."""
    return None if raw is None else codec.unpack_stored(bytes(raw), job_id, "partition key")


def _key_or_damage(raw: bytes | None, job_id: int, damage: list[str]) -> Any:
    """``unpack_key``, but bytes that do not decode are kept as they are, and ``damage`` says why."""
    try:
        return unpack_key(raw, job_id)
    except QueueCorrupted as exc:
        damage.append(str(exc))
        return bytes(raw or b"")


def as_job(row: tuple[Any, ...]) -> Job:
    """A row in ``FINISHED``'s shape (``LIVE_AS_FINISHED`` for a live one) as a ``Job``
    (``codec.job_from_stored``: a payload, result or partition key that does not decode stays raw bytes,
    metadata that is not a JSON object reads as none, and ``damage`` says why)."""
    (job_id, state_code, queue, name, priority, ready_us, retries, max_retries, attempts, enqueued_us,
     started_us, lease_us, _token, _claim, timeout, partition_key, payload, worker_ids, error_types,
     error_msgs, error, error_type, traceback, metadata, finished_us, result) = row  # fmt: skip
    damage: list[str] = []
    key = _key_or_damage(partition_key, job_id, damage)
    return codec.job_from_stored(
        job_id, STATES[state_code], queue=queue, name=name, priority=priority, payload=payload,
        result=result, retries=retries, max_retries=max_retries, error=error, error_type=error_type,
        traceback=traceback, enqueued_us=enqueued_us, started_us=started_us, finished_us=finished_us,
        ready_us=ready_us, lease_us=lease_us, attempts=attempts, timeout=timeout,
        partition_key=key, worker_ids=worker_ids, metadata=metadata, damage=damage,
        errors=tuple(zip(error_types or (), error_msgs or (), strict=False)),
    )  # fmt: skip


# The columns a claim returns, in this order (``as_claimed``).
CLAIMED = (
    "id, token, payload, retries, max_retries, attempts, enqueued_us, priority, queue, name, timeout, "
    "lease_us, worker_ids, claim, metadata::text, partition_key"
)
CLAIMED_COLUMNS = len(CLAIMED.split(","))


def as_claimed(row: tuple[Any, ...], alone: bool) -> Claimed:
    """A claimed row (``CLAIMED``) as a ``Claimed``; ``QueueCorrupted`` if its payload or partition key
    does not decode or its metadata is not a JSON object (the job cannot be run as it was put)."""
    (job_id, token, payload, retries, max_retries, attempts, enqueued_us, priority, queue, name, timeout,
     lease_us, worker_ids, _claim, metadata, partition_key) = row  # fmt: skip
    value = codec.unpack_stored(payload, job_id, "payload")
    unpack_key(partition_key, job_id)  # not part of a Claimed, but a job whose key is broken is broken
    claimed = Claimed(
        job_id, bytes(token), value, retries, max_retries, attempts, enqueued_us / 1_000_000, priority, queue,
        name, timeout, lease_us / 1_000_000, tuple(worker_ids or ()), alone,
    )  # fmt: skip
    if metadata is not None:  # jsonb read as text: JSON, of an object unless written past the engine
        try:
            claimed.metadata = unpack_metadata(metadata)
        except ValueError as exc:
            raise QueueCorrupted(f"job {job_id}: the stored metadata does not decode ({exc})") from None
    return claimed
