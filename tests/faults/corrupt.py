"""Breaking a job on disk the way a bad disk, a bad copy or a stray write would: LMDB directly, bypassing
the engine. Each kind of damage is a function (queue, job id) that rewrites the job's bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from queue_max_django.engine import Queue
from queue_max_django.engine.job import shard_of
from queue_max_django.engine.stores.lmdb import keys, layout

GARBAGE = b"\xc1\x00\xffnot a record\xde\xad\xbe\xef"  # 0xc1 is never valid msgpack


def _rewrite(
    q: Queue, job_id: int, change: Callable[[bytes, bytes | None], tuple[bytes, bytes | None]]
) -> None:
    """``change(record bytes, external payload bytes or None)`` -> the new bytes of both (None: leave)."""
    shard = q._shards[shard_of(job_id)]
    key, dbs = keys.id_key(job_id), shard.env.dbs
    with shard.env.env.begin(write=True) as txn:
        raw, payload = txn.get(key, db=dbs["jobs"]), txn.get(key, db=dbs["payloads"])
        assert raw is not None, f"job {job_id} is not on disk"
        new_raw, new_payload = change(bytes(raw), None if payload is None else bytes(payload))
        txn.put(key, new_raw, db=dbs["jobs"])
        if new_payload is not None:
            txn.put(key, new_payload, db=dbs["payloads"])


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
