"""msgpack encoding of payloads and results: what a job carries, in any store; and ``job_from_stored``, the
``Job`` snapshot a store makes of a job's stored fields (its payload and result decoded, its times in
seconds), the same in every store.

The store holds msgpack data only: no pickle, no code (invariant 6). How the LMDB store lays out a job's
record around them is ``stores/lmdb/layout.py``'s; the PostgreSQL store's row, ``stores/postgres/rows.py``'s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import PayloadNotSerializable, PayloadTooLarge, QueueCorrupted
from .job import Job, State
from .metadata import unpack_metadata

_unpacker_options: dict[str, Any] = {"raw": False, "strict_map_key": False, "timestamp": 0}
_local = threading.local()


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


@dataclass(slots=True)  # not frozen: built once per job on the worker's hot path (a frozen one costs 2x)
class Packed:
    """A job's result and its bytes as they will be stored (``Record.pack_result``'s), packed once: given
    to ``Record.ack`` or ``Queue.ack_many`` as the result, ``data`` is stored as it is (not packed again)
    and the success event carries ``value``. The worker's completer packs each result when the task
    returns (a result that cannot be stored fails the job then) and acknowledges it later, in a batch."""

    value: Any
    data: bytes | None


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
    return msgpack.unpackb(data, raw=False, strict_map_key=False, timestamp=0)  # _unpacker_options


def unpack_stored(data: bytes, job_id: int, what: str) -> Any:
    """A payload or result read from disk: ``QueueCorrupted`` if the bytes there do not decode. (The options
    are ``_unpacker_options``, spelled out: a call through ``**`` costs a claim 0.2 µs a job.)"""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, timestamp=0)
    except Exception as exc:  # any decoding failure means the bytes on disk are not what we wrote
        raise QueueCorrupted(f"job {job_id}: the stored {what} cannot be decoded ({exc!r})") from exc


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def job_from_stored(
    job_id: int,
    state: State,
    *,
    queue: str,
    name: str | None,
    priority: int,
    payload: bytes | None,
    result: bytes | None,
    retries: int,
    max_retries: int,
    error: str | None,
    error_type: str | None,
    traceback: str | None,
    enqueued_us: int,
    started_us: int | None,
    finished_us: int | None,
    ready_us: int | None,
    lease_us: int | None,
    attempts: int | None,
    timeout: float | None,
    partition_key: Any,
    worker_ids: Iterable[str] | None,
    errors: tuple[tuple[str | None, str | None], ...],
    metadata: bytes | str | None = None,
    damage: Iterable[str] = (),
) -> Job:
    """A ``Job`` snapshot of a job's stored fields, in any store: times in integer µs (the ready time is
    the ETA only while scheduled, the lease only counts while running), payload and result as the msgpack
    bytes stored. A snapshot never fails on bytes that do not decode: it keeps them and says why
    (``damage``: what the caller found already, such as a partition key that does not decode, then
    this)."""
    damage = list(damage)

    def decoded(raw: bytes | None, what: str) -> Any:
        if raw is None:
            return None
        try:
            return unpack_stored(raw, job_id, what)
        except QueueCorrupted as exc:
            damage.append(str(exc))
            return bytes(raw)

    payload_value, result_value = decoded(payload, "payload"), decoded(result, "result")
    try:
        metadata_value = unpack_metadata(metadata)
    except ValueError as exc:  # JSON that does not decode (a bad UTF-8 byte too): shown as none
        damage.append(f"job {job_id}: the stored metadata does not decode ({exc})")
        metadata_value = {}
    return Job(
        job_id=job_id,
        state=state,
        queue=queue,
        name=name,
        priority=priority,
        payload=payload_value,
        result=result_value,
        retries=retries,
        max_retries=max_retries,
        error=error,
        error_type=error_type,
        traceback=traceback,
        enqueued_at=enqueued_us / 1_000_000,
        started_at=_seconds(started_us),
        finished_at=_seconds(finished_us),
        eta=_seconds(ready_us) if state is State.SCHEDULED else None,
        attempts=attempts or 0,
        timeout=timeout,
        partition_key=partition_key,
        lease_until=_seconds(lease_us) if state is State.RUNNING else None,
        worker_ids=tuple(worker_ids or ()),
        errors=errors,
        damage="; ".join(damage) or None,
        metadata=metadata_value,
    )


def _seconds(us: int | None) -> float | None:
    return None if us is None else us / 1_000_000
