"""The LMDB store's concurrency limits (``stores/contract/concurrency.py``): the claim of a shard's limited
jobs, group by group in turn (``turns.py`` keeps the turns and the running counts), and the counts the
limits hold, summed over the shards."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ... import codec
from ...concurrency import SCAN_GROUPS, SCAN_PAST, Skip, full_key, passing, round_of, served
from ...errors import QueueCorrupted
from ..contract.concurrency import LimitedClaim
from ..types import Claimed
from . import layout, turns, upkeep
from .access import ShardDbs, delete_entry, tally, unindex_job
from .keys import QUEUE_SEP, group_head, id_key, micros, ready_key_parts, time_key, time_key_parts
from .layout import CLAIM_ALONE_NEXT, CLAIM_BATCH, F_CLAIM, F_LIMITS, F_PAYLOAD, F_QUEUE, F_STATE, PENDING
from .quarantine import quarantine, report
from .records import as_claimed, mark_running

PROMOTE_BATCH = 1000


def may_start(shard: ShardDbs, txn: Any, record: list[Any]) -> bool:
    """Do the job's limits (if any) let it start now?"""
    limits = record[F_LIMITS]
    if limits is None:
        return True
    keys = limits[1]
    return full_key(keys, turns.running(shard, txn, [key for key, _n in keys])) is None


def waiting(shard: ShardDbs, txn: Any, queues: tuple[str, ...] | None) -> bool:
    """Do limited jobs of ``queues`` wait in this shard? (One seek with no queue filter.)"""
    if queues is None:
        cursor = txn.cursor(db=shard.turns)
        return bool(cursor.set_range(turns.GROUP_PREFIX)) and bytes(cursor.key()).startswith(
            turns.GROUP_PREFIX
        )
    return any(served(group, queues) for group in turns.waiting_groups(shard, txn))


def claim(
    shard: ShardDbs,
    now: float,
    queues: tuple[str, ...] | None,
    lease_time: float,
    token: bytes,
    worker: str | None,
    min_priority: int | None,
    limit: int,
    skip: Skip | None = None,
) -> LimitedClaim:
    """``ConcurrencyOps.claim`` on one shard, in one write transaction: up to ``limit`` jobs, the groups in
    turn (a group served goes to the back of this claim's round too)."""
    now_us = micros(now)
    lease_us = micros(now + lease_time)
    promoted: list[Any] = []

    def txn_fn(txn: Any) -> LimitedClaim:
        promoted.clear()
        sched = txn.cursor(db=shard.sched)
        if sched.first() and time_key_parts(sched.key())[0] <= now_us:
            upkeep.promote_in(shard, txn, now_us, PROMOTE_BATCH, promoted)
        ready_db, jobs_db, lease_db = shard.ready, shard.jobs, shard.lease
        ready = txn.cursor(db=ready_db)
        seek, put, pack = ready.set_range, txn.put, layout.pack_record
        cycle = round_of(turns.in_turn(shard, txn, 4 * SCAN_GROUPS), queues)
        claimed: list[Claimed] = []
        records: list[list[Any]] = []
        served_now: list[str] = []
        heads: dict[str, bytes] = {}  # each group's range in the ready index
        running: dict[str, int] = {}  # jobs running per key, as read and as this claim changed them
        started: dict[str, int] = {}
        queues_left: dict[str, int] = {}  # pending jobs claimed, per queue
        while cycle and len(claimed) < limit:
            group = cycle.popleft()
            head = heads.get(group)
            if head is None:
                head = heads[group] = group_head(group) + QUEUE_SEP
            if not (seek(head) and ready.key().startswith(head)):
                turns.leave_if_done(shard, txn, group)  # nothing waits there (a stray turn)
                continue
            names = passing(group, skip)
            if names is not None and not _past(ready, head, names):
                continue  # only paused tasks' jobs at its head: it keeps its turn
            key = bytes(ready.key())
            _g, priority, _ready, job_id = ready_key_parts(key)
            if min_priority is not None and priority < min_priority:
                continue  # outranked: it keeps its turn
            id_k = id_key(job_id)
            raw = txn.get(id_k, db=jobs_db)
            try:
                record = None if raw is None else layout.unpack_record(raw, job_id)
            except QueueCorrupted as exc:
                quarantine(shard, txn, job_id, key, None, now_us, str(exc))
                cycle.appendleft(group)  # the group's next job may start
                continue
            if record is None or record[F_STATE] != PENDING:
                delete_entry(txn, ready_db, key, met=True)  # a stray entry: its job is gone or moved on
                cycle.appendleft(group)  # (it kept the group's jobs behind it from ever being claimed)
                continue
            alone = record[F_CLAIM] == CLAIM_ALONE_NEXT
            if alone and claimed:
                break  # its lease once expired: the next claim takes it, alone
            keys = record[F_LIMITS][1]
            for limit_key, _n in keys:
                if limit_key not in running:
                    running.update(turns.running(shard, txn, [limit_key]))
            if full_key(keys, running) is not None:
                turns.to_back(shard, txn, group)  # held: it loses its turn, and waits as it was
                continue
            payload = record[F_PAYLOAD]
            if payload is None:
                payload = txn.get(id_k, db=shard.payloads)
            try:
                if payload is None:
                    raise QueueCorrupted(f"job {job_id}: its payload is missing")
                value = codec.unpack_stored(payload, job_id, "payload")
            except QueueCorrupted as exc:
                unindex_job(shard, txn, job_id, record)
                quarantine(shard, txn, job_id, None, record, now_us, str(exc), bad_payload=payload)
                cycle.appendleft(group)
                continue
            # pending -> running, written out (what unindex_job() + index_job() do, the counts once below)
            if not txn.delete(key, db=ready_db):
                delete_entry(txn, ready_db, key, met=True)
            put(time_key(lease_us, job_id), b"", db=lease_db)
            mark_running(record, now_us, lease_us, token, worker)
            if claimed:
                record[F_CLAIM] = CLAIM_BATCH
                if len(claimed) == 1:  # a batch after all: the first job's record says so too
                    first = records[0]
                    first[F_CLAIM] = CLAIM_BATCH
                    put(id_key(claimed[0].job_id), pack(first), db=jobs_db)
            put(id_k, pack(record), db=jobs_db)
            for limit_key, _n in keys:
                running[limit_key] += 1
                started[limit_key] = started.get(limit_key, 0) + 1
            queue = record[F_QUEUE]
            queues_left[queue] = queues_left.get(queue, 0) + 1
            claimed.append(as_claimed(job_id, record, value, alone))
            records.append(record)
            if group not in served_now:
                served_now.append(group)
            if alone:
                break
            cycle.append(group)
        if started:
            turns.change_by(shard, txn, started)
        for name, count in queues_left.items():
            tally(shard, txn, name.encode(), 0, -count)
        for group in served_now:  # to the back of the turns once each, in the order served, or out
            turns.leave_if_done(shard, txn, group)
            if txn.get(turns.GROUP_PREFIX + group.encode(), db=shard.turns) is not None:
                turns.to_back(shard, txn, group)
        return LimitedClaim(claimed, waiting(shard, txn, queues))

    outcome: LimitedClaim = shard.env.write(txn_fn)
    if promoted:
        report(shard, promoted)
    return outcome


def _past(ready: Any, head: bytes, names: frozenset[str]) -> bool:
    """Move ``ready`` (on the first entry of the group ``head`` starts) past the jobs of the tasks ``names``
    (a ready entry's value is its job's name), at most ``SCAN_PAST`` of them. -> whether it is on one of
    the group's jobs that is not theirs."""
    wanted = {name.encode() for name in names}
    for _step in range(SCAN_PAST):
        if bytes(ready.value()) not in wanted:
            return True
        if not (ready.next() and bytes(ready.key()).startswith(head)):
            return False
    return False


class LmdbConcurrency:
    """``Store.concurrency`` of an ``LmdbStore``."""

    passes_paused_tasks = True  # its claim takes ``skip`` (stores/contract/concurrency.py)

    def __init__(self, shards: Callable[[], Sequence[ShardDbs]]) -> None:
        self._shards = shards  # the store's shards now (a forked child opens new ones)

    def claim(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        lease_time: float,
        token: bytes,
        worker: str | None,
        min_priority: int | None,
        limit: int = 1,
        skip: Skip | None = None,
    ) -> LimitedClaim:
        return claim(self._shards()[shard], now, queues, lease_time, token, worker, min_priority, limit, skip)

    def running(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for shard in self._shards():
            counted: dict[str, int] = shard.env.read(functools.partial(_running, shard))
            for key, count in counted.items():
                out[key] = out.get(key, 0) + count
        return dict(sorted(out.items()))

    def waiting(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for shard in self._shards():
            out.update(shard.env.read(functools.partial(_waiting_counts, shard)))
        return dict(sorted(out.items()))


def _running(shard: ShardDbs, txn: Any) -> dict[str, int]:
    return turns.running(shard, txn)


def _waiting_counts(shard: ShardDbs, txn: Any) -> dict[str, int]:
    """Waiting jobs per group of this shard: an entry count of each group's range (a walk: not a hot path)."""
    out = {}
    cursor = txn.cursor(db=shard.ready)
    for group in turns.waiting_groups(shard, txn):
        head = group_head(group) + QUEUE_SEP
        count = 0
        found = cursor.set_range(head)
        while found and bytes(cursor.key()).startswith(head):
            count += 1
            found = cursor.next()
        if count:
            out[group] = count
    return out
