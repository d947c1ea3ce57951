"""A shard's claims: pending jobs become running under a claim token and a lease. ``peek`` reads what a claim
would take, ``claim_many`` takes the next jobs of a shard in claim order (promoting its due scheduled jobs
first, in the same transaction), ``claim_job`` takes one given job. Each claim is one write transaction;
a job met on the way whose record or payload does not decode is quarantined (``quarantine.py``).

``Shard`` binds ``claim_many`` and ``claim_job`` as its own methods (no call in between: they are the hot
path), and ``peek`` likewise.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import codec
from ...errors import QueueCorrupted
from ..types import Claimed, CorruptedJobQuarantined, Head
from . import concurrency, layout, upkeep
from .access import (
    ShardDbs,
    best_ready,
    delete_entry,
    index_job,
    load_payload,
    load_record,
    next_eta,
    queue_heads,
    store_record,
    tally,
    unindex_job,
)
from .keys import _PRIORITY_FLIP, LIMITED, id_key, micros, ready_key_parts, time_key, time_key_parts
from .layout import CLAIM_ALONE_NEXT, CLAIM_BATCH, F_CLAIM, F_LIMITS, F_PAYLOAD, F_STATE, PENDING, SCHEDULED
from .quarantine import quarantine, report
from .records import start_running

_ORDER_UNPACK_FROM = struct.Struct(">HQQ").unpack_from  # a ready key's tail (keys.ready_key_parts)
PROMOTE_BATCH = 1000  # due jobs a claim promotes in its transaction, at most (the rest: the next claim)


@dataclass(frozen=True, slots=True)
class StrayEntry:
    """Internal: a claim met an index entry without a pending job behind it, dropped it, and must retry."""

    job_id: int


def peek(shard: ShardDbs, now: float, queues: Sequence[bytes] | None) -> Head:
    """Read-only look at this shard: the priority of the job a claim would take, and the earliest ETA."""

    names = None if queues is None else tuple(bytes(queue).decode() for queue in queues)

    def txn_fn(txn: Any) -> Head:
        key = best_ready(txn.cursor(db=shard.ready), queues)
        priority = None if key is None else ready_key_parts(key)[1]
        return Head(priority, next_eta(shard, txn), concurrency.waiting(shard, txn, names))

    return shard.env.read(txn_fn)


def claim_job(
    shard: ShardDbs,
    now: float,
    job_id: int,
    lease_time: float,
    token: bytes,
    *,
    scheduled_too: bool = False,
    worker: str | None = None,
) -> Claimed | None:
    """Claim exactly this job if it is still pending (or scheduled, with ``scheduled_too``: it starts
    now, before its ETA). -> None if it is in another state or gone."""
    now_us = micros(now)
    lease_us = micros(now + lease_time)

    def txn_fn(txn: Any) -> Claimed | None:
        record = load_record(shard, txn, job_id)
        if record is None or not (
            record[F_STATE] == PENDING or (scheduled_too and record[F_STATE] == SCHEDULED)
        ):
            return None
        if record[F_LIMITS] is not None and not concurrency.may_start(shard, txn, record):
            return None  # its limit is full: a limit holds against every claim
        payload = load_payload(shard, txn, job_id, record)
        if payload is None:
            return None
        try:
            value = codec.unpack_stored(payload, job_id, "payload")
        except QueueCorrupted as exc:
            unindex_job(shard, txn, job_id, record)
            quarantine(shard, txn, job_id, None, record, now_us, str(exc), bad_payload=payload)
            return None
        unindex_job(shard, txn, job_id, record)
        claimed = start_running(job_id, record, value, now_us, lease_us, token, worker, False)
        index_job(shard, txn, job_id, record)
        store_record(shard, txn, job_id, record)
        return claimed

    return shard.env.write(txn_fn)


def claim_many(
    shard: ShardDbs,
    now: float,
    queues: Sequence[bytes] | None,
    lease_time: float,
    token: bytes,
    min_priority: int | None = None,
    worker: str | None = None,
    *,
    limit: int,
) -> tuple[list[Claimed], int | None, float | None, bool]:
    """Take up to ``limit`` next jobs of this shard (pending -> running, a fresh lease and the claim
    token), in claim order, in ONE transaction; stops before a job below ``min_priority`` (the best
    priority another shard may hold). -> (the claimed jobs, possibly none; the priority of this shard's
    next job among ``queues`` after them, None if there is none; the earliest ETA of its scheduled
    jobs, as ``peek`` gives it; whether limited jobs wait there): with nothing claimed and a priority,
    the claim was outranked and the caller looks again. A corrupted job met on the way is quarantined;
    if it came first, ``CorruptedJobQuarantined`` is raised (the jobs before it are claimed and returned
    otherwise).

    The jobs of a claim of two or more are marked ``CLAIM_BATCH``: if their lease expires, recovery does
    not charge them the attempt but marks them ``CLAIM_ALONE_NEXT``, and a claim takes such a job alone
    (it stops before one that would join others, and after one that came first)."""
    now_us = micros(now)
    lease_us = micros(now + lease_time)

    promoted: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> tuple[list[Claimed], int | None, float | None, bool] | CorruptedJobQuarantined:
        claimed: list[Claimed] = []
        first: list[Any] = []  # the first job's record, rewritten if a second one joins
        # Due scheduled jobs become pending first, in this transaction: a claim never takes a job of
        # lower priority than one whose ETA has passed (the caller's view of the ETAs may be stale).
        promoted.clear()
        sched = txn.cursor(db=shard.sched)
        # The earliest ETA, read once: a claim adds no scheduled job, so it is still the shard's earliest
        # at the end, unless a promotion or a quarantine wrote there (``stale``: read it again then).
        eta: float | None = None
        stale = False
        if sched.first():
            eta_us = time_key_parts(sched.key())[0]
            if eta_us <= now_us:
                upkeep.promote_in(shard, txn, now_us, PROMOTE_BATCH, promoted)
                stale = True
            else:
                eta = eta_us / 1_000_000
        cursor = txn.cursor(db=shard.ready)
        heads = queue_heads(cursor, queues)  # [order, key, prefix] of each queue's next job
        one_queue = len(heads) == 1  # then every job claimed is of that queue
        on = None  # the ready key the cursor stands on (that very object), where this loop put it
        # The jobs and leases a claim writes sit next to each other (ids in claim order, one lease time):
        # a cursor's lookup next to its last one stays in its leaf page, where txn.get/put descend from
        # the root. The jobs cursor only reads and rewrites the record it stands on (``_read_pending``).
        jobs = txn.cursor(db=shard.jobs)
        leases = txn.cursor(db=shard.lease)
        pack = layout._packer().pack
        while len(claimed) < limit and heads:
            head = min(heads)
            key, prefix = head[1], head[2]
            try:  # the key's last 18 bytes: (flipped priority, ready µs, id), as ready_key_parts reads them
                flipped, _ready_us, job_id = _ORDER_UNPACK_FROM(key, -18)
            except struct.error:
                _queue, _priority, _ready_us, job_id = ready_key_parts(key)  # raises: a misshapen key, named
            if min_priority is not None and _PRIORITY_FLIP - flipped < min_priority:
                _tally_claims(shard, txn, claimed, one_queue)
                eta = next_eta(shard, txn) if stale else eta
                return claimed, _PRIORITY_FLIP - flipped, eta, bool(cursor.set_range(LIMITED))
            id_k = id_key(job_id)
            read = _read_pending(shard, txn, jobs, key, job_id, id_k, now_us)
            if type(read) is tuple:
                record, value, held = read
                alone = record[F_CLAIM] == CLAIM_ALONE_NEXT
                if alone and claimed:
                    break  # it waits for a claim of its own
                # pending -> running, written out (the hot path: what unindex_job() + index_job() do)
                leases.put(time_key(lease_us, job_id), b"")
                job = start_running(job_id, record, value, now_us, lease_us, token, worker, alone)
                if claimed:
                    record[F_CLAIM] = CLAIM_BATCH
                    if len(claimed) == 1:  # a batch after all: the first job's record says so too
                        first[F_CLAIM] = CLAIM_BATCH
                        txn.put(id_key(claimed[0].job_id), pack(first), db=shard.jobs)
                else:
                    first = record
                if held:
                    jobs.put(id_k, pack(record))
                else:  # the cursor's page misled its lookup (a damaged page): the next one starts afresh
                    txn.put(id_k, pack(record), db=shard.jobs)
                    jobs = txn.cursor(db=shard.jobs)
                claimed.append(job)
                # Its key leaves the ready index under the cursor (on it already, or one lookup away), which
                # then stands on the key after it: its queue's next job, unless that key is not greater (a
                # key out of order in a damaged page) or another queue's: then the seek below says.
                if (key is on or cursor.set_key(key)) and cursor.delete():
                    following = cursor.key()
                    if following > key and following.startswith(prefix):
                        head[0], head[1] = following[len(prefix) :], following
                        on = following
                        if alone:
                            break
                        continue
                else:  # a lookup misses it (a damaged page holds it out of order): found where it is
                    delete_entry(txn, shard.ready, key, met=True)
            elif isinstance(read, CorruptedJobQuarantined):
                if not claimed:
                    return read
                stale = True  # the quarantine may have settled a workflow's node: read the ETA again
                break  # keep the claims made before it; what follows is re-read by the next claim
            else:  # stray, dropped (the cursor, which missed its record, starts afresh)
                alone = False
                jobs = txn.cursor(db=shard.jobs)
            # The key is gone (claimed or stray: ``delete_entry``), and so is every key of its queue's
            # range before it: that queue's next job is the first key of its range. (A seek from the
            # key, the same descent, would be misled by a key out of order in a damaged page.)
            on = None
            if cursor.set_range(prefix) and (following := cursor.key()).startswith(prefix):
                head[0], head[1] = following[len(prefix) :], following
                on = following
            else:
                heads.remove(head)
            if alone:
                break
        if len(claimed) == 1:  # the queue counts after the claims left pending (one write per queue)
            tally(shard, txn, claimed[0].queue.encode(), 0, -1)
        elif claimed:
            _tally_claims(shard, txn, claimed, one_queue)
        after = ready_key_parts(min(heads)[1])[1] if heads else None
        if stale:
            eta = next_eta(shard, txn)
        # limited jobs wait past every queue's range (turns.py): one seek says whether there are any
        return claimed, after, eta, bool(cursor.set_range(LIMITED))

    outcome = shard.env.write(txn_fn)
    if promoted:
        report(shard, promoted)
    if isinstance(outcome, CorruptedJobQuarantined):
        raise outcome
    return outcome


def _tally_claims(shard: ShardDbs, txn: Any, claimed: list[Claimed], one_queue: bool) -> None:
    """The queue counts after ``claimed`` left pending (one write per queue; ``one_queue``: all of one)."""
    if not claimed:
        return
    queue = claimed[0].queue
    if one_queue or len(claimed) == 1 or all(item.queue == queue for item in claimed):
        tally(shard, txn, queue.encode(), 0, -len(claimed))
        return
    changes: dict[str, int] = {}
    for item in claimed:
        changes[item.queue] = changes.get(item.queue, 0) + 1
    for name, count in changes.items():
        tally(shard, txn, name.encode(), 0, -count)


def _read_pending(
    shard: ShardDbs, txn: Any, jobs: Any, key: bytes, job_id: int, id_k: bytes, now_us: int
) -> tuple[list[Any], Any, bool] | StrayEntry | CorruptedJobQuarantined:
    """The record and decoded payload of the pending job of ready ``key``, and whether the ``jobs`` cursor
    stands on its record (it found it; else a lookup from the root did) -- or the stray entry dropped, or
    the job quarantined (its record or payload does not decode, or its payload is missing)."""
    if jobs.set_key(id_k):
        held, raw = True, jobs.value()
    else:  # a lookup from the root, in case the cursor's page misled its own
        held, raw = False, txn.get(id_k, db=shard.jobs)
        if raw is None:
            return _drop_stray(shard, txn, job_id, key)
    try:
        record = layout.unpack_record(raw, job_id)
    except QueueCorrupted as exc:
        return quarantine(shard, txn, job_id, key, None, now_us, str(exc))
    if record[F_STATE] != PENDING:
        return _drop_stray(shard, txn, job_id, key)
    payload = record[F_PAYLOAD]  # inline, or stored apart (``access.load_payload``)
    if payload is None:
        payload = txn.get(id_k, db=shard.payloads)
        if payload is None:
            missing = f"job {job_id}: its payload is missing"
            return quarantine(shard, txn, job_id, key, record, now_us, missing)
    try:
        value = codec.unpack_stored(payload, job_id, "payload")
    except QueueCorrupted as exc:
        return quarantine(shard, txn, job_id, key, record, now_us, str(exc), bad_payload=payload)
    return record, value, held


def _drop_stray(shard: ShardDbs, txn: Any, job_id: int, ready_k: bytes) -> StrayEntry:
    """A ready entry whose job is gone or not pending: remove the stray entries, keep the record."""
    delete_entry(txn, shard.ready, ready_k, met=True)
    return StrayEntry(job_id)
