"""A shard's upkeep, run by the Queue's maintenance: jobs whose lease expired go back (``recover_expired``,
and ``scrub``, which walks every record for what only broken data causes), due scheduled jobs become
pending (``promote_due``), old done jobs and unique keys go (``vacuum``, ``forget_unique``), and ``purge``
deletes a state's jobs on request. Each is one write transaction.
"""

from __future__ import annotations

from typing import Any

from ...errors import QueueCorrupted
from ...job import SHARD_BITS, STATE_CODE, State
from ...retry import decide
from ..types import UNIQUE_KEY_MIN_TTL, CorruptedJobQuarantined, Recovered
from . import layout, uniqueness
from .access import (
    COUNTERS_KEY,
    ShardDbs,
    delete_job,
    fail_record,
    index_job,
    load_record,
    store_record,
    unindex_job,
)
from .keys import id_from_key, id_key, micros, time_key, time_key_parts
from .layout import (
    CLAIM_ALONE_NEXT,
    CLAIM_BATCH,
    DONE,
    F_CLAIM,
    F_ENQUEUED_AT,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_MAX_RETRIES,
    F_NAME,
    F_QUEUE,
    F_READY_AT,
    F_RETRIES,
    F_STATE,
    F_WORKERS,
    FAILED,
    PENDING,
    RUNNING,
    SCHEDULED,
)
from .quarantine import drop_entries, quarantine, quarantine_met, report
from .records import mark_pending_uncharged

LEASE_EXPIRED = "LeaseExpired"


def recover_expired(shard: ShardDbs, now: float, batch: int = 1000) -> list[Recovered]:
    """Running jobs whose lease expired count a failed attempt and go back to pending, or to failed
    once out of retries; all are claimed alone next time (``CLAIM_ALONE_NEXT``). A job claimed in a
    batch (``CLAIM_BATCH``) is not charged: it goes back to pending, at its place, as a release would
    put it, since the holder that died was running at most one job of its batch, and the next claim
    of it, alone, tells which one that was. Idempotent. -> what was recovered (at most ``batch``)."""
    now_us = micros(now)
    error = ("lease expired: the worker holding the job died or stalled", LEASE_EXPIRED, None)

    found: list[CorruptedJobQuarantined] = []  # records that do not decode: to the dead letters

    def txn_fn(txn: Any) -> list[Recovered]:
        found.clear()
        recovered: list[Recovered] = []
        cursor = txn.cursor(db=shard.lease)
        while len(recovered) < batch and cursor.first():
            expiry_us, job_id = time_key_parts(cursor.key())
            if expiry_us > now_us:
                break
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted as exc:
                found.append(quarantine_met(shard, txn, job_id, shard.lease, cursor.key(), now_us,
                                                         str(exc)))  # fmt: skip
                continue
            if record is None or record[F_STATE] != RUNNING or record[F_LEASE_UNTIL] != expiry_us:
                cursor.delete()  # stray entry
                continue
            batched = record[F_CLAIM] == CLAIM_BATCH
            record[F_CLAIM] = CLAIM_ALONE_NEXT
            if batched:
                unindex_job(shard, txn, job_id, record)
                mark_pending_uncharged(record)
                index_job(shard, txn, job_id, record)
                store_record(shard, txn, job_id, record)
                recovered.append(_recovered(job_id, record, State.PENDING, False))
                continue
            state = fail_record(shard, txn, job_id, record, now, error, _at_once(record, now))
            recovered.append(_recovered(job_id, record, state, True))
        return recovered

    recovered = shard.env.write(txn_fn)
    report(shard, found)
    return recovered


def scrub(
    shard: ShardDbs, now: float, start: bytes | None, batch: int = 2000
) -> tuple[list[Recovered], bytes | None]:
    """Walk up to ``batch`` records from ``start`` and recover running jobs that have no lease entry
    (only broken data can cause that: contract ``rfc_rc_02``), and move records that do not decode, in any
    state, to the dead letters. -> (recovered, where to go on, or None at the end). Recovery calls this a step
    at a time, so the whole store is checked over successive rounds."""
    error = ("lease lost: the job was running without a lease", LEASE_EXPIRED, None)
    now_us = micros(now)
    quarantined: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> tuple[list[Recovered], bytes | None]:
        quarantined.clear()
        cursor = txn.cursor(db=shard.jobs)
        found = cursor.set_range(start) if start is not None else cursor.first()
        orphans: list[tuple[int, list[Any]]] = []
        unreadable: dict[int, str] = {}
        seen = 0
        while found and seen < batch:
            key, raw = cursor.item()
            if key[:8] == COUNTERS_KEY:  # the counters, after every job
                found = False
                break
            seen += 1
            job_id = id_from_key(key)
            try:
                record = layout.unpack_record(raw, job_id)
            except QueueCorrupted as exc:
                unreadable[job_id] = str(exc)
                found = cursor.next()
                continue
            if record[F_STATE] == RUNNING:
                lease_us = record[F_LEASE_UNTIL]
                if lease_us is None or txn.get(time_key(lease_us, job_id), db=shard.lease) is None:
                    orphans.append((job_id, record))
            found = cursor.next()
        resume = cursor.key() if found else None
        recovered = []
        for job_id, record in orphans:
            record[F_LEASE_UNTIL] = None
            state = fail_record(shard, txn, job_id, record, now, error, _at_once(record, now))
            recovered.append(_recovered(job_id, record, state, True))
        if unreadable:
            drop_entries(shard, txn, set(unreadable))  # one scan of the indexes for them all
            for job_id, reason in unreadable.items():
                quarantined.append(quarantine(shard, txn, job_id, None, None, now_us, reason))
        return recovered, resume

    outcome = shard.env.write(txn_fn)
    report(shard, quarantined)
    return outcome


def promote_due(shard: ShardDbs, now: float, batch: int = 1000) -> int:
    """Scheduled jobs whose ETA has passed become pending. -> how many. A due job whose record does not
    decode goes to the dead letters instead (``quarantine``), and promotion goes on."""
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> int:
        found.clear()
        return promote_in(shard, txn, now_us, batch, found)

    moved = shard.env.write(txn_fn)
    report(shard, found)
    return moved


def promote_in(
    shard: ShardDbs, txn: Any, now_us: int, batch: int, found: list[CorruptedJobQuarantined]
) -> int:
    """``promote_due`` inside the write transaction ``txn`` (a claim's, when its shard has due jobs):
    records that do not decode are quarantined into ``found``, for the caller to report. -> how many."""
    cursor = txn.cursor(db=shard.sched)
    moved = 0
    while moved < batch and cursor.first():
        key = cursor.key()
        eta_us, job_id = time_key_parts(key)
        if eta_us > now_us:
            break
        try:
            record = load_record(shard, txn, job_id)
        except QueueCorrupted as exc:
            found.append(quarantine_met(shard, txn, job_id, shard.sched, key, now_us, str(exc)))
            continue
        if record is None or record[F_STATE] != SCHEDULED:
            cursor.delete()  # a stray index entry: drop it (verify() reports such things)
            continue
        unindex_job(shard, txn, job_id, record)
        record[F_STATE] = PENDING
        record[F_READY_AT] = eta_us  # FIFO by the time it became due
        index_job(shard, txn, job_id, record)
        store_record(shard, txn, job_id, record)
        moved += 1
    return moved


def vacuum(shard: ShardDbs, cutoff: float, batch: int = 1000, *, now: float) -> int:
    """Delete done jobs that finished at or before ``cutoff``. -> how many (at most ``batch``). An entry
    whose job is not done (any more) is dropped, the job left alone; a job whose record does not decode
    goes to the dead letters (``quarantine``)."""
    cutoff_us, now_us = micros(cutoff), micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> int:
        found.clear()
        removed = 0
        cursor = txn.cursor(db=shard.done_at)
        while removed < batch and cursor.first():
            index_key = cursor.key()
            finished_us, job_id = time_key_parts(index_key)
            if finished_us > cutoff_us:
                break
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted as exc:
                found.append(quarantine_met(shard, txn, job_id, shard.done_at, index_key, now_us,
                                                         str(exc)))  # fmt: skip
                continue
            cursor.delete()
            removed += 1
            if record is None:
                txn.delete(id_key(job_id), db=shard.payloads)
            elif record[F_STATE] == DONE:
                delete_job(shard, txn, job_id, record)  # its done entry, if it was another, is a stray one
        return removed

    removed = shard.env.write(txn_fn)
    report(shard, found)
    return removed


def forget_unique(shard: ShardDbs, now: float, ttl: float, batch: int = 1000) -> int:
    """Drop the unique keys that hold nothing any more, and those (remembered or windows) used
    ``max(ttl, UNIQUE_KEY_MIN_TTL)`` seconds or more before ``now``: a remembered key lives a day at least,
    so that a periodic tick (which looks back less than that) stays enqueued once whatever the result TTL
    (``uniqueness.forget``). -> how many (at most ``batch``)."""
    return uniqueness.forget(shard, now, now - max(ttl, UNIQUE_KEY_MIN_TTL), batch)


def purge(
    shard: ShardDbs,
    state: State,
    cutoff: float | None,
    batch: int = 1000,
    start: bytes | None = None,
    *,
    now: float,
) -> tuple[int, bytes | None]:
    """Delete the jobs in ``state`` (only those older than ``cutoff`` if given: by finish time for
    done/failed, by enqueue time otherwise) among the next ``batch`` index entries from ``start``.
    -> (deleted, where the next call starts, or None when the index is done).

    A job whose record does not decode is quarantined (``quarantine``): a dead letter. Met while
    purging the dead letters, it goes with them if it is old enough: the enqueue time its id gives is
    the only time known of it."""
    cutoff_us = None if cutoff is None else micros(cutoff)
    now_us = micros(now)
    index = shard.indexes[state]
    code = STATE_CODE[state]
    quarantined: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> tuple[int, bytes | None]:
        quarantined.clear()
        cursor = txn.cursor(db=index)
        found = cursor.set_range(start) if start is not None else cursor.first()
        keys: list[bytes] = []
        while found and len(keys) < batch:
            keys.append(cursor.key())
            found = cursor.next()
        resume = cursor.key() if found else None
        deleted = 0
        for key in keys:
            job_id = id_from_key(key[-8:])  # every index key ends with the job id
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted as exc:
                item = quarantine_met(shard, txn, job_id, index, key, now_us, str(exc))
                quarantined.append(item)
                if code == FAILED and (cutoff_us is None or job_id >> SHARD_BITS <= cutoff_us):
                    delete_job(shard, txn, job_id, load_record(shard, txn, job_id))  # type: ignore[arg-type]
                    item.deleted = True
                    deleted += 1
                continue
            if record is None or record[F_STATE] != code:
                txn.delete(key, db=index)  # a stray entry (verify() reports such things)
                continue
            if cutoff_us is not None:
                stamp = record[F_FINISHED_AT] if state in (State.DONE, State.FAILED) else None
                if (stamp if stamp is not None else record[F_ENQUEUED_AT]) > cutoff_us:
                    continue
            delete_job(shard, txn, job_id, record)
            deleted += 1
        return deleted, resume

    outcome = shard.env.write(txn_fn)
    report(shard, quarantined)
    return outcome


def _recovered(job_id: int, record: list[Any], state: State, charged: bool) -> Recovered:
    """What recovery did with a job, from its record as recovery left it (a charge counted the attempt)."""
    workers = record[F_WORKERS]
    attempt = record[F_RETRIES] + (0 if charged else 1)
    return Recovered(job_id, record[F_QUEUE], record[F_NAME], state, charged, attempt,
                     record[F_MAX_RETRIES] + 1, workers[-1] if workers else None)  # fmt: skip


def _at_once(record: list[Any], now: float) -> float | None:
    """Recovery's decision for a lost lease (a failed attempt): run again at once, or a dead letter when this
    was the last attempt."""
    return decide(record[F_RETRIES] + 1, record[F_MAX_RETRIES], now)
