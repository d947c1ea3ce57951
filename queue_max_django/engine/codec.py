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
from .job import PRIORITY_MAX, PRIORITY_MIN, STATE_CODE, STATES, State

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
    """This thread's record packer: reusing one is about twice as fast as ``packb`` (which builds one per
    call); a packer is not thread-safe, hence one per thread."""
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(use_bin_type=True, datetime=False)
    return packer


class _ValuePacker:
    """This thread's packer of user values (payloads, results): strict, so that msgpack hands every value
    that is not exactly one of its types to ``_plain``. Ordinary payloads never get there and pay nothing.
    A tuple (stored as a list), or a subclass of list or dict, may be a dict key that would come back as a
    list or a map, which cannot be a key: ``containers`` counts them, and a value that had any is unpacked
    once to prove it reads back."""

    __slots__ = ("containers", "pack", "reset")

    def __init__(self) -> None:
        packer = msgpack.Packer(use_bin_type=True, datetime=False, strict_types=True, default=self._plain)
        self.pack, self.reset = packer.pack, packer.reset
        self.containers = 0

    def _plain(self, value: Any) -> Any:
        """What msgpack packs in place of ``value``: the plain type it is made of, as a non-strict packer
        would store it; ``TypeError`` for what is not msgpack data."""
        if isinstance(value, (tuple, list)):
            self.containers += 1
            return list(value)
        if isinstance(value, dict):
            self.containers += 1
            return dict(value)
        if isinstance(value, str):
            return str.__str__(value)  # a str subclass (Django's SafeString, a TextChoices member)
        if isinstance(value, int):
            return int.__int__(value)  # an IntEnum member; bool never gets here
        if isinstance(value, float):
            return float.__float__(value)
        if isinstance(value, bytes):
            return bytes(memoryview(value))
        raise TypeError(f"can not serialize {type(value).__name__!r} object")


def _value_packer() -> _ValuePacker:
    packer: _ValuePacker | None = getattr(_local, "values", None)
    if packer is None:
        packer = _local.values = _ValuePacker()
    return packer


def pack_value(value: Any, *, what: str, limit: int) -> bytes:
    """Encode a user value (payload or result), refusing what msgpack cannot encode, what would not read
    back (a tuple as a dict key), or what is too big. ``PayloadNotSerializable`` names the bad part's path."""
    packer = _value_packer()
    try:
        data: bytes = packer.pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        packer.containers = 0
        raise _not_serializable(what, value, exc) from exc
    if packer.containers:
        packer.containers = 0
        check_reads_back(data, value, what)
    if len(data) > limit:
        raise _too_large(what, len(data), limit)
    return data


def pack_values(values: Iterable[Any], *, what: str, limit: int) -> list[bytes]:
    """``pack_value`` of each value (a batch's payloads): one packer for them all. The message of a bad
    one names its index: ``payloads[3]['args'][0]``."""
    items = values if type(values) is list else list(values)
    packer = _value_packer()
    try:
        out: list[bytes] = list(map(packer.pack, items))
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        packer.containers = 0
        for index, value in enumerate(items):  # which one: only when one is bad
            try:
                pack_value(value, what=f"{what}s[{index}]", limit=1 << 62)
            except PayloadNotSerializable as bad:
                raise bad from exc
        raise _not_serializable(what, None, exc) from exc
    if packer.containers:
        packer.containers = 0
        for index, (data, value) in enumerate(zip(out, items, strict=True)):
            check_reads_back(data, value, f"{what}s[{index}]")
    if out and max(map(len, out)) > limit:
        raise _too_large(what, max(map(len, out)), limit)
    return out


def unstorable(value: Any, what: str = "value") -> str | None:
    """Why ``pack_value`` would refuse ``value`` (None if it would store it), its size aside: msgpack's own
    words when it cannot encode it (``can not serialize 'object' object``), else the part that would not
    read back (``value[(1, 2)]: its key is a tuple, ...``). For callers that name the argument themselves."""
    packer = _value_packer()
    try:
        data: bytes = packer.pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        packer.containers = 0
        return str(exc)
    if packer.containers:
        packer.containers = 0
        try:
            check_reads_back(data, value, what)
        except PayloadNotSerializable as exc:
            found = unstorable_part(value, what)
            return str(exc) if found is None else f"{found[0]}: {found[1]}"
    return None


def check_reads_back(data: bytes, value: Any, what: str) -> None:
    """``PayloadNotSerializable`` (naming the bad part) unless ``data``, the packed ``value``, decodes."""
    try:
        msgpack.unpackb(data, **_unpacker_options)
    except Exception as exc:  # what a reader would meet: a list or a map as a key, nesting past its limit
        raise _not_serializable(what, value, exc) from exc


def _not_serializable(what: str, value: Any, exc: Exception) -> PayloadNotSerializable:
    found = unstorable_part(value, what)
    where, why = found if found is not None else (f"the {what}", str(exc))
    return PayloadNotSerializable(
        f"{where} cannot be stored: {why}. Use msgpack data only: None, bool, int, float, str, bytes, and "
        f"lists (tuples become lists) and dicts of those, with str, int or bytes keys."
    )


MAX_DEPTH = 1024  # levels of nesting msgpack's unpacker reads back (its packer writes one more)
_PATH_MAX = 200  # characters of a path shown in a message; the middle of a longer one is left out


def unstorable_part(value: Any, root: str = "payload") -> tuple[str, str] | None:
    """(path, reason) of the first part of ``value`` that msgpack cannot store so that it reads back, such
    as ``("payload['args'][0][(1, 2)]", "its key is a tuple, which msgpack stores as a list ...")``; None
    if there is none. A walk in Python: only for values already refused (never on a good put's path)."""
    stack: list[tuple[Any, str, int, bool]] = [(value, root, 0, False)]
    while stack:
        item, path, depth, is_key = stack.pop()
        what = _scalar_problem(item, depth)
        if what is None and isinstance(item, dict):
            children: list[tuple[Any, str, int, bool]] = []
            for key, child in item.items():
                key_path = f"{path}[{_short(key)}]"
                if isinstance(key, (tuple, list, dict)):
                    stored = "a map" if isinstance(key, dict) else "a list"
                    return _cut(key_path), (
                        f"its key is {_a(type(key).__name__)}, which msgpack stores as {stored}: that cannot "
                        f"be a key when the job is read back"
                    )
                children += [(key, key_path, depth + 1, True), (child, key_path, depth + 1, False)]
            stack += reversed(children)
        elif what is None and isinstance(item, (tuple, list)):
            stack += reversed([(child, f"{path}[{i}]", depth + 1, False) for i, child in enumerate(item)])
        elif what is not None:
            return _cut(path), f"{'its key' if is_key else 'it'} is {what}"
    return None


def _scalar_problem(item: Any, depth: int) -> str | None:
    """What ``item`` itself is that cannot be stored (its items aside: "a date, which ..."), or None."""
    if depth >= MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if item is None or isinstance(item, (bool, float, bytes, bytearray, memoryview, dict, tuple, list)):
        return None
    if isinstance(item, int):
        if -(2**63) <= item < 2**64:
            return None
        return f"the int {_short(item)}, outside msgpack's 64-bit range (-2**63 to 2**64 - 1)"
    if isinstance(item, str):
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"a str with a lone surrogate ({item[exc.start]!r} at position {exc.start}), which has no "
                f"UTF-8 encoding"
            )
        return None
    if isinstance(item, (msgpack.ExtType, msgpack.Timestamp)):
        return None
    return f"{_a(type(item).__name__)}, which is not msgpack data"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _cut(path: str) -> str:
    if len(path) <= _PATH_MAX:
        return path
    half = _PATH_MAX // 2
    return f"{path[:half]}...{path[-half:]}"


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
            and record[F_STATE] == _RUNNING
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
_DONE = STATE_CODE[State.DONE]
_RUNNING = STATE_CODE[State.RUNNING]
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
    ):
        return False
    errors = r[F_ERRORS]
    if errors is not None and not (type(errors) is list and _errors_ok(errors)):
        return False
    if r[F_STARTED_AT:F_TIMEOUT] == _NONES:  # a waiting job: nothing started, finished or held
        return state != _DONE  # type: ignore[no-any-return]  # a done job is indexed by its finish time
    started, finished, lease = r[F_STARTED_AT], r[F_FINISHED_AT], r[F_LEASE_UNTIL]
    if not (
        (started is None or (type(started) is int and started >= 0))
        and (lease is None or (type(lease) is int and lease >= 0))
        and ((type(finished) is int and finished >= 0) if finished is not None else state != _DONE)
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
    if record[F_STATE] == _DONE and record[F_FINISHED_AT] is None:
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


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"
