"""A job's row as the PostgreSQL store reads it: the columns it selects, and the ``Job`` snapshot or the
``Claimed`` a row becomes. Times are stored as integer microseconds (``micros``), as the LMDB store keeps
them; payloads and results are the msgpack bytes the Queue packed; a partition key is msgpack too."""

from __future__ import annotations

from typing import Any

import msgpack

from ... import codec
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


def unpack_key(raw: bytes | None) -> Any:
    return None if raw is None else msgpack.unpackb(raw, raw=False)


def as_job(row: tuple[Any, ...]) -> Job:
    """A row in ``FINISHED``'s shape (``LIVE_AS_FINISHED`` for a live one) as a ``Job``
    (``codec.job_from_stored``: a payload or result that does not decode stays raw bytes, and ``damage``
    says why)."""
    (job_id, state_code, queue, name, priority, ready_us, retries, max_retries, attempts, enqueued_us,
     started_us, lease_us, _token, _claim, timeout, partition_key, payload, worker_ids, error_types,
     error_msgs, error, error_type, traceback, metadata, finished_us, result) = row  # fmt: skip
    return codec.job_from_stored(
        job_id, STATES[state_code], queue=queue, name=name, priority=priority, payload=payload,
        result=result, retries=retries, max_retries=max_retries, error=error, error_type=error_type,
        traceback=traceback, enqueued_us=enqueued_us, started_us=started_us, finished_us=finished_us,
        ready_us=ready_us, lease_us=lease_us, attempts=attempts, timeout=timeout,
        partition_key=unpack_key(partition_key), worker_ids=worker_ids,
        errors=tuple(zip(error_types or (), error_msgs or (), strict=False)), metadata=metadata,
    )  # fmt: skip


# The columns a claim returns, in this order (``as_claimed``).
CLAIMED = (
    "id, token, payload, retries, max_retries, attempts, enqueued_us, priority, queue, name, timeout, "
    "lease_us, worker_ids, claim, metadata::text"
)
CLAIMED_COLUMNS = len(CLAIMED.split(","))


def as_claimed(row: tuple[Any, ...], alone: bool) -> Claimed:
    """A claimed row (``CLAIMED``) as a ``Claimed``; ``QueueCorrupted`` if its payload does not decode."""
    (job_id, token, payload, retries, max_retries, attempts, enqueued_us, priority, queue, name, timeout,
     lease_us, worker_ids, _claim, metadata) = row  # fmt: skip
    value = codec.unpack_stored(payload, job_id, "payload")
    claimed = Claimed(
        job_id, bytes(token), value, retries, max_retries, attempts, enqueued_us / 1_000_000, priority, queue,
        name, timeout, lease_us / 1_000_000, tuple(worker_ids or ()), alone,
    )  # fmt: skip
    if metadata is not None:  # jsonb read as text: always the JSON of an object (put and save check it)
        claimed.metadata = unpack_metadata(metadata)
    return claimed
