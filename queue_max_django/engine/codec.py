"""msgpack encoding of payloads, results and the stored job record.

The store holds msgpack data only: no pickle, no code (invariant 6). A record is a msgpack array whose
positions are the ``F_*`` constants below; new fields are only ever appended, so older records still decode.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import msgpack

from .errors import PayloadNotSerializable, PayloadTooLarge, QueueCorrupted

# Record field positions.
F_STATE = 0
F_QUEUE = 1
F_NAME = 2
F_PRIORITY = 3
F_RETRIES = 4
F_MAX_RETRIES = 5
F_ENQUEUED_AT = 6
F_READY_AT = 7  # when the job became (or becomes, if scheduled) claimable: the ETA of a scheduled job
F_STARTED_AT = 8
F_FINISHED_AT = 9
F_LEASE_UNTIL = 10
F_TOKEN = 11
F_ERROR = 12
F_ERROR_TYPE = 13
F_TRACEBACK = 14
F_RESULT = 15  # packed bytes (decoded lazily), or None
F_TIMEOUT = 16
F_PARTITION_KEY = 17
F_ATTEMPTS = 18
F_PAYLOAD = (
    19  # the packed payload when it is small (<= INLINE_PAYLOAD_MAX); else None and it is in "payloads"
)
F_WORKERS = 20  # ids of the workers that claimed the job, one per attempt (the last HISTORY_MAX), or None
F_ERRORS = 21  # [error type, error] of each failed attempt (the last HISTORY_MAX), or None
F_CLAIM = 22  # how the job was last claimed: None alone, CLAIM_BATCH with others, CLAIM_ALONE_NEXT (below)
RECORD_FIELDS = 23
HISTORY_MAX = 10

# F_CLAIM values. A job claimed in a batch (get_many) whose lease expires is not charged the attempt: the
# process that died held the whole batch, and only one job of it was running. It becomes CLAIM_ALONE_NEXT,
# and the next claim takes it alone, so that a job which kills its worker is charged for it alone.
CLAIM_BATCH = 1
CLAIM_ALONE_NEXT = 2

# Small payloads live inside the record: one B-tree page written per put instead of two. Large ones live in
# their own database, written once, so that state changes never copy them.
INLINE_PAYLOAD_MAX = 1024

_unpacker_options: dict[str, Any] = {"raw": False, "strict_map_key": False, "timestamp": 0}
_local = threading.local()


def _packer() -> msgpack.Packer:
    """This thread's packer: reusing one is about twice as fast as ``packb`` (which builds one per call);
    a packer is not thread-safe, hence one per thread."""
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(use_bin_type=True, datetime=False)
    return packer


def pack_value(value: Any, *, what: str, limit: int) -> bytes:
    """Encode a user value (payload or result), refusing what msgpack cannot encode or what is too big."""
    packer = _packer()
    try:
        data: bytes = packer.pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        raise _not_serializable(what, exc) from exc
    if len(data) > limit:
        raise _too_large(what, len(data), limit)
    return data


def pack_values(values: Iterable[Any], *, what: str, limit: int) -> list[bytes]:
    """``pack_value`` of each value (a batch's payloads): one packer for them all."""
    packer = _packer()
    try:
        out: list[bytes] = [packer.pack(value) for value in values]
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        raise _not_serializable(what, exc) from exc
    if out and max(map(len, out)) > limit:
        raise _too_large(what, max(map(len, out)), limit)
    return out


def _not_serializable(what: str, exc: Exception) -> PayloadNotSerializable:
    return PayloadNotSerializable(
        f"the {what} cannot be stored: {exc}. Use msgpack data only (None, bool, int, float, str, bytes, "
        f"and lists/dicts of those)."
    )


def _too_large(what: str, size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the {what} is {size:,} bytes encoded, over the limit of {limit:,} bytes (max_payload_bytes). "
        f"Store large data elsewhere and pass a reference."
    )


def unpack_value(data: bytes) -> Any:
    return msgpack.unpackb(data, **_unpacker_options)


def unpack_stored(data: bytes, job_id: int, what: str) -> Any:
    """A payload or result read from disk: ``QueueCorrupted`` if the bytes there do not decode."""
    try:
        return msgpack.unpackb(data, **_unpacker_options)
    except Exception as exc:  # any decoding failure means the bytes on disk are not what we wrote
        raise QueueCorrupted(f"job {job_id}: the stored {what} cannot be decoded ({exc!r})") from exc


def pack_record(record: list[Any]) -> bytes:
    return bytes(_packer().pack(record))


def unpack_record(data: bytes, job_id: int) -> list[Any]:
    try:
        record = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # any decoding failure means the bytes on disk are not a record we wrote
        raise QueueCorrupted(f"job {job_id}: the stored record cannot be decoded ({exc})") from exc
    if not isinstance(record, list) or len(record) < F_TIMEOUT:
        raise QueueCorrupted(f"job {job_id}: the stored record has an unknown shape")
    if len(record) < RECORD_FIELDS:
        record.extend([None] * (RECORD_FIELDS - len(record)))
        if record[F_ATTEMPTS] is None:
            record[F_ATTEMPTS] = 0
    return record
