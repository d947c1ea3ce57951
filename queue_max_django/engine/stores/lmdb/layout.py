"""The stored job record of the LMDB store: a msgpack array whose positions are the ``F_*`` constants below,
its encoding, and the checks that tell a record this engine wrote from one it did not. New fields are only
ever appended, so older records still decode.
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack

from ...codec import _a
from ...errors import QueueCorrupted
from ...job import PRIORITY_MAX, PRIORITY_MIN, STATE_CODE, STATES, State

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
F_METADATA = 23  # the job's metadata as JSON text (UTF-8 bytes, engine/metadata.py), or None: none
# [group, [[key, n], ...]]: the job's concurrency limits and the group it waits its turn in (lmdb/turns.py,
# engine/concurrency.py), or None: none
F_LIMITS = 24
RECORD_FIELDS = 25
HISTORY_MAX = 10

# F_STATE values: a state's code is its index in STATES (job.py).
PENDING = STATE_CODE[State.PENDING]
SCHEDULED = STATE_CODE[State.SCHEDULED]
RUNNING = STATE_CODE[State.RUNNING]
DONE = STATE_CODE[State.DONE]
FAILED = STATE_CODE[State.FAILED]

# F_CLAIM values. A job claimed in a batch (get_many) whose lease expires is not charged the attempt: the
# process that died held the whole batch, and only one job of it was running. It becomes CLAIM_ALONE_NEXT,
# and the next claim takes it alone, so that a job which kills its worker is charged for it alone.
CLAIM_BATCH = 1
CLAIM_ALONE_NEXT = 2

# Small payloads live inside the record: one B-tree page written per put instead of two. Large ones live in
# their own database, written once, so that state changes never copy them.
INLINE_PAYLOAD_MAX = 1024

_local = threading.local()


def _packer() -> msgpack.Packer:
    """This thread's record packer: reusing one is about twice as fast as ``packb`` (which builds one per
    call); a packer is not thread-safe, hence one per thread."""
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(use_bin_type=True, datetime=False)
    return packer


def pack_record(record: list[Any]) -> bytes:
    return bytes(_packer().pack(record))


def unpack_record(data: bytes, job_id: int) -> list[Any]:
    """The record stored for ``job_id``: ``QueueCorrupted`` if its bytes do not decode, or decode to
    something that is not a record we wrote (another shape, or a field of the wrong type or out of range:
    a list as the task name, a str as the priority, a negative time). So every path that reads records
    treats all of these alike: as a record it cannot read."""
    try:
        record = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # any decoding failure means the bytes on disk are not a record we wrote
        raise QueueCorrupted(f"job {job_id}: the stored record cannot be decoded ({exc!r})") from exc
    if type(record) is not list or len(record) < F_TIMEOUT:
        raise QueueCorrupted(f"job {job_id}: the stored record has an unknown shape")
    if len(record) < RECORD_FIELDS:
        record.extend([None] * (RECORD_FIELDS - len(record)))
        if record[F_ATTEMPTS] is None:
            record[F_ATTEMPTS] = 0
    if not _well_typed(record):
        problem = record_problem(record) or "a field of the wrong type"
        raise QueueCorrupted(f"job {job_id}: the stored record has {problem}")
    return record


def unpack_held(data: bytes, job_id: int, token: bytes) -> list[Any]:
    """``unpack_record`` for a completion that holds the job by ``token`` (an ack, a lease renewal): when
    the record is running with that token, a lease time it can use and a queue name, only those fields are
    checked. Those bytes were written by this engine for that claim (the 128-bit token is the claim's
    own), from a record that passed the whole check when it was claimed; a completion keeps the other
    fields as they are, and whatever reads the record next checks them all. Anything else gets the whole
    check (and the completion then refuses the job for whatever is wrong). This spares a round trip half
    of its checks."""
    try:
        record = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return unpack_record(data, job_id)  # for its error
    if type(record) is list and len(record) >= RECORD_FIELDS:
        lease = record[F_LEASE_UNTIL]
        if (
            record[F_TOKEN] == token
            and record[F_STATE] == RUNNING
            and type(lease) is int
            and lease >= 0
            and type(record[F_QUEUE]) is str
        ):
            return record
    return unpack_record(data, job_id)


# What each field of a record may hold (msgpack gives exact types: an int is never a bool or a float here).
_NONE: type = type(None)
_INT: frozenset[type] = frozenset({int, bool})  # a bool is an int to the arithmetic that uses these: harmless
_OPTIONAL_INT: frozenset[type] = frozenset({int, _NONE})
_OPTIONAL_STR: frozenset[type] = frozenset({str, _NONE})
_OPTIONAL_BYTES: frozenset[type] = frozenset({bytes, _NONE})
_OPTIONAL_LIST: frozenset[type] = frozenset({list, _NONE})
_OPTIONAL_NUMBER: frozenset[type] = frozenset({int, float, _NONE})
_NONES = [None] * (F_TIMEOUT - F_STARTED_AT)  # started .. result: all None while a job waits
_NO_OUTCOME = [None] * (F_TIMEOUT - F_ERROR)  # error, error type, traceback, result
_LAST_STATE = len(STATES) - 1  # a state's code is its index in STATES
_FIELDS: tuple[tuple[int, str, frozenset[type]], ...] = (
    (F_STATE, "state", _INT),
    (F_QUEUE, "queue", frozenset({str})),
    (F_NAME, "name", _OPTIONAL_STR),
    (F_PRIORITY, "priority", _INT),
    (F_RETRIES, "retries", _INT),
    (F_MAX_RETRIES, "max_retries", _INT),
    (F_ENQUEUED_AT, "enqueued_at", _INT),
    (F_READY_AT, "ready_at", _INT),
    (F_STARTED_AT, "started_at", _OPTIONAL_INT),
    (F_FINISHED_AT, "finished_at", _OPTIONAL_INT),
    (F_LEASE_UNTIL, "lease_until", _OPTIONAL_INT),
    (F_TOKEN, "token", _OPTIONAL_BYTES),
    (F_ERROR, "error", _OPTIONAL_STR),
    (F_ERROR_TYPE, "error_type", _OPTIONAL_STR),
    (F_TRACEBACK, "traceback", _OPTIONAL_STR),
    (F_RESULT, "result", _OPTIONAL_BYTES),
    (F_TIMEOUT, "timeout", _OPTIONAL_NUMBER),
    (F_ATTEMPTS, "attempts", _OPTIONAL_INT),
    (F_PAYLOAD, "payload", _OPTIONAL_BYTES),
    (F_WORKERS, "workers", _OPTIONAL_LIST),
    (F_ERRORS, "errors", _OPTIONAL_LIST),
    (F_METADATA, "metadata", _OPTIONAL_BYTES),
    (F_LIMITS, "limits", _OPTIONAL_LIST),
)  # F_PARTITION_KEY holds any msgpack value


def _well_typed(r: list[Any]) -> bool:
    """``record_problem(r) is None``, fast: every claim and every completion decodes a record, so this is
    written for as few bytecodes as it can be (``record_problem`` is the readable definition, and a test
    holds the two to the same answers on every field of every kind of record)."""
    state, queue, name, priority, retries, max_retries, enqueued, ready = r[:8]
    try:  # one expression: ints (a float, str, None or list raises TypeError), none negative
        if (state | retries | max_retries | enqueued | ready | (priority + 100)) < 0:
            return False
    except TypeError:
        return False
    if not (
        state <= _LAST_STATE
        and priority <= PRIORITY_MAX
        and type(queue) is str
        and type(name) in _OPTIONAL_STR
        and type(r[F_TIMEOUT]) in _OPTIONAL_NUMBER
        and type(r[F_ATTEMPTS]) in _OPTIONAL_INT
        and type(r[F_PAYLOAD]) in _OPTIONAL_BYTES
        and type(r[F_WORKERS]) in _OPTIONAL_LIST
        and type(r[F_METADATA]) in _OPTIONAL_BYTES
        and type(r[F_LIMITS]) in _OPTIONAL_LIST
    ):
        return False
    errors = r[F_ERRORS]
    if errors is not None and not (type(errors) is list and _errors_ok(errors)):
        return False
    if r[F_STARTED_AT:F_TIMEOUT] == _NONES:  # a waiting job: nothing started, finished or held
        return state != DONE  # type: ignore[no-any-return]  # a done job is indexed by its finish time
    started, finished, lease = r[F_STARTED_AT], r[F_FINISHED_AT], r[F_LEASE_UNTIL]
    if not (
        (started is None or (type(started) is int and started >= 0))
        and (lease is None or (type(lease) is int and lease >= 0))
        and ((type(finished) is int and finished >= 0) if finished is not None else state != DONE)
        and type(r[F_TOKEN]) in _OPTIONAL_BYTES
    ):
        return False
    if r[F_ERROR:F_TIMEOUT] == _NO_OUTCOME:  # no error, no result: a first attempt, running
        return True
    return (
        type(r[F_ERROR]) in _OPTIONAL_STR
        and type(r[F_ERROR_TYPE]) in _OPTIONAL_STR
        and type(r[F_TRACEBACK]) in _OPTIONAL_STR
        and type(r[F_RESULT]) in _OPTIONAL_BYTES
    )


def record_problem(record: list[Any]) -> str | None:
    """What makes a decoded record (of at least ``RECORD_FIELDS`` fields) one that the engine did not
    write, in words (``"a list as its name (None or str expected)"``), or None if it is well formed."""
    for position, field, allowed in _FIELDS:
        value = record[position]
        if type(value) not in allowed:
            names = {"None" if kind is _NONE else kind.__name__ for kind in allowed} - {"bool"}
            what = "None" if value is None else _a(type(value).__name__)
            return f"{what} as its {field} ({' or '.join(sorted(names))} expected)"
    if not 0 <= record[F_STATE] <= _LAST_STATE:
        return f"an unknown state {record[F_STATE]}"
    if not PRIORITY_MIN <= record[F_PRIORITY] <= PRIORITY_MAX:
        return f"a priority out of range ({record[F_PRIORITY]})"
    for position, field in ((F_ENQUEUED_AT, "enqueued_at"), (F_READY_AT, "ready_at"),
                            (F_STARTED_AT, "started_at"), (F_FINISHED_AT, "finished_at"),
                            (F_LEASE_UNTIL, "lease_until")):  # fmt: skip
        if record[position] is not None and record[position] < 0:
            return f"a negative time as its {field}"
    if record[F_RETRIES] < 0 or record[F_MAX_RETRIES] < 0:
        return "a negative retry count"
    if record[F_STATE] == DONE and record[F_FINISHED_AT] is None:
        return "no finished_at although it is done"
    if record[F_ERRORS] is not None and not _errors_ok(record[F_ERRORS]):
        return "an entry of its errors that is not [error type, error]"
    return None


def _errors_ok(errors: list[Any]) -> bool:
    """Each entry of an error history is [error type, error], each a str or None."""
    return all(
        type(entry) is list and len(entry) == 2 and {type(entry[0]), type(entry[1])} <= _OPTIONAL_STR
        for entry in errors
    )
