"""Breaking a job on disk the way a bad disk, a bad copy or a stray write would, bypassing the engine. Each
kind of damage is a function (queue, job id) that rewrites the job's bytes: its record (one msgpack value)
and its payload, through the LMDB probe (tests/engine/probes.py, the one module that knows the layout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.lmdb import layout

GARBAGE = b"\xc1\x00\xffnot a record\xde\xad\xbe\xef"  # 0xc1 is never valid msgpack


def _rewrite(
    q: Queue, job_id: int, change: Callable[[bytes, bytes | None], tuple[bytes, bytes | None]]
) -> None:
    """``change(record bytes, external payload bytes or None)`` -> the new bytes of both (None: leave)."""
    from tests.engine.probes import LmdbProbe  # probes.py builds its damage on this module's

    LmdbProbe(q).rewrite_job_bytes(job_id, change)


def garbage_record(q: Queue, job_id: int) -> None:
    """The whole record is replaced by bytes that are not msgpack."""
    _rewrite(q, job_id, lambda raw, payload: (GARBAGE, None))


def truncated_record(q: Queue, job_id: int) -> None:
    """The record is cut in half (a torn write)."""
    _rewrite(q, job_id, lambda raw, payload: (raw[: len(raw) // 2], None))


def record_of_another_shape(q: Queue, job_id: int) -> None:
    """Valid msgpack, but not a job record."""
    _rewrite(q, job_id, lambda raw, payload: (msgpack.packb({"state": "pending", "evil": True}), None))


def garbage_payload(q: Queue, job_id: int) -> None:
    """The record is fine; the payload's bytes (inline or in their own database) are not msgpack."""

    def change(raw: bytes, payload: bytes | None) -> tuple[bytes, bytes | None]:
        if payload is not None:
            return raw, GARBAGE
        record = msgpack.unpackb(raw)
        assert record[layout.F_PAYLOAD] is not None
        record[layout.F_PAYLOAD] = GARBAGE
        return msgpack.packb(record, use_bin_type=True), None

    _rewrite(q, job_id, change)


def garbage_result(q: Queue, job_id: int) -> None:
    """The record is fine but for its result, whose bytes are not msgpack."""
    wrong_type(layout.F_RESULT, GARBAGE)(q, job_id)


def wrong_type(field: int, value: Any) -> Callable[[Queue, int], None]:
    """Valid msgpack of a record's shape, but field ``field`` (a ``layout.F_*``) holds ``value``, of a type
    (or in a range) the engine never writes there."""

    def damage(q: Queue, job_id: int) -> None:
        def change(raw: bytes, payload: bytes | None) -> tuple[bytes, bytes | None]:
            record = msgpack.unpackb(raw)
            record[field] = value
            return msgpack.packb(record, use_bin_type=True), None

        _rewrite(q, job_id, change)

    return damage


WRONG_TYPES = {
    "name-a-list": wrong_type(layout.F_NAME, ["tasks", "add"]),
    "queue-an-int": wrong_type(layout.F_QUEUE, 7),
    "priority-a-str": wrong_type(layout.F_PRIORITY, "high"),
    "enqueued-at-a-float": wrong_type(layout.F_ENQUEUED_AT, 1.5),
    "ready-at-negative": wrong_type(layout.F_READY_AT, -1),
    "state-unknown": wrong_type(layout.F_STATE, 9),
    "workers-a-str": wrong_type(layout.F_WORKERS, "w-1"),
}
"""Records that decode but hold what the engine never writes: every path treats them as undecodable."""
RECORD_DAMAGE = {"garbage-record": garbage_record, "truncated-record": truncated_record,
                 "record-of-another-shape": record_of_another_shape} | WRONG_TYPES  # fmt: skip
PAYLOAD_DAMAGE = {"garbage-payload": garbage_payload}
DAMAGE = RECORD_DAMAGE | PAYLOAD_DAMAGE
