"""``NewRecords``: the LMDB encoding of new jobs of one ``JobSpec`` (a put's validated options), with
everything that does not change from job to job already encoded. ``encoded(spec)`` builds it once per spec
and keeps it on the spec (the Queue caches specs per option set: a put with known options encodes nothing).

A new job's record (see stores/lmdb/layout.F_*) differs from its neighbours' only in its two times and its
payload, so the record is written as precomputed bytes around those three: one ``bytes.join`` per job
(for a whole batch in one call) instead of a msgpack encoding of a 23-field list. The bytes are ordinary
msgpack (times as uint64, the payload as bin), so ``layout.unpack_record`` reads them like any other
record; tests check that both encodings decode the same.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import cast

import msgpack

from ...concurrency import group_of
from ...job import STATE_CODE, State
from ...jobspec import JobSpec
from .keys import group_head, ready_prefix
from .layout import F_PAYLOAD, RECORD_FIELDS
from .tagkeys import prefixes_of

_PENDING = STATE_CODE[State.PENDING]
_SCHEDULED = STATE_CODE[State.SCHEDULED]
_TIMES = struct.Struct(">BQBQ")  # enqueued at, ready at: two msgpack uint64 (0xcf)
_UINT64 = 0xCF
_NIL = b"\xc0"
_BIN8_HEADERS = [b"\xc4" + bytes([n]) for n in range(256)]  # msgpack bin 8 of n bytes
_BIN16 = b"\xc5"
_AFTER_PAYLOAD = _NIL * (RECORD_FIELDS - F_PAYLOAD - 1)  # workers, errors, claim, metadata, limits: None


def encoded(spec: JobSpec) -> NewRecords:
    """The ``NewRecords`` of ``spec``, made on its first put and kept on it (``JobSpec.encoded``); a variant
    (``jobspec.variant``: a unique key's note, a keyed limit, made per put) from its base's, only what
    differs encoded anew."""
    parts = spec.encoded
    if parts is None:
        base = spec.base
        parts = spec.encoded = NewRecords(spec) if base is None else encoded(base).variant(spec)
    return cast(NewRecords, parts)


class NewRecords:
    """The constant parts of the stored record and ready index entry of new jobs of one ``JobSpec``."""

    __slots__ = ("_after", "_head_pending", "_head_scheduled", "_middle", "_ready_key", "group", "name_bytes",
                 "queue_bytes", "ready_head", "ready_prefix", "tag_prefixes")  # fmt: skip

    def __init__(self, spec: JobSpec) -> None:
        self.queue_bytes = spec.queue.encode()
        self.name_bytes = b"" if spec.name is None else spec.name.encode()  # the ready index entry's value
        self._place(spec)
        # The record of layout.F_*: [state, queue, name, priority, retries, max_retries] [enqueued, ready]
        # [8 x None (started .. result), timeout, partition_key, attempts] [payload] [workers, errors, claim,
        # metadata].
        packer = msgpack.Packer(use_bin_type=True, datetime=False)
        fields = [spec.queue, spec.name, spec.priority, 0, spec.max_retries]
        after_state = b"".join(packer.pack(value) for value in fields)
        header = b"\xdc" + RECORD_FIELDS.to_bytes(2, "big")
        self._head_pending = header + packer.pack(_PENDING) + after_state
        self._head_scheduled = header + packer.pack(_SCHEDULED) + after_state
        self._middle = _NIL * 8 + packer.pack(spec.timeout) + packer.pack(spec.partition_key) + packer.pack(0)
        self._tail(spec)

    def _place(self, spec: JobSpec) -> None:
        """The ready key's prefix: the queue's, or a limited job's group's (turns.py)."""
        limits = spec.concurrency
        self.group = None if limits is None else group_of(spec.queue, limits)
        self.ready_head = self.queue_bytes if self.group is None else group_head(self.group)
        self.ready_prefix = ready_prefix(self.ready_head, spec.priority)
        self._ready_key = struct.Struct(f">{len(self.ready_prefix)}sQQ")

    def _tail(self, spec: JobSpec) -> None:
        """What follows the payload: [workers, errors, claim] None, then the metadata and the limits."""
        limits = spec.concurrency
        self.tag_prefixes = prefixes_of(spec.metadata)  # the tag index's keys of these jobs (tagged.py)
        if limits is None and spec.metadata is None:
            self._after = _AFTER_PAYLOAD
            return
        limited = _NIL if limits is None else msgpack.packb([self.group, [list(pair) for pair in limits]])
        metadata = _NIL if spec.metadata is None else msgpack.packb(spec.metadata, use_bin_type=True)
        self._after = _NIL * 3 + metadata + limited

    def variant(self, spec: JobSpec) -> NewRecords:
        """The ``NewRecords`` of ``spec``, a variant of this one's spec (``jobspec.variant``: its queue,
        name, priority, retries, timeout and partition key the same; its metadata or limits its own)."""
        copy = NewRecords.__new__(NewRecords)
        copy.queue_bytes, copy.name_bytes = self.queue_bytes, self.name_bytes
        copy._head_pending, copy._head_scheduled, copy._middle = (
            self._head_pending, self._head_scheduled, self._middle
        )  # fmt: skip
        if spec.concurrency is None and self.group is None:
            copy.group, copy.ready_head, copy.ready_prefix, copy._ready_key = (
                None, self.ready_head, self.ready_prefix, self._ready_key
            )  # fmt: skip
        else:
            copy._place(spec)
        copy._tail(spec)
        return copy

    def record(self, scheduled: bool, enqueued_us: int, ready_us: int, payload: bytes | None) -> bytes:
        """``records`` of one job (the single put's path: no lists)."""
        return b"".join((
            self._head_scheduled if scheduled else self._head_pending,
            _TIMES.pack(_UINT64, enqueued_us, _UINT64, ready_us),
            self._middle,
            _bin_header(payload),
            payload or b"",
            self._after,
        ))  # fmt: skip

    def records(
        self, scheduled: bool, enqueued_us: int, ready_us: Iterable[int], payloads: Sequence[bytes | None]
    ) -> list[bytes]:
        """The stored records of new jobs, one per (ready time, payload). A payload is packed and inline,
        or None (stored apart, in the payloads database)."""
        head = self._head_scheduled if scheduled else self._head_pending
        # Everything before the ready time is the same for the whole batch (uint64 markers: see _TIMES).
        before = head + _TIMES.pack(_UINT64, enqueued_us, _UINT64, 0)[:-8]
        middle, after, join = self._middle, self._after, b"".join
        if None in payloads:
            headers = [_bin_header(payload) for payload in payloads]
        else:
            inline = cast(Sequence[bytes], payloads)
            if max(map(len, inline)) > 255:
                headers = [_bin_header(payload) for payload in inline]
            else:  # the common case, small payloads: bin 8 headers from the table
                headers = [_BIN8_HEADERS[size] for size in map(len, inline)]
        return [
            join((before, ready.to_bytes(8, "big"), middle, header, payload or b"", after))
            for ready, header, payload in zip(ready_us, headers, payloads, strict=True)
        ]

    def ready_key(self, ready_us: int, job_id: int) -> bytes:
        """The ready index key of a new pending job: (queue, priority, ready time, id)."""
        return self._ready_key.pack(self.ready_prefix, ready_us, job_id)

    def ready_keys(self, ready_us: int, job_ids: Iterable[int]) -> list[tuple[bytes, bytes]]:
        """(ready index key, value) of new pending jobs all ready at ``ready_us``: (queue, priority, ready
        time, id)."""
        pack, prefix, name = self._ready_key.pack, self.ready_prefix, self.name_bytes
        return [(pack(prefix, ready_us, job_id), name) for job_id in job_ids]


def _bin_header(payload: bytes | None) -> bytes:
    """The msgpack header of ``payload`` as a bin value (nil for None)."""
    if payload is None:
        return _NIL
    size = len(payload)
    if size < 256:
        return _BIN8_HEADERS[size]
    return _BIN16 + size.to_bytes(2, "big")  # INLINE_PAYLOAD_MAX keeps inline payloads below 65,536
