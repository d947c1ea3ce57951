"""One shard's atomic operations. Each public method is exactly one LMDB transaction.

The LMDB side of the storage interface (``stores/base.py``): enqueue, claim, touch, complete, fail, release,
recover expired, promote due, get, list, requeue/delete, counts, purge, vacuum, verify. Every method takes
``now`` (unix seconds from the queue's clock) and never reads the wall clock itself. A job's state and every
index that mentions it change in the same write transaction (invariant 1).

Here: putting and ending jobs (the hot paths). Claiming is ``claims.py``'s, the upkeep ``upkeep.py``'s, the
reads ``reads.py``'s, requeue, delete and cancel ``manage.py``'s; what every transaction does to a job is
``access.py``'s.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import Any

from ...cancels import CancelOutcome
from ...errors import QueueCorrupted, StoreFull
from ...job import STATES, Job, State
from ...jobspec import JobSpec
from ...metadata import keeping_cancel_note
from ...workflows import WORKFLOW_MARK
from ..types import Candidate, NewJobs, Recovered
from . import claims, layout, manage, reads, tagkeys, turns, uniqueness, upkeep, workflows
from .access import (
    COUNTERS_KEY,
    PUT_COUNTERS,
    QUEUE_COUNTS_EXACT,
    QUEUE_COUNTS_KEY,
    cancel_counts,
    entry_count,
    fail_record,
    index_job,
    put_counters,
    store_record,
    tally,
    unindex_job,
)
from .env import Env, put_reserve
from .keys import QUEUE_SEP, id_key, micros, time_key
from .layout import (
    DONE,
    F_ATTEMPTS,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_LIMITS,
    F_METADATA,
    F_READY_AT,
    F_RESULT,
    F_STATE,
    F_TOKEN,
    RUNNING,
    SCHEDULED,
)
from .newrecords import NewRecords, encoded
from .quarantine import Unreadable, quarantine_unreadable, recount_running
from .reads import Listed
from .records import mark_pending_uncharged

_ID = struct.Struct(">Q")
_TIME_KEY = struct.Struct(">QQ")
_PUT_COUNTERS_UNPACK = PUT_COUNTERS.unpack


class Shard:
    def __init__(self, index: int, env: Env) -> None:
        self.index = index
        self.env = env
        dbs = env.dbs
        self.jobs = dbs["jobs"]
        self.payloads = dbs["payloads"]
        self.ready = dbs["ready"]
        self.sched = dbs["sched"]
        self.lease = dbs["lease"]
        self.done_at = dbs["done_at"]
        self.failed = dbs["failed"]
        self.unique = dbs["unique"]
        self.cancels = dbs["cancels"]  # job id -> when a cancel was requested (manage.cancel)
        self.workflows = dbs["workflows"]  # workflows and their nodes (workflows.py)
        self.node_ended = workflows.ended
        self.released = False  # a transaction released a workflow's node: the store hints (workflows.py)
        self.wf_batch: dict[bytes, list[Any]] | None = None  # settlings kept back in complete_many
        self.turns = dbs["turns"]  # concurrency limits: groups' turns, jobs running per key (turns.py)
        self.tags = dbs["tags"]  # the tag index (tagged.py)
        # One index per state; its entry count is the state's count.
        self.indexes = {State.PENDING: self.ready, State.SCHEDULED: self.sched, State.RUNNING: self.lease,
                        State.DONE: self.done_at, State.FAILED: self.failed}  # fmt: skip
        if env.read(lambda txn: entry_count(txn, self.jobs) == 0):
            env.write(self._start_queue_counts)

    def _start_queue_counts(self, txn: Any) -> None:
        """A new shard's queue counts are exact from the start: no job, no count (a shard with jobs and
        no such mark was written before the counts existed: ``rebuild_queue_counts``)."""
        if entry_count(txn, self.jobs) == 0:
            txn.put(QUEUE_COUNTS_KEY, QUEUE_COUNTS_EXACT, db=self.jobs)

    # ------------------------------------------------------------------ helpers inside a transaction

    def _held(self, txn: Any, job_id: int, token: bytes, *, whole: bool = True) -> list[Any]:
        """The record of a job this token holds, or ``QueueCorrupted`` (and nothing changes). ``whole``
        False: a completion that uses only the state, token and lease checks only those when the token is
        this claim's (``layout.unpack_held``)."""
        raw = txn.get(id_key(job_id), db=self.jobs)
        if raw is None:
            raise QueueCorrupted(f"job {job_id} no longer exists (vacuumed, purged or cancelled)")
        record = layout.unpack_record(raw, job_id) if whole else layout.unpack_held(raw, job_id, token)
        if record[F_STATE] != RUNNING:
            raise QueueCorrupted(
                f"job {job_id} is {STATES[record[F_STATE]].value}, not running: it was already completed "
                f"or released, or its lease expired and recovery moved it"
            )
        if record[F_TOKEN] != token:
            raise QueueCorrupted(
                f"job {job_id} is held by another claim: this record's lease expired and the job was "
                f"claimed again"
            )
        return record

    # ------------------------------------------------------------------ enqueue

    def enqueue(
        self, now: float, batches: Sequence[NewJobs], *, durable: bool = False
    ) -> tuple[list[int], bool]:
        """Write new jobs, in order. -> (their ids, whether a consumer may need waking).

        A wake hint is only needed when a new job becomes the head of its queue here (an empty queue, or a
        higher priority than the head) or the earliest ETA: a job queued behind another one can never be
        what an idle consumer waits for, since that consumer would have taken the one in front."""
        now_us = micros(now)
        shard = self.index
        jobs_db, payloads_db, ready_db, sched_db = self.jobs, self.payloads, self.ready, self.sched
        inline_max = layout.INLINE_PAYLOAD_MAX
        pack_id = _ID.pack
        pack_time_key = _TIME_KEY.pack

        def txn_fn(txn: Any) -> tuple[list[int], bool]:
            put = txn.put
            sequence, total, floor = put_counters(txn.get(COUNTERS_KEY, db=jobs_db))
            ids: list[int] = []
            wake = False
            total_new = 0
            for batch in batches:
                spec = batch.spec
                parts = encoded(spec)
                unique = batch.unique
                if unique is not None:
                    holder = uniqueness.decide(self, txn, batch, unique, now_us)
                    if holder is not None:
                        ids.append(holder)
                        wake = wake or batch.replaced
                        continue
                payloads: Sequence[bytes | None] = batch.payloads
                count = len(payloads)
                if not count:
                    continue
                ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
                scheduled = ready_us > now_us
                if not scheduled:  # ready at its own microsecond, never before the last job put here
                    ready_us = floor = floor if floor > now_us else now_us
                if not wake:  # is the first job of this batch ahead of everything waiting? (the rest follow)
                    wake = self._would_lead(txn, parts, scheduled, ready_us)
                tally(self, txn, parts.queue_bytes, 1 if scheduled else 0, count, count)
                if count == 1:  # the same writes as below, without building lists
                    sequence = sequence + 1 if sequence >= now_us else now_us
                    payload = batch.payloads[0]
                    job_id = self._write_one(txn, now_us, sequence, payload, parts, scheduled, ready_us)
                    ids.append(job_id)
                    total_new += 1
                    if unique is not None:
                        uniqueness.take(self, txn, unique, job_id, now_us)
                    continue
                first = sequence + 1 if sequence >= now_us else now_us
                sequence = first + count - 1
                job_ids = range(first << 8 | shard, (sequence << 8 | shard) + 1, 256)  # seq << 8 | shard
                keys = list(map(pack_id, job_ids))
                if max(map(len, batch.payloads)) > inline_max:  # big payloads live apart, written once
                    payloads = [None if len(p) > inline_max else p for p in batch.payloads]
                    for key, packed in zip(keys, batch.payloads, strict=True):
                        if len(packed) > inline_max:
                            put(key, packed, db=payloads_db, append=True)
                records = parts.records(scheduled, now_us, itertools.repeat(ready_us, count), payloads)
                if scheduled:
                    entries = [(pack_time_key(ready_us, job_id), b"") for job_id in job_ids]
                    index_db = sched_db
                else:  # one ready time for the batch: the ids keep its order
                    entries = parts.ready_keys(ready_us, job_ids)
                    index_db = ready_db
                # One C call per database for the whole batch: half the cost of a put() each.
                txn.cursor(db=jobs_db).putmulti(zip(keys, records, strict=True))
                txn.cursor(db=index_db).putmulti(entries)
                if parts.group is not None and not scheduled:
                    turns.join(self, txn, parts.group)
                if parts.tag_prefixes:
                    tagkeys.index_new(txn, self.tags, parts.tag_prefixes, job_ids)
                ids.extend(job_ids)
                total_new += count
                if unique is not None:
                    uniqueness.take(self, txn, unique, ids[-1], now_us)
            self._count_puts(txn, sequence, total + total_new, floor, total_new)
            return ids, wake

        return self.env.write(txn_fn, durable=durable)

    def put_one(self, now: float, payload: bytes, spec: JobSpec) -> tuple[int, bool]:
        """``enqueue`` of one job with no unique key, not durable: a single put's path, without batches.
        -> (its id, whether a consumer may need waking)."""
        now_us = micros(now)
        parts = encoded(spec)

        def txn_fn(txn: Any) -> tuple[int, bool]:
            raw = txn.get(COUNTERS_KEY, db=self.jobs)
            try:  # the counters as this version writes them (no call on the hot path)
                sequence, total, floor = _PUT_COUNTERS_UNPACK(raw)
            except (TypeError, struct.error):  # a new shard (None), or counters written before the floor
                sequence, total, floor = put_counters(raw)
            ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
            scheduled = ready_us > now_us
            if not scheduled:  # ready at its own microsecond, never before the last job put here
                ready_us = floor = floor if floor > now_us else now_us
            wake = self._would_lead(txn, parts, scheduled, ready_us)
            sequence = sequence + 1 if sequence >= now_us else now_us
            job_id = self._write_one(txn, now_us, sequence, payload, parts, scheduled, ready_us)
            tally(self, txn, parts.queue_bytes, 1 if scheduled else 0, 1, 1)
            self._count_puts(txn, sequence, total + 1, floor, 1)
            return job_id, wake

        return self.env.write(txn_fn)

    def _write_one(
        self,
        txn: Any,
        now_us: int,
        sequence: int,
        payload: bytes,
        parts: NewRecords,
        scheduled: bool,
        ready_us: int,
    ) -> int:
        """Write a new job's record (and large payload) and its index entry: scheduled until ``ready_us``,
        or pending with that ready time. -> its id."""
        job_id = sequence << 8 | self.index
        key = _ID.pack(job_id)
        inline: bytes | None = payload
        if len(payload) > layout.INLINE_PAYLOAD_MAX:
            txn.put(key, payload, db=self.payloads, append=True)
            inline = None
        txn.put(key, parts.record(scheduled, now_us, ready_us, inline), db=self.jobs)
        if scheduled:
            txn.put(_TIME_KEY.pack(ready_us, job_id), b"", db=self.sched)
        else:
            txn.put(parts.ready_key(ready_us, job_id), parts.name_bytes, db=self.ready)
            if parts.group is not None:
                turns.join(self, txn, parts.group)
        if parts.tag_prefixes:
            tagkeys.index_new(txn, self.tags, parts.tag_prefixes, (job_id,))
        return job_id

    def _count_puts(self, txn: Any, sequence: int, total: int, floor: int, new: int) -> None:
        """The shard's counters after ``new`` puts; refuses them (``StoreFull``) when they ate into the
        reserve kept for finishing the jobs already there."""
        txn.put(COUNTERS_KEY, PUT_COUNTERS.pack(sequence, total, floor), db=self.jobs)
        limit = self.env.put_limit_pages
        if limit is not None and new and self.env.pages_in_use(txn) > limit:
            max_size = self.env.options.map_size_max
            raise StoreFull(
                f"the shard at {self.env.path!r} is full: its jobs take all of map_size_max={max_size:,} "
                f"bytes but the {put_reserve(max_size or 0):,} kept for finishing the jobs already "
                f"there. Nothing was written; finish, purge or vacuum jobs, or raise map_size_max."
            )

    def _would_lead(self, txn: Any, parts: NewRecords, scheduled: bool, ready_us: int) -> bool:
        """Would a new job of ``parts`` be its queue's next (or the earliest scheduled)? New jobs sort after
        every waiting job of their priority, so it leads only an empty queue or one of lower priority."""
        if scheduled:
            cursor = txn.cursor(db=self.sched)
            return not cursor.first() or _TIME_KEY.pack(ready_us, 0) < cursor.key()
        cursor = txn.cursor(db=self.ready)
        head = parts.ready_head + QUEUE_SEP
        if cursor.set_range(head) and cursor.key().startswith(head):
            prefix = parts.ready_prefix
            return bool(prefix < cursor.key()[: len(prefix)])
        return True

    # ------------------------------------------------------------------ claiming (claims.py)

    # The claim path is claims.py's; its functions are this class's methods as they are (the hot path:
    # no call in between).
    peek = claims.peek
    claim_job = claims.claim_job
    claim_many = claims.claim_many

    def peek_allowed(
        self,
        now: float,
        queues: Sequence[bytes] | None,
        skip_queues: frozenset[bytes],
        skip_names: frozenset[str],
        scan_limit: int = 100_000,
    ) -> tuple[Candidate | None, float | None]:
        return reads.peek_allowed(self, now, queues, skip_queues, skip_names, scan_limit)

    def promote_due(self, now: float, batch: int = 1000) -> int:
        return upkeep.promote_due(self, now, batch)

    def quarantine_unreadable(self, now: float, met: Sequence[Unreadable]) -> bool:
        return quarantine_unreadable(self, now, met)

    # ------------------------------------------------------------------ completion (through a record)

    def touch(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        """Extend the lease. -> (the new expiry, whether the job is marked "cancel requested")."""
        lease_us = micros(now + lease_time)

        def txn_fn(txn: Any) -> tuple[float, bool]:
            record = self._held(txn, job_id, token, whole=False)
            old = record[F_LEASE_UNTIL]
            if old is not None:
                txn.delete(time_key(old, job_id), db=self.lease)
            record[F_LEASE_UNTIL] = lease_us
            txn.put(time_key(lease_us, job_id), b"", db=self.lease)  # still running: no count changes
            store_record(self, txn, job_id, record)
            return lease_us / 1_000_000, txn.get(id_key(job_id), db=self.cancels) is not None

        return self.env.write(txn_fn)

    def save_metadata(self, job_id: int, token: bytes, metadata: bytes | None) -> None:
        """Replace the metadata of the running job ``token`` holds; nothing else changes (no index)."""

        def txn_fn(txn: Any) -> None:
            record = self._held(txn, job_id, token, whole=False)
            record[F_METADATA] = keeping_cancel_note(record[F_METADATA], metadata)
            store_record(self, txn, job_id, record)

        self.env.write(txn_fn)

    def complete(self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool) -> None:
        now_us = micros(now)

        self.env.write(lambda txn: self._complete(txn, now_us, job_id, token, result), durable=durable)

    def complete_many(
        self, now: float, done: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]:
        """``complete()`` each (job id, token, packed result) in ONE transaction. A job this token no longer
        holds is skipped, the others still complete. -> {job id: why} for the skipped ones."""
        now_us = micros(now)

        def txn_fn(txn: Any) -> dict[int, str]:
            skipped: dict[int, str] = {}
            ended: dict[str, int] = {}  # slots given back per limit key, written once at the end
            self.wf_batch = {}  # a chord's members settled here write its head and callback once (workflows)
            try:
                for job_id, token, result in done:
                    try:
                        self._complete(txn, now_us, job_id, token, result, ended)
                    except QueueCorrupted as exc:
                        skipped[job_id] = str(exc)
                workflows.flush(self, txn)
            finally:
                self.wf_batch = None
            if skipped and (ended or turns.any_running(self, txn)):
                # A job met there may have been quarantined, its slots recounted from the running records
                # (quarantine.py) before this batch's ends were written: count again, after them all.
                recount_running(self, txn)
            elif ended:
                turns.change_by(self, txn, ended, -1)
            return skipped

        return self.env.write(txn_fn, durable=durable)

    def _complete(
        self,
        txn: Any,
        now_us: int,
        job_id: int,
        token: bytes,
        result: bytes | None,
        ended: dict[str, int] | None = None,
    ) -> None:
        """Running -> done. A limited job's slots are given back here, or (``ended``) counted there for the
        caller to give back once for a batch (``turns.change_by``)."""
        record = self._held(txn, job_id, token, whole=False)
        # running -> done, written out (the hot path: what unindex_job() + index_job() do, inlined)
        txn.delete(time_key(record[F_LEASE_UNTIL], job_id), db=self.lease)
        txn.put(time_key(now_us, job_id), b"", db=self.done_at)
        record[F_STATE] = DONE
        record[F_FINISHED_AT] = now_us
        record[F_TOKEN] = None
        record[F_LEASE_UNTIL] = None
        record[F_RESULT] = result
        txn.put(id_key(job_id), layout.pack_record(record), db=self.jobs)
        if record[F_METADATA] is not None and WORKFLOW_MARK in record[F_METADATA]:
            self.node_ended(self, txn, record)  # a node's job: settle the node, release its children
        limits = record[F_LIMITS]
        if limits is not None:  # its slot comes back (turns.py)
            if ended is None:
                turns.change(self, txn, limits[1], -1)
            else:
                for key, _n in limits[1]:
                    ended[key] = ended.get(key, 0) + 1

    def fail(
        self,
        now: float,
        job_id: int,
        token: bytes | None,
        error: tuple[str | None, str | None, str | None],
        *,
        retry_at: float | None,
        durable: bool,
    ) -> State:
        """A failed attempt: retries + 1, then pending again at ``retry_at`` (scheduled until then if it is
        after ``now``), or failed (a dead letter) when ``retry_at`` is None: the caller decided
        (``retry.decide``, on the retries this token's claim read; the token proves they are current)."""

        def txn_fn(txn: Any) -> State:
            record = self._held(txn, job_id, token)  # type: ignore[arg-type]
            return fail_record(self, txn, job_id, record, now, error, retry_at)

        return self.env.write(txn_fn, durable=durable)

    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None:
        """Running -> pending without counting an attempt; it keeps its place at the front of its queue.
        With ``retry_at`` after ``now``: scheduled until then instead (then at the back, as a retry)."""

        def txn_fn(txn: Any) -> None:
            record = self._held(txn, job_id, token)
            unindex_job(self, txn, job_id, record)
            mark_pending_uncharged(record)
            record[F_ATTEMPTS] = max((record[F_ATTEMPTS] or 1) - 1, 0)
            if retry_at is not None and retry_at > now:
                record[F_STATE] = SCHEDULED
                record[F_READY_AT] = micros(retry_at)
            index_job(self, txn, job_id, record)
            store_record(self, txn, job_id, record)

        self.env.write(txn_fn)

    # ------------------------------------------------------------------ maintenance

    def recover_expired(self, now: float, batch: int = 1000) -> list[Recovered]:
        return upkeep.recover_expired(self, now, batch)

    def scrub(
        self, now: float, start: bytes | None, batch: int = 2000
    ) -> tuple[list[Recovered], bytes | None]:
        return upkeep.scrub(self, now, start, batch)

    def vacuum(self, cutoff: float, batch: int = 1000, *, now: float) -> int:
        return upkeep.vacuum(self, cutoff, batch, now=now)

    def forget_unique(self, now: float, ttl: float, batch: int = 1000) -> int:
        return upkeep.forget_unique(self, now, ttl, batch)

    def purge(
        self, state: State, cutoff: float | None, batch: int = 1000, start: bytes | None = None, *, now: float
    ) -> tuple[int, bytes | None]:
        return upkeep.purge(self, state, cutoff, batch, start, now=now)

    # ------------------------------------------------------------------ management

    def requeue(self, now: float, job_id: int) -> bool:
        return manage.requeue(self, now, job_id)

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        return manage.cancel(self, now, job_id, by)

    def cancel_requested(self, job_id: int) -> bool:
        """Is the job marked in this shard's ``cancels`` database? One read."""
        key = id_key(job_id)
        return bool(self.env.read(lambda txn: txn.get(key, db=self.cancels) is not None))

    def delete(self, job_id: int, states: tuple[int, ...] = manage.NOT_RUNNING, *, now: float) -> bool:
        return manage.delete(self, job_id, states, now=now)

    # ------------------------------------------------------------------ reads

    def job(self, job_id: int, *, now: float) -> Job | None:
        return reads.job(self, job_id, now=now)

    def sort_key(self, state: State, job_id: int) -> bytes | None:
        return reads.sort_key(self, state, job_id)

    def list_jobs(
        self,
        state: State,
        *,
        after_key: bytes | None,
        limit: int,
        newest_first: bool,
        queue: str | None,
        name: str | None,
        now: float,
    ) -> list[Listed]:
        return reads.list_jobs(
            self,
            state,
            after_key=after_key,
            limit=limit,
            newest_first=newest_first,
            queue=queue,
            name=name,
            now=now,
        )

    def counts(self) -> dict[str, int]:
        return reads.counts(self)

    def unique_counts(self) -> tuple[int, int]:
        counted: tuple[int, int] = self.env.read(lambda txn: uniqueness.counts(self, txn))
        return counted

    def cancel_counts(self) -> tuple[int, int]:
        """(cancelled dead letters now, jobs ever cancelled) in this shard: one read."""
        counted: tuple[int, int] = self.env.read(lambda txn: cancel_counts(self, txn))
        return counted

    def queue_counts(self, *, now: float) -> dict[str, dict[str, int]]:
        return reads.queue_counts(self, now=now)

    def oldest_ready(self) -> dict[str, int]:
        return reads.oldest_ready(self)

    def rebuild_queue_counts(self, now: float) -> None:
        reads.rebuild_queue_counts(self, now)

    def verify(self) -> list[str]:
        return reads.verify(self)
