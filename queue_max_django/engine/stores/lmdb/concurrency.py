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
from .records import start_running

PROMOTE_BATCH = 1000
TURNS_READ = 4 * SCAN_GROUPS  # groups in turn a claim reads, at most (those of its queues: SCAN_GROUPS)


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
    turn (a group served goes to the back of this claim's round too). The groups served or held go to the
    back of the turns in the order each was last served or held, as if each had gone there at that moment
    (the memory store's order): a claim that serves a group twice puts it behind those it served once.

    Its bookkeeping is once per claim, not per job: each limit key's running count is read when first
    needed and written once at the end (``turns.count``/``set_counts``); the turns are settled at the end
    (``turns.settle``: a group already in its new order keeps its place), and whether jobs of a group still
    wait is known from the cursor, which a claimed job's deletion leaves on the group's next job (taken from
    there, without a seek, when the group comes round next)."""
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
        seek, put, get, pack = ready.set_range, txn.put, txn.get, layout.pack_record
        read = turns.in_turn(shard, txn, TURNS_READ)
        cycle = round_of((group for group, _place in read), queues)
        claimed: list[Claimed] = []
        records: list[list[Any]] = []
        # groups served, held by a full limit, or found empty, in the order each last was -> do jobs of
        # theirs still wait? (the turns then: those that wait to the back in this order, the others out)
        seen: dict[str, bool] = {}
        heads: dict[str, bytes] = {}  # each group's range in the ready index
        counts: dict[str, int] = {}  # jobs running per key, as read and as this claim changed them
        charged: set[str] = set()
        queues_left: dict[str, int] = {}  # pending jobs claimed, per queue
        at = None  # the group whose next waiting job the cursor is on (after a claim of one of its jobs)
        while cycle and len(claimed) < limit:
            group = cycle.popleft()
            head = heads.get(group)
            if head is None:
                head = heads[group] = group_head(group) + QUEUE_SEP
            if group is not at and not (seek(head) and ready.key().startswith(head)):
                seen[group] = False  # nothing waits there (or no longer): it leaves the turns
                continue
            at = None
            names = passing(group, skip)
            if names is not None and not _past(ready, head, names):
                continue  # only paused tasks' jobs at its head: it keeps its turn
            key = bytes(ready.key())
            _g, priority, _ready, job_id = ready_key_parts(key)
            if min_priority is not None and priority < min_priority:
                continue  # outranked: it keeps its turn
            id_k = id_key(job_id)
            raw = get(id_k, db=jobs_db)
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
            full = False
            for limit_key, n in keys:
                running = counts.get(limit_key)
                if running is None:
                    running = counts[limit_key] = turns.count(shard, txn, limit_key)
                if running >= n:
                    full = True
                    break
            if full:
                seen.pop(group, None)
                seen[group] = True  # it loses its turn, and waits as it was
                continue
            payload = record[F_PAYLOAD]
            if payload is None:
                payload = get(id_k, db=shard.payloads)
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
            deleted = ready.delete()  # the entry the cursor is on: it moves to the next one
            if not deleted:
                delete_entry(txn, ready_db, key, met=True)
            if deleted and names is None:
                more = ready.key().startswith(head)
            else:  # (or jobs of paused tasks before it were passed over: they wait too)
                more = seek(head) and ready.key().startswith(head)
            put(time_key(lease_us, job_id), b"", db=lease_db)
            job = start_running(job_id, record, value, now_us, lease_us, token, worker, alone)
            if claimed:
                record[F_CLAIM] = CLAIM_BATCH
                if len(claimed) == 1:  # a batch after all: the first job's record says so too
                    first = records[0]
                    first[F_CLAIM] = CLAIM_BATCH
                    put(id_key(claimed[0].job_id), pack(first), db=jobs_db)
            put(id_k, pack(record), db=jobs_db)
            for limit_key, _n in keys:
                counts[limit_key] += 1
                charged.add(limit_key)
            queue = record[F_QUEUE]
            queues_left[queue] = queues_left.get(queue, 0) + 1
            claimed.append(job)
            records.append(record)
            seen.pop(group, None)
            seen[group] = more
            if alone:
                break
            if more:
                at = group
                cycle.append(group)
        if charged:
            turns.set_counts(shard, txn, {key: counts[key] for key in charged})
        for name, count in queues_left.items():
            tally(shard, txn, name.encode(), 0, -count)
        back = [group for group, more in seen.items() if more]
        gone = [group for group, more in seen.items() if not more]
        turns.settle(shard, txn, read, len(read) < TURNS_READ, back, gone)
        return LimitedClaim(claimed, bool(back) or waiting(shard, txn, queues))

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
