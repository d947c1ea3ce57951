"""Unique keys in one LMDB shard (``contract/uniqueness.py``): each put's decision, inside the put's write
transaction, and the vacuum's forgetting. The Queue routes a key to one shard, so the entry and its holder
are there.

An entry, in the shard's ``unique`` database under the key: ``ENTRY`` (holder id, µs it was taken, hold,
window end µs); an entry written before holds existed is ``access.UNIQUE`` (id, µs), a remembered key.
The duplicates skipped and replaced are counted in the jobs database beside the shard's other counters
(``DUPLICATES_KEY``), in the put's transaction.
"""

from __future__ import annotations

import struct
from typing import Any

from ...errors import DuplicateJob, QueueCorrupted
from ..contract.uniqueness import (
    HOLD_REMEMBERED,
    HOLD_WINDOW,
    ON_DUPLICATE_RAISE,
    ON_DUPLICATE_REPLACE,
    UniqueRule,
    counted,
    holds,
    until_of,
)
from ..types import NewJobs
from . import layout, tagkeys
from .access import COUNTERS_KEY, UNIQUE, ShardDbs, index_job, store_record, unindex_job
from .keys import id_key, micros
from .layout import F_METADATA, F_PAYLOAD, F_READY_AT, F_STATE, PENDING, SCHEDULED

ENTRY = struct.Struct(">QQBQ")
DUPLICATES_KEY = COUNTERS_KEY + b"u"
DUPLICATES = struct.Struct(">QQ")  # (skipped, replaced) in this shard, ever


def entry_of(raw: bytes) -> tuple[int, int, int, int]:
    """(holder id, µs taken, hold, window end µs) of a stored entry."""
    if len(raw) == UNIQUE.size:
        job_id, used_us = UNIQUE.unpack(raw)
        return job_id, used_us, HOLD_REMEMBERED, 0
    job_id, used_us, hold, until_us = ENTRY.unpack(raw)
    return job_id, used_us, hold, until_us


def _record(shard: ShardDbs, txn: Any, job_id: int) -> list[Any] | None:
    """The holder's record, or None when it is gone (or does not decode: it can be nobody's holder)."""
    raw = txn.get(id_key(job_id), db=shard.jobs)
    if raw is None:
        return None
    try:
        return layout.unpack_record(raw, job_id)
    except QueueCorrupted:
        return None


def decide(shard: ShardDbs, txn: Any, batch: NewJobs, rule: UniqueRule, now_us: int) -> int | None:
    """The put of ``batch`` (one payload) with ``rule``: None, write the job (then ``take``); else the id of
    the key's holder, the batch a duplicate (skipped, or its payload given to the waiting holder).
    ``DuplicateJob`` for ``raise``: the caller's transaction aborts."""
    batch.unique_hit = batch.replaced = False  # (a group commit may decide a batch a second time)
    raw = txn.get(rule.key, db=shard.unique)
    if raw is None:
        return None
    job_id, _used_us, hold, until_us = entry_of(raw)
    record = _record(shard, txn, job_id)
    if not holds(hold, until_us, None if record is None else record[F_STATE], now_us):
        return None
    if rule.on_duplicate == ON_DUPLICATE_RAISE:
        raise DuplicateJob(job_id, rule.text)
    if rule.on_duplicate == ON_DUPLICATE_REPLACE:
        if record is None or record[F_STATE] not in (PENDING, SCHEDULED):
            return None  # not waiting: untouched, and the new job takes the key
        _replace(shard, txn, job_id, record, batch, now_us)
        batch.replaced = True
    if counted(rule):
        _count(shard, txn, batch.replaced)
    batch.unique_hit = True
    return job_id


def _replace(shard: ShardDbs, txn: Any, job_id: int, record: list[Any], batch: NewJobs, now_us: int) -> None:
    """The waiting job takes the batch's payload, metadata and ready time (its index entry and its queue's
    counts with it)."""
    spec = batch.spec
    payload = bytes(batch.payloads[0])
    key = id_key(job_id)
    unindex_job(shard, txn, job_id, record)
    if record[F_PAYLOAD] is None:
        txn.delete(key, db=shard.payloads)
    if len(payload) > layout.INLINE_PAYLOAD_MAX:
        txn.put(key, payload, db=shard.payloads)
        record[F_PAYLOAD] = None
    else:
        record[F_PAYLOAD] = payload
    tagkeys.unindex(shard, txn, job_id, record[F_METADATA])  # the new put's tags are the job's now
    tagkeys.index_new(txn, shard.tags, tagkeys.prefixes_of(spec.metadata), (job_id,))
    record[F_METADATA] = spec.metadata
    ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
    record[F_STATE] = SCHEDULED if ready_us > now_us else PENDING
    record[F_READY_AT] = max(ready_us, now_us)
    index_job(shard, txn, job_id, record)
    store_record(shard, txn, job_id, record)


def _count(shard: ShardDbs, txn: Any, replaced: bool) -> None:
    raw = txn.get(DUPLICATES_KEY, db=shard.jobs)
    skipped, replacements = DUPLICATES.unpack(raw) if raw is not None else (0, 0)
    if replaced:
        replacements += 1
    else:
        skipped += 1
    txn.put(DUPLICATES_KEY, DUPLICATES.pack(skipped, replacements), db=shard.jobs)


def take(shard: ShardDbs, txn: Any, rule: UniqueRule, job_id: int, now_us: int) -> None:
    """The key now names the new job ``job_id``, taken now."""
    txn.put(rule.key, ENTRY.pack(job_id, now_us, rule.hold, until_of(rule, now_us)), db=shard.unique)


def counts(shard: ShardDbs, txn: Any) -> tuple[int, int]:
    """(duplicates skipped, replaced) in this shard, ever."""
    raw = txn.get(DUPLICATES_KEY, db=shard.jobs)
    if raw is None:
        return 0, 0
    skipped, replaced = DUPLICATES.unpack(raw)
    return skipped, replaced


def forget(shard: ShardDbs, now: float, ttl_cutoff: float, batch: int) -> int:
    """Vacuum: drop the entries that hold nothing now, and the remembered or window entries taken at or
    before ``ttl_cutoff``, at most ``batch`` of them. -> how many. A scan of the entries, which are as many
    as the keys in use (one per live keyed job, one per recent periodic tick)."""
    now_us, cutoff_us = micros(now), micros(ttl_cutoff)

    def txn_fn(txn: Any) -> int:
        stale = []
        for key, raw in txn.cursor(db=shard.unique):
            job_id, used_us, hold, until_us = entry_of(bytes(raw))
            if hold in (HOLD_REMEMBERED, HOLD_WINDOW) and used_us <= cutoff_us:
                stale.append(bytes(key))
            elif hold != HOLD_REMEMBERED:
                record = None if hold == HOLD_WINDOW else _record(shard, txn, job_id)
                if not holds(hold, until_us, None if record is None else record[F_STATE], now_us):
                    stale.append(bytes(key))
            if len(stale) >= batch:
                break
        for key in stale:
            txn.delete(key, db=shard.unique)
        return len(stale)

    forgotten: int = shard.env.write(txn_fn)
    return forgotten
