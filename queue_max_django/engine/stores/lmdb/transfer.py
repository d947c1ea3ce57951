"""``Store.transfer`` of the LMDB store (``stores/contract/transfer.py``): a shard's jobs as ``MovedJob``
values and back.

An inserted job is written as the shard's own transactions leave one (``access.store_record`` and
``index_job``: the index of its state, its queue's counts and its group's turn), counted as a put (the
shard's counters: its sequence raised to the job's, so later puts get larger ids), and marked as moved under
``MOVED_PREFIX`` + its id in the jobs database, beside the shard's counters: past every job id, where
``verify`` and the walks over records never read."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ...concurrency import group_of
from ...errors import InvalidJob, QueueCorrupted
from ...job import SHARD_BITS, STATE_CODE, STATES, State
from ..contract.transfer import MovedJob, SealedFields, TransferConflict, UniqueEntry, pack_key, unpack_key
from . import layout, tagkeys
from .access import (
    COUNTERS_KEY,
    delete_job,
    index_job,
    load_payload,
    put_counters,
    store_record,
    tally,
)
from .keys import id_from_key, id_key
from .layout import (
    CLAIM_ALONE_NEXT,
    F_ATTEMPTS,
    F_CLAIM,
    F_ENQUEUED_AT,
    F_ERROR,
    F_ERROR_TYPE,
    F_ERRORS,
    F_FINISHED_AT,
    F_LIMITS,
    F_MAX_RETRIES,
    F_METADATA,
    F_NAME,
    F_PARTITION_KEY,
    F_PAYLOAD,
    F_PRIORITY,
    F_QUEUE,
    F_READY_AT,
    F_RESULT,
    F_RETRIES,
    F_STARTED_AT,
    F_STATE,
    F_TIMEOUT,
    F_TRACEBACK,
    F_WORKERS,
    INLINE_PAYLOAD_MAX,
    RECORD_FIELDS,
    RUNNING,
)
from .shard import Shard
from .uniqueness import ENTRY, entry_of

MOVED_PREFIX = COUNTERS_KEY + b"m"  # + a job id: that job was taken in by a move
_WHEN = struct.Struct(">Q")  # a cancel mark's value (manage.cancel)


class LmdbTransfer:
    def __init__(self, shards: Callable[[], list[Shard]], notify: Callable[[int], None]) -> None:
        self._shards = shards  # the store's, read at each call (a forked child opens its own)
        self._notify = notify

    def _shard(self, index: int) -> Shard:
        shards = self._shards()
        if not 0 <= index < len(shards):
            raise InvalidJob(f"shard {index}: this store has {len(shards)} shard(s), numbered from 0")
        return shards[index]

    def export(self, shard: int, after: int | None, limit: int) -> list[MovedJob]:
        dbs = self._shard(shard)

        def txn_fn(txn: Any) -> list[MovedJob]:
            out: list[MovedJob] = []
            cursor = txn.cursor(db=dbs.jobs)
            if not cursor.set_range(id_key(0 if after is None else after + 1)):
                return out
            for key, raw in cursor:
                if len(out) >= limit or key[:8] == COUNTERS_KEY:
                    break
                job_id = id_from_key(key)
                try:
                    record = layout.unpack_record(raw, job_id)
                except QueueCorrupted:
                    continue  # not exported: it stays, and the move says what stayed behind
                if record[F_STATE] == RUNNING:
                    continue
                payload = load_payload(dbs, txn, job_id, record)
                mark = txn.get(key, db=dbs.cancels)
                out.append(_moved(job_id, record, payload, None if mark is None else _WHEN.unpack(mark)[0]))
            return out

        return dbs.env.read(txn_fn)

    def unique_entries(self, shard: int) -> list[tuple[int, UniqueEntry]]:
        dbs = self._shard(shard)

        def txn_fn(txn: Any) -> list[tuple[int, UniqueEntry]]:
            out = []
            for key, raw in txn.cursor(db=dbs.unique):
                job_id, used_us, hold, until_us = entry_of(raw)
                out.append((job_id, UniqueEntry(bytes(key), used_us, hold, until_us)))
            return out

        return dbs.env.read(txn_fn)

    def insert(self, jobs: Sequence[MovedJob]) -> list[int]:
        if not jobs:
            return []
        index = jobs[0].job_id & ((1 << SHARD_BITS) - 1)
        for job in jobs:
            if job.job_id & ((1 << SHARD_BITS) - 1) != index:
                raise InvalidJob(f"job {job.job_id}: one insert takes the jobs of one shard ({index})")
            if job.state is State.RUNNING:
                raise InvalidJob(f"job {job.job_id}: a running job cannot be moved")
        dbs = self._shard(index)

        def txn_fn(txn: Any) -> list[int]:
            fresh = []
            for job in jobs:
                key = id_key(job.job_id)
                if txn.get(MOVED_PREFIX + key, db=dbs.jobs) is not None:
                    continue
                if txn.get(key, db=dbs.jobs) is not None:
                    raise TransferConflict(f"job {job.job_id} is in the target store already, not by a move")
                fresh.append(job)
            if not fresh:
                return []
            sequence, total, floor = put_counters(txn.get(COUNTERS_KEY, db=dbs.jobs))
            for job in fresh:
                key = id_key(job.job_id)
                record = _record(job)
                if len(job.payload) > INLINE_PAYLOAD_MAX:
                    txn.put(key, job.payload, db=dbs.payloads)
                else:
                    record[F_PAYLOAD] = job.payload
                index_job(dbs, txn, job.job_id, record)
                store_record(dbs, txn, job.job_id, record)
                tagkeys.index_new(txn, dbs.tags, tagkeys.prefixes_of(job.metadata), (job.job_id,))  # its tags
                tally(dbs, txn, job.queue.encode(), 0, 0, 1)  # counted as a put into its queue
                if job.cancel_us is not None:
                    txn.put(key, _WHEN.pack(job.cancel_us), db=dbs.cancels)
                unique = job.unique
                if unique is not None and txn.get(unique.key, db=dbs.unique) is None:
                    entry = ENTRY.pack(job.job_id, unique.used_us, unique.hold, unique.until_us)
                    txn.put(unique.key, entry, db=dbs.unique)
                txn.put(MOVED_PREFIX + key, b"", db=dbs.jobs)
                sequence = max(sequence, job.job_id >> SHARD_BITS)
            dbs._count_puts(txn, sequence, total + len(fresh), floor, len(fresh))
            return [job.job_id for job in fresh]

        written: list[int] = dbs.env.write(txn_fn)
        if written:
            self._notify(index)
        return written

    def remove(self, shard: int, ids: Sequence[int]) -> int:
        dbs = self._shard(shard)

        def txn_fn(txn: Any) -> int:
            gone = 0
            for job_id in ids:
                raw = txn.get(id_key(job_id), db=dbs.jobs)
                if raw is None:
                    continue
                record = layout.unpack_record(raw, job_id)
                if record[F_STATE] != RUNNING:
                    delete_job(dbs, txn, job_id, record)
                    gone += 1
            return gone

        return int(dbs.env.write(txn_fn))

    def forget_marks(self) -> int:
        def txn_fn(dbs: Shard) -> Callable[[Any], int]:
            def fn(txn: Any) -> int:
                keys = _marks(dbs, txn)
                for key in keys:
                    txn.delete(key, db=dbs.jobs)
                return len(keys)

            return fn

        return sum(int(dbs.env.write(txn_fn(dbs))) for dbs in self._shards())

    def marks(self) -> int:
        return sum(len(dbs.env.read(functools.partial(_marks, dbs))) for dbs in self._shards())

    def rewrite(self, shard: int, changes: Sequence[tuple[int, SealedFields, SealedFields]]) -> list[int]:
        dbs = self._shard(shard)

        def txn_fn(txn: Any) -> list[int]:
            done: list[int] = []
            for job_id, old, new in changes:
                key = id_key(job_id)
                raw = txn.get(key, db=dbs.jobs)
                if raw is None:
                    continue
                try:
                    record = layout.unpack_record(raw, job_id)
                except QueueCorrupted:
                    continue
                stored = _sealed(record, load_payload(dbs, txn, job_id, record))
                if record[F_STATE] == RUNNING or stored != old:
                    continue
                if len(new.payload) > INLINE_PAYLOAD_MAX:
                    txn.put(key, new.payload, db=dbs.payloads)
                    record[F_PAYLOAD] = None
                else:
                    if record[F_PAYLOAD] is None:
                        txn.delete(key, db=dbs.payloads)
                    record[F_PAYLOAD] = new.payload
                record[F_RESULT], record[F_ERROR], record[F_TRACEBACK] = new.result, new.error, new.traceback
                record[F_ERRORS] = [[error_type, error] for error_type, error in new.errors] or None
                record[F_METADATA] = new.metadata
                store_record(dbs, txn, job_id, record)
                done.append(job_id)
            return done

        rewritten: list[int] = dbs.env.write(txn_fn)
        return rewritten


def _marks(dbs: Shard, txn: Any) -> list[bytes]:
    cursor = txn.cursor(db=dbs.jobs)
    keys: list[bytes] = []
    if cursor.set_range(MOVED_PREFIX):
        for key in cursor.iternext(values=False):
            if not key.startswith(MOVED_PREFIX):
                break
            keys.append(bytes(key))
    return keys


def _sealed(record: list[Any], payload: bytes | None) -> SealedFields:
    errors = tuple((error_type, error) for error_type, error in record[F_ERRORS] or ())
    return SealedFields(bytes(payload or b""), record[F_RESULT], record[F_ERROR], record[F_TRACEBACK], errors,
                        record[F_METADATA])  # fmt: skip


def _moved(job_id: int, record: list[Any], payload: bytes | None, cancel_us: int | None) -> MovedJob:
    state = STATES[record[F_STATE]]
    waits = state in (State.PENDING, State.SCHEDULED)
    limits = record[F_LIMITS]
    return MovedJob(
        job_id, state, record[F_QUEUE], record[F_NAME], record[F_PRIORITY], record[F_RETRIES],
        record[F_MAX_RETRIES], record[F_ATTEMPTS] or 0, record[F_ENQUEUED_AT],
        record[F_READY_AT] if waits else 0, record[F_STARTED_AT], record[F_FINISHED_AT], record[F_TIMEOUT],
        pack_key(record[F_PARTITION_KEY]), bytes(payload or b""), record[F_RESULT], record[F_ERROR],
        record[F_ERROR_TYPE], record[F_TRACEBACK], tuple(record[F_WORKERS] or ()),
        tuple((error_type, error) for error_type, error in record[F_ERRORS] or ()), record[F_METADATA],
        None if limits is None else tuple((key, n) for key, n in limits[1]),
        record[F_CLAIM] == CLAIM_ALONE_NEXT, cancel_us,
    )  # fmt: skip


def _record(job: MovedJob) -> list[Any]:
    """The stored record of ``job`` (its payload not yet placed: inline or apart)."""
    record: list[Any] = [None] * RECORD_FIELDS
    waits = job.state in (State.PENDING, State.SCHEDULED)
    record[F_STATE] = STATE_CODE[job.state]
    record[F_QUEUE], record[F_NAME], record[F_PRIORITY] = job.queue, job.name, job.priority
    record[F_RETRIES], record[F_MAX_RETRIES], record[F_ATTEMPTS] = job.retries, job.max_retries, job.attempts
    record[F_ENQUEUED_AT] = job.enqueued_us
    record[F_READY_AT] = job.ready_us if waits else (job.finished_us or job.enqueued_us)
    record[F_STARTED_AT], record[F_FINISHED_AT] = job.started_us, job.finished_us
    record[F_ERROR], record[F_ERROR_TYPE], record[F_TRACEBACK] = job.error, job.error_type, job.traceback
    record[F_RESULT], record[F_TIMEOUT] = job.result, job.timeout
    record[F_PARTITION_KEY] = unpack_key(job.partition_key)
    record[F_WORKERS] = list(job.worker_ids) or None
    record[F_ERRORS] = [[error_type, error] for error_type, error in job.errors] or None
    record[F_CLAIM] = CLAIM_ALONE_NEXT if job.alone_next else None
    record[F_METADATA] = job.metadata
    if job.limits is not None:
        record[F_LIMITS] = [group_of(job.queue, job.limits), [list(pair) for pair in job.limits]]
    return record
