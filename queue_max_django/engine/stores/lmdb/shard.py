"""One shard's atomic operations. Each public method is exactly one LMDB transaction.

This is the storage interface DESIGN.md asks for: enqueue, claim, touch, complete, fail, release, recover
expired, promote due, get, list, requeue/cancel, counts, purge, vacuum, verify. Every method takes ``now``
(unix seconds from the queue's clock) and never reads the wall clock itself. A job's state and every index
that mentions it change in the same write transaction (invariant 1).
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ... import codec
from ...errors import QueueCorrupted, QueueError, StoreFull
from ...job import SHARD_BITS, STATE_CODE, STATES, Job, State
from ...jobspec import JobSpec
from ...retry import decide
from ..types import Candidate, Claimed, CorruptedJobQuarantined, Head, NewJobs, Recovered
from . import layout
from .env import Env, put_reserve
from .keys import (
    QUEUE_SEP,
    id_from_key,
    id_key,
    micros,
    next_queue_prefix,
    queue_prefix,
    ready_key,
    ready_key_parts,
    time_key,
    time_key_parts,
)
from .layout import (
    CLAIM_ALONE_NEXT,
    CLAIM_BATCH,
    F_ATTEMPTS,
    F_CLAIM,
    F_ENQUEUED_AT,
    F_ERROR,
    F_ERROR_TYPE,
    F_ERRORS,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_MAX_RETRIES,
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
    F_TOKEN,
    F_TRACEBACK,
    F_WORKERS,
    HISTORY_MAX,
)

PENDING = STATE_CODE[State.PENDING]
SCHEDULED = STATE_CODE[State.SCHEDULED]
RUNNING = STATE_CODE[State.RUNNING]
DONE = STATE_CODE[State.DONE]
FAILED = STATE_CODE[State.FAILED]

# (last sequence, total successful puts), in the jobs database under a key past every job id: new records
# are appended at the end of that B-tree, so a put dirties one page for the record and the counters both.
_COUNTERS_KEY = b"\xff" * 8
_COUNTERS = struct.Struct(">QQ")
# Per queue, right after them: _QUEUE_COUNTS_KEY + queue name -> (pending, scheduled) jobs of that queue
# here, changed in the same transactions as the states (no key while both are 0), so that queue_counts()
# is O(queues) for the states that grow without bound. (Running jobs are few by nature, at most what the
# workers hold: queue_counts() reads their records, which spares every ack a counter write.) The key alone
# (an empty queue name, which no queue has) says they are exact: without it (a store older than them, or a
# quarantined record whose queue could not be read) the next queue_counts() rebuilds them from the
# indexes, in one write transaction. They sit on the last page of the jobs B-tree, with the newest records
# and the shard's counters, which a put writes anyway.
_QUEUE_COUNTS_KEY = _COUNTERS_KEY + b"q"
_QUEUE_COUNTS = struct.Struct(">qq")
_QUEUE_COUNTS_EXACT = b"exact"
_COUNTED = {PENDING: 0, SCHEDULED: 1}  # state code -> its place in a queue's counts
_ID = struct.Struct(">Q")
_TIME_KEY = struct.Struct(">QQ")
_READY_TAIL = struct.Struct(">QQ")
_UNIQUE = struct.Struct(
    ">QQ"
)  # (job id, when the key was used, µs)  # after the queue name, NUL and the 2-byte flipped priority
LEASE_EXPIRED = "LeaseExpired"
CORRUPTED = "Corrupted"
UNIQUE_KEY_MIN_TTL = 86_400.0  # seconds a unique key is kept at least, whatever result_ttl (periodic ticks)

logger = logging.getLogger("queue_max_django.engine")


@dataclass(frozen=True, slots=True)
class Listed:
    """A job found by ``list_jobs``, not decoded yet: shards are merged by ``sort_key`` first."""

    sort_key: bytes
    job_id: int
    record: list[Any]
    payload: bytes | None

    def job(self) -> Job:
        return record_to_job(self.job_id, self.record, self.payload)


@dataclass(frozen=True, slots=True)
class Outranked:
    """A claim declined: this shard's next job has a lower priority than another shard may hold."""

    priority: int


@dataclass(frozen=True, slots=True)
class AloneNext:
    """A claim stopped before this job: its lease once expired, so it is claimed alone, not in a batch."""


ALONE_NEXT = AloneNext()


@dataclass(frozen=True, slots=True)
class StrayEntry:
    """Internal: a claim met an index entry without a pending job behind it, dropped it, and must retry."""

    job_id: int


# (job id, the index it was met in, its key there, or None if unknown) of a record a read could not decode
Unreadable = tuple[int, Any, bytes | None]


def record_to_job(job_id: int, record: list[Any], payload: bytes | None) -> Job:
    def seconds(value: int | None) -> float | None:
        return None if value is None else value / 1_000_000

    state = STATES[record[F_STATE]]
    damage: list[str] = []

    def decoded(raw: bytes | None, what: str) -> Any:
        """A snapshot never fails on bytes that do not decode: it keeps them and says so (``damage``)."""
        if raw is None:
            return None
        try:
            return codec.unpack_stored(raw, job_id, what)
        except QueueCorrupted as exc:
            damage.append(str(exc))
            return bytes(raw)

    payload_value, result_value = decoded(payload, "payload"), decoded(record[F_RESULT], "result")
    return Job(
        job_id=job_id,
        state=state,
        queue=record[F_QUEUE],
        name=record[F_NAME],
        priority=record[F_PRIORITY],
        payload=payload_value,
        result=result_value,
        retries=record[F_RETRIES],
        max_retries=record[F_MAX_RETRIES],
        error=record[F_ERROR],
        error_type=record[F_ERROR_TYPE],
        traceback=record[F_TRACEBACK],
        enqueued_at=record[F_ENQUEUED_AT] / 1_000_000,
        started_at=seconds(record[F_STARTED_AT]),
        finished_at=seconds(record[F_FINISHED_AT]),
        eta=seconds(record[F_READY_AT]) if state is State.SCHEDULED else None,
        attempts=record[F_ATTEMPTS] or 0,
        timeout=record[F_TIMEOUT],
        partition_key=record[F_PARTITION_KEY],
        lease_until=seconds(record[F_LEASE_UNTIL]) if state is State.RUNNING else None,
        worker_ids=tuple(record[F_WORKERS] or ()),
        errors=tuple((error_type, error) for error_type, error in record[F_ERRORS] or ()),
        damage="; ".join(damage) or None,
    )


def _mark_running(record: list[Any], now_us: int, lease_us: int, token: bytes, worker: str | None) -> None:
    """A claimed job's record: running from now, held by ``token`` until ``lease_us``, one more attempt,
    claimed alone (``claim_many`` marks the jobs of a batch ``CLAIM_BATCH`` once there are two)."""
    record[F_STATE] = RUNNING
    record[F_STARTED_AT] = now_us
    record[F_LEASE_UNTIL] = lease_us
    record[F_TOKEN] = token
    record[F_ATTEMPTS] = (record[F_ATTEMPTS] or 0) + 1
    record[F_CLAIM] = None
    if worker is not None:
        _remember_worker(record, worker)


def _claimed(job_id: int, record: list[Any], payload: Any, alone: bool) -> Claimed:
    """The neutral ``Claimed`` of a record a claim just marked running."""
    return Claimed(
        job_id, record[F_TOKEN], payload, record[F_RETRIES], record[F_MAX_RETRIES], record[F_ATTEMPTS],
        record[F_ENQUEUED_AT] / 1_000_000, record[F_PRIORITY], record[F_QUEUE], record[F_NAME],
        record[F_TIMEOUT], record[F_LEASE_UNTIL] / 1_000_000, tuple(record[F_WORKERS] or ()), alone,
    )  # fmt: skip


def _mark_pending_uncharged(record: list[Any]) -> None:
    """A running job's record back to pending, no attempt charged: at its old place in its queue (its
    ready time is unchanged), no holder."""
    record[F_STATE] = PENDING
    record[F_TOKEN] = None
    record[F_LEASE_UNTIL] = None
    record[F_STARTED_AT] = None


def _unreadable_record(job_id: int) -> list[Any]:
    """The record that stands in for one that does not decode: queue "default", no name, priority 0, no
    retries, enqueued (and ready) when its id says: the id's sequence is the put's time in µs (keys.py)."""
    record: list[Any] = [None] * layout.RECORD_FIELDS
    record[F_STATE], record[F_QUEUE], record[F_PRIORITY] = FAILED, "default", 0
    record[F_RETRIES], record[F_MAX_RETRIES], record[F_ATTEMPTS] = 0, 0, 0
    record[F_ENQUEUED_AT] = record[F_READY_AT] = job_id >> SHARD_BITS
    return record


def _remember_worker(record: list[Any], worker: str) -> None:
    workers = record[F_WORKERS] or []
    workers.append(worker)
    record[F_WORKERS] = workers[-HISTORY_MAX:]


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
        # One index per state; its entry count is the state's count.
        self.indexes = {State.PENDING: self.ready, State.SCHEDULED: self.sched, State.RUNNING: self.lease,
                        State.DONE: self.done_at, State.FAILED: self.failed}  # fmt: skip
        if env.read(lambda txn: _entries(txn, self.jobs) == 0):
            env.write(self._start_queue_counts)

    def _start_queue_counts(self, txn: Any) -> None:
        """A new shard's queue counts are exact from the start: no job, no count (a shard with jobs and
        no such mark was written before the counts existed: ``rebuild_queue_counts``)."""
        if _entries(txn, self.jobs) == 0:
            txn.put(_QUEUE_COUNTS_KEY, _QUEUE_COUNTS_EXACT, db=self.jobs)

    # ------------------------------------------------------------------ helpers inside a transaction

    def _load(self, txn: Any, job_id: int) -> list[Any] | None:
        raw = txn.get(id_key(job_id), db=self.jobs)
        return None if raw is None else layout.unpack_record(raw, job_id)

    def _payload(self, txn: Any, job_id: int, record: list[Any]) -> bytes | None:
        inline: bytes | None = record[F_PAYLOAD]
        return inline if inline is not None else txn.get(id_key(job_id), db=self.payloads)

    def _store(self, txn: Any, job_id: int, record: list[Any]) -> None:
        txn.put(id_key(job_id), layout.pack_record(record), db=self.jobs)

    def _index_key(self, job_id: int, record: list[Any]) -> tuple[Any, bytes | None]:
        """(database, key) of the job's entry in the index of its current state."""
        state = record[F_STATE]
        if state == PENDING:
            queue = record[F_QUEUE].encode()
            return self.ready, ready_key(queue, record[F_PRIORITY], record[F_READY_AT], job_id)
        if state == SCHEDULED:
            return self.sched, time_key(record[F_READY_AT], job_id)
        if state == RUNNING:
            lease = record[F_LEASE_UNTIL]
            return self.lease, None if lease is None else time_key(lease, job_id)
        if state == DONE:
            return self.done_at, time_key(record[F_FINISHED_AT], job_id)
        return self.failed, id_key(job_id)

    def _unindex(self, txn: Any, job_id: int, record: list[Any]) -> None:
        """Remove the job from the index of its current state (and from its queue's count of it)."""
        db, key = self._index_key(job_id, record)
        if key is not None:
            txn.delete(key, db=db)
        place = _COUNTED.get(record[F_STATE])
        if place is not None:
            self._tally(txn, record[F_QUEUE].encode(), place, -1)

    def _index(self, txn: Any, job_id: int, record: list[Any]) -> None:
        """Add the job to the index of its (new) state (and to its queue's count of it)."""
        db, key = self._index_key(job_id, record)
        assert key is not None  # a running job always gets its lease before being indexed
        # A ready entry carries the job's name, so flow control can walk past held-back jobs by key alone.
        txn.put(key, _name_bytes(record[F_NAME]) if db is self.ready else b"", db=db)
        place = _COUNTED.get(record[F_STATE])
        if place is not None:
            self._tally(txn, record[F_QUEUE].encode(), place, 1)

    def _tally(self, txn: Any, queue: bytes, place: int, change: int) -> None:
        """Add ``change`` to the count of ``queue``'s jobs in state ``place`` (see ``_COUNTED``)."""
        key = _QUEUE_COUNTS_KEY + queue
        jobs = self.jobs
        raw = txn.get(key, db=jobs)
        pending, scheduled = _QUEUE_COUNTS.unpack(raw) if raw is not None else (0, 0)
        if place:
            scheduled += change
        else:
            pending += change
        if pending or scheduled:
            txn.put(key, _QUEUE_COUNTS.pack(pending, scheduled), db=jobs)
        elif raw is not None:
            txn.delete(key, db=jobs)

    def _counts_inexact(self, txn: Any) -> None:
        """A job left a counted state and its queue cannot be told (its record does not decode): the
        queue counts are rebuilt by the next ``queue_counts()``."""
        txn.delete(_QUEUE_COUNTS_KEY, db=self.jobs)

    def _delete(self, txn: Any, job_id: int, record: list[Any]) -> None:
        self._unindex(txn, job_id, record)
        key = id_key(job_id)
        txn.delete(key, db=self.jobs)
        if record[F_PAYLOAD] is None:
            txn.delete(key, db=self.payloads)

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
            raw = txn.get(_COUNTERS_KEY, db=jobs_db)
            sequence, total = _COUNTERS.unpack(raw) if raw is not None else (0, 0)
            ids: list[int] = []
            wake = False
            total_new = 0
            for batch in batches:
                spec = batch.spec
                unique_key = batch.unique_key
                if unique_key is not None:
                    seen = txn.get(unique_key, db=self.unique)
                    batch.unique_hit = seen is not None
                    if seen is not None:
                        ids.append(_UNIQUE.unpack(seen)[0])
                        continue
                payloads: Sequence[bytes | None] = batch.payloads
                count = len(payloads)
                if not count:
                    continue
                ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
                scheduled = ready_us > now_us
                if not wake:  # is the first job of this batch ahead of everything waiting? (the rest follow)
                    wake = self._would_lead(txn, spec, scheduled, ready_us)
                self._tally(txn, spec.queue_bytes, 1 if scheduled else 0, count)
                if count == 1:  # the same writes as below, without building lists
                    sequence = sequence + 1 if sequence >= now_us else now_us
                    job_id = self._write_one(txn, now_us, sequence, batch.payloads[0], spec, ready_us)
                    ids.append(job_id)
                    total_new += 1
                    if unique_key is not None:
                        put(unique_key, _UNIQUE.pack(job_id, now_us), db=self.unique)
                    continue
                first = sequence + 1 if sequence >= now_us else now_us
                sequence = first + count - 1
                sequences = range(first, sequence + 1)
                job_ids = range(first << 8 | shard, (sequence << 8 | shard) + 1, 256)  # seq << 8 | shard
                keys = list(map(pack_id, job_ids))
                if max(map(len, batch.payloads)) > inline_max:  # big payloads live apart, written once
                    payloads = [None if len(p) > inline_max else p for p in batch.payloads]
                    for key, packed in zip(keys, batch.payloads, strict=True):
                        if len(packed) > inline_max:
                            put(key, packed, db=payloads_db, append=True)
                if scheduled:
                    records = spec.records(True, now_us, itertools.repeat(ready_us, count), payloads)
                    entries = [(pack_time_key(ready_us, job_id), b"") for job_id in job_ids]
                    index_db = sched_db
                else:
                    # Ready "time" = the sequence: it never steps back, so FIFO outlives clock steps.
                    records = spec.records(False, now_us, sequences, payloads)
                    entries = spec.ready_keys(sequences, job_ids)
                    index_db = ready_db
                # One C call per database for the whole batch: half the cost of a put() each.
                txn.cursor(db=jobs_db).putmulti(zip(keys, records, strict=True))
                txn.cursor(db=index_db).putmulti(entries)
                ids.extend(job_ids)
                total_new += count
                if unique_key is not None:
                    put(unique_key, _UNIQUE.pack(ids[-1], now_us), db=self.unique)
            self._count_puts(txn, sequence, total + total_new, total_new)
            return ids, wake

        return self.env.write(txn_fn, durable=durable)

    def put_one(self, now: float, payload: bytes, spec: JobSpec) -> tuple[int, bool]:
        """``enqueue`` of one job with no unique key, not durable: a single put's path, without batches.
        -> (its id, whether a consumer may need waking)."""
        now_us = micros(now)

        def txn_fn(txn: Any) -> tuple[int, bool]:
            raw = txn.get(_COUNTERS_KEY, db=self.jobs)
            sequence, total = _COUNTERS.unpack(raw) if raw is not None else (0, 0)
            ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
            scheduled = ready_us > now_us
            wake = self._would_lead(txn, spec, scheduled, ready_us)
            sequence = sequence + 1 if sequence >= now_us else now_us
            job_id = self._write_one(txn, now_us, sequence, payload, spec, ready_us)
            self._tally(txn, spec.queue_bytes, 1 if scheduled else 0, 1)
            self._count_puts(txn, sequence, total + 1, 1)
            return job_id, wake

        return self.env.write(txn_fn)

    def _write_one(
        self, txn: Any, now_us: int, sequence: int, payload: bytes, spec: JobSpec, ready_us: int
    ) -> int:
        """Write a new job's record (and large payload) and its index entry. -> its id."""
        job_id = sequence << 8 | self.index
        key = _ID.pack(job_id)
        inline: bytes | None = payload
        if len(payload) > layout.INLINE_PAYLOAD_MAX:
            txn.put(key, payload, db=self.payloads, append=True)
            inline = None
        if ready_us > now_us:
            txn.put(key, spec.record(True, now_us, ready_us, inline), db=self.jobs)
            txn.put(_TIME_KEY.pack(ready_us, job_id), b"", db=self.sched)
        else:  # ready "time" = the sequence: it never steps back, so FIFO outlives clock steps
            txn.put(key, spec.record(False, now_us, sequence, inline), db=self.jobs)
            txn.put(spec.ready_key(sequence, job_id), spec.name_bytes, db=self.ready)
        return job_id

    def _count_puts(self, txn: Any, sequence: int, total: int, new: int) -> None:
        """The shard's counters after ``new`` puts; refuses them (``StoreFull``) when they ate into the
        reserve kept for finishing the jobs already there."""
        txn.put(_COUNTERS_KEY, _COUNTERS.pack(sequence, total), db=self.jobs)
        limit = self.env.put_limit_pages
        if limit is not None and new and self.env.pages_in_use(txn) > limit:
            max_size = self.env.options.map_size_max
            raise StoreFull(
                f"the shard at {self.env.path!r} is full: its jobs take all of map_size_max={max_size:,} "
                f"bytes but the {put_reserve(max_size or 0):,} kept for finishing the jobs already "
                f"there. Nothing was written; finish, purge or vacuum jobs, or raise map_size_max."
            )

    def _would_lead(self, txn: Any, spec: JobSpec, scheduled: bool, ready_us: int) -> bool:
        """Would a new job of ``spec`` be its queue's next (or the earliest scheduled)? New jobs sort after
        every waiting job of their priority, so it leads only an empty queue or one of lower priority."""
        if scheduled:
            cursor = txn.cursor(db=self.sched)
            return not cursor.first() or _TIME_KEY.pack(ready_us, 0) < cursor.key()
        cursor = txn.cursor(db=self.ready)
        head = spec.queue_bytes + QUEUE_SEP
        if cursor.set_range(head) and cursor.key().startswith(head):
            prefix = spec.ready_prefix
            return bool(prefix < cursor.key()[: len(prefix)])
        return True

    # ------------------------------------------------------------------ claiming

    @classmethod
    def _best_ready(cls, cursor: Any, queues: Sequence[bytes] | None) -> bytes | None:
        """The ready key that runs next among ``queues`` (all queues if None): highest priority, then the
        earliest ready time, then the lowest id. One seek per queue name, never a scan of jobs."""
        heads = cls._queue_heads(cursor, queues)
        return min(heads)[1] if heads else None

    @staticmethod
    def _queue_heads(cursor: Any, queues: Sequence[bytes] | None) -> list[list[bytes]]:
        """[order part, full key, queue prefix] of the next ready job of each queue (of ``queues``, or of
        every queue) that has one: ``min()`` of them is what ``_best_ready`` returns."""
        heads: list[list[bytes]] = []
        if queues is None:
            found = cursor.first()
            while found:
                key = cursor.key()
                cut = key.index(b"\x00") + 1
                heads.append([key[cut:], key, key[:cut]])
                found = cursor.set_range(next_queue_prefix(key[: cut - 1]))
        else:
            for queue in queues:
                prefix = queue_prefix(queue)
                if cursor.set_range(prefix):
                    key = cursor.key()
                    if key.startswith(prefix):
                        heads.append([key[len(prefix) :], key, prefix])
        return heads

    def peek(self, now: float, queues: Sequence[bytes] | None) -> Head:
        """Read-only look at this shard: the priority of the job a claim would take, and the earliest ETA."""

        def txn_fn(txn: Any) -> Head:
            key = self._best_ready(txn.cursor(db=self.ready), queues)
            priority = None if key is None else ready_key_parts(key)[1]
            return Head(priority, self._next_eta(txn))

        return self.env.read(txn_fn)

    def _next_eta(self, txn: Any) -> float | None:
        """The earliest ETA of this shard's scheduled jobs (unix seconds), or None."""
        cursor = txn.cursor(db=self.sched)
        return time_key_parts(cursor.key())[0] / 1_000_000 if cursor.first() else None

    def peek_allowed(
        self,
        now: float,
        queues: Sequence[bytes] | None,
        skip_queues: frozenset[bytes],
        skip_names: frozenset[str],
        scan_limit: int = 100_000,
    ) -> tuple[Candidate | None, float | None]:
        """Like ``peek``, for a consumer under flow control: the best job that no blocked key holds back
        (its queue not in ``skip_queues``, its name not in ``skip_names``), walking past held-back jobs in
        claim order by their index entries alone (an entry carries its job's name), at most ``scan_limit``
        per queue: about 10 ms for 100,000. -> (that job or None, the earliest ETA). A job whose record does
        not decode is passed over, and quarantined once the read is done."""
        unreadable: list[Unreadable] = []

        def txn_fn(txn: Any) -> tuple[Candidate | None, float | None]:
            unreadable.clear()
            cursor = txn.cursor(db=self.ready)
            prefixes = [queue_prefix(q) for q in queues] if queues is not None else _queue_prefixes(cursor)
            best: Candidate | None = None
            best_tail = b""
            for prefix in prefixes:
                if prefix[:-1] in skip_queues:
                    continue
                found = cursor.set_range(prefix)
                scanned = 0
                while found and scanned < scan_limit:
                    key, value = cursor.item()
                    if not key.startswith(prefix):
                        break
                    tail = key[len(prefix) :]
                    if best is not None and tail >= best_tail:
                        break  # nothing further in this queue can beat the best so far
                    if value.decode() not in skip_names:
                        job_id = id_from_key(key[-8:])
                        try:
                            record = self._load(txn, job_id)
                        except QueueCorrupted:
                            unreadable.append((job_id, self.ready, bytes(key)))
                            record = None
                        if record is not None:
                            _q, priority, ready_us, _id = ready_key_parts(key)
                            best_tail = tail
                            order = (-priority, ready_us, job_id)
                            best = Candidate(order, job_id, self.index, record[F_QUEUE], record[F_NAME])
                            break
                    found = cursor.next()
                    scanned += 1
            eta = None
            sched = txn.cursor(db=self.sched)
            if sched.first():
                eta = time_key_parts(sched.key())[0] / 1_000_000
            return best, eta

        outcome = self.env.read(txn_fn)
        if unreadable:
            self.quarantine_unreadable(now, unreadable)
        return outcome

    def claim_job(
        self,
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
            record = self._load(txn, job_id)
            if record is None or not (
                record[F_STATE] == PENDING or (scheduled_too and record[F_STATE] == SCHEDULED)
            ):
                return None
            payload = self._payload(txn, job_id, record)
            if payload is None:
                return None
            try:
                value = codec.unpack_stored(payload, job_id, "payload")
            except QueueCorrupted as exc:
                self._unindex(txn, job_id, record)
                self._quarantine(txn, job_id, None, record, now_us, str(exc), bad_payload=payload)
                return None
            self._unindex(txn, job_id, record)
            _mark_running(record, now_us, lease_us, token, worker)
            self._index(txn, job_id, record)
            self._store(txn, job_id, record)
            return _claimed(job_id, record, value, False)

        return self.env.write(txn_fn)

    def promote_due(self, now: float, batch: int = 1000) -> int:
        """Scheduled jobs whose ETA has passed become pending. -> how many. A due job whose record does not
        decode goes to the dead letters instead (``_quarantine``), and promotion goes on."""
        now_us = micros(now)
        found: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> int:
            found.clear()
            cursor = txn.cursor(db=self.sched)
            moved = 0
            while moved < batch and cursor.first():
                key = cursor.key()
                eta_us, job_id = time_key_parts(key)
                if eta_us > now_us:
                    break
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted as exc:
                    found.append(self._quarantine_unreadable(txn, job_id, self.sched, key, now_us, str(exc)))
                    continue
                if record is None or record[F_STATE] != SCHEDULED:
                    cursor.delete()  # a stray index entry: drop it (verify() reports such things)
                    continue
                self._unindex(txn, job_id, record)
                record[F_STATE] = PENDING
                record[F_READY_AT] = eta_us  # FIFO by the time it became due
                self._index(txn, job_id, record)
                self._store(txn, job_id, record)
                moved += 1
            return moved

        moved = self.env.write(txn_fn)
        self._report(found)
        return moved

    def claim_many(
        self,
        now: float,
        queues: Sequence[bytes] | None,
        lease_time: float,
        token: bytes,
        min_priority: int | None = None,
        worker: str | None = None,
        *,
        limit: int,
    ) -> tuple[list[Claimed], int | None, float | None]:
        """Take up to ``limit`` next jobs of this shard (pending -> running, a fresh lease and the claim
        token), in claim order, in ONE transaction; stops before a job below ``min_priority`` (the best
        priority another shard may hold). -> (the claimed jobs, possibly none; the priority of this shard's
        next job among ``queues`` after them, None if there is none; the earliest ETA of its scheduled
        jobs, as ``peek`` gives it): with nothing claimed and a priority, the claim was outranked and the
        caller looks again. A corrupted job met on the way is quarantined;
        if it came first, ``CorruptedJobQuarantined`` is raised (the jobs before it are claimed and returned
        otherwise).

        The jobs of a claim of two or more are marked ``CLAIM_BATCH``: if their lease expires, recovery does
        not charge them the attempt but marks them ``CLAIM_ALONE_NEXT``, and a claim takes such a job alone
        (it stops before one that would join others, and after one that came first)."""
        now_us = micros(now)
        lease_us = micros(now + lease_time)

        def txn_fn(txn: Any) -> tuple[list[Claimed], int | None, float | None] | CorruptedJobQuarantined:
            claimed: list[Claimed] = []
            first_record: list[list[Any]] = []  # the first job's record, rewritten if a second one joins
            cursor = txn.cursor(db=self.ready)
            heads = self._queue_heads(cursor, queues)  # [order, key, prefix] of each queue's next job
            while len(claimed) < limit and heads:
                head = min(heads)
                key, prefix = head[1], head[2]
                step = self._claim_step(
                    txn, key, now_us, lease_us, token, min_priority, worker, claimed, first_record
                )
                alone = False
                if type(step) is Claimed:
                    claimed.append(step)
                    alone = step.alone
                    if len(claimed) == 2:  # a batch after all: the first job's record says so too
                        record = first_record[0]
                        record[F_CLAIM] = CLAIM_BATCH
                        txn.put(id_key(claimed[0].job_id), layout.pack_record(record), db=self.jobs)
                elif step is ALONE_NEXT:
                    break
                elif isinstance(step, Outranked):
                    self._tally_claims(txn, claimed)
                    return claimed, step.priority, self._next_eta(txn)
                elif isinstance(step, CorruptedJobQuarantined):
                    if not claimed:
                        return step
                    break  # keep the claims made before it; what follows is re-read by the next claim
                # The key is gone (claimed or stray): that queue's next job is the next key of its range.
                if cursor.set_range(key) and cursor.key().startswith(prefix):
                    following = cursor.key()
                    head[0], head[1] = following[len(prefix) :], following
                else:
                    heads.remove(head)
                if alone:
                    break
            self._tally_claims(txn, claimed)
            return claimed, (ready_key_parts(min(heads)[1])[1] if heads else None), self._next_eta(txn)

        outcome = self.env.write(txn_fn)
        if isinstance(outcome, CorruptedJobQuarantined):
            raise outcome
        return outcome

    def _tally_claims(self, txn: Any, claimed: list[Claimed]) -> None:
        """The queue counts after ``claimed`` left pending (one write per queue)."""
        if not claimed:
            return
        queue = claimed[0].queue
        if len(claimed) == 1 or all(item.queue == queue for item in claimed):
            self._tally(txn, queue.encode(), 0, -len(claimed))
            return
        changes: dict[str, int] = {}
        for item in claimed:
            changes[item.queue] = changes.get(item.queue, 0) + 1
        for name, count in changes.items():
            self._tally(txn, name.encode(), 0, -count)

    def _claim_step(
        self,
        txn: Any,
        key: bytes,
        now_us: int,
        lease_us: int,
        token: bytes,
        min_priority: int | None,
        worker: str | None,
        claimed: list[Claimed] | None = None,
        first_record: list[list[Any]] | None = None,
    ) -> Claimed | Outranked | StrayEntry | CorruptedJobQuarantined | AloneNext:
        """Claim the job of ready ``key`` in this transaction, unless it is outranked, stray or corrupted.
        ``claimed``: the jobs this claim took before it (a job to be claimed alone waits for a claim of
        its own: ``ALONE_NEXT``); the job is marked ``CLAIM_BATCH`` when there are some. The first job's
        record goes into ``first_record``."""
        _queue, priority, _ready_us, job_id = ready_key_parts(key)
        if min_priority is not None and priority < min_priority:
            return Outranked(priority)
        id_k = id_key(job_id)
        raw = txn.get(id_k, db=self.jobs)
        if raw is None:
            return self._drop_stray(txn, job_id, key)
        try:
            record = layout.unpack_record(raw, job_id)
        except QueueCorrupted as exc:
            return self._quarantine(txn, job_id, key, None, now_us, str(exc))
        if record[F_STATE] != PENDING:
            return self._drop_stray(txn, job_id, key)
        payload = self._payload(txn, job_id, record)
        if payload is None:
            return self._quarantine(txn, job_id, key, record, now_us, f"job {job_id}: its payload is missing")
        try:
            value = codec.unpack_stored(payload, job_id, "payload")
        except QueueCorrupted as exc:
            return self._quarantine(txn, job_id, key, record, now_us, str(exc), bad_payload=payload)
        alone = record[F_CLAIM] == CLAIM_ALONE_NEXT
        if alone and claimed:
            return ALONE_NEXT
        # pending -> running, written out (the hot path: what _unindex() + _index() do, inlined)
        txn.delete(key, db=self.ready)
        txn.put(time_key(lease_us, job_id), b"", db=self.lease)
        _mark_running(record, now_us, lease_us, token, worker)
        if claimed:
            record[F_CLAIM] = CLAIM_BATCH
        elif first_record is not None:
            first_record.append(record)
        txn.put(id_k, layout.pack_record(record), db=self.jobs)
        return _claimed(job_id, record, value, alone)

    def _drop_stray(self, txn: Any, job_id: int, ready_k: bytes) -> StrayEntry:
        """A ready entry whose job is gone or not pending: remove the stray entries, keep the record."""
        txn.delete(ready_k, db=self.ready)
        return StrayEntry(job_id)

    def _quarantine(
        self,
        txn: Any,
        job_id: int,
        ready_k: bytes | None,
        record: list[Any] | None,
        now_us: int,
        reason: str,
        *,
        bad_payload: bytes | None = None,
        counted: bool = True,
    ) -> CorruptedJobQuarantined:
        """A job whose data is broken goes to the dead letters with a "corrupted" reason, so that one bad
        record never blocks the queue. ``ready_k``: its entry in the ready index (None: the caller
        unindexed it). ``bad_payload``: payload bytes that do not decode; they are kept, as a msgpack bin
        value, so that the dead letter reads (and shows what was there). ``record`` None: the record does
        not decode (``layout.unpack_record``); a minimal one replaces it (queue "default", no name, enqueued
        when its id says), its bytes on disk are kept as the dead letter's result, and a large payload of
        it stays its payload (as bytes, if those do not decode either)."""
        if ready_k is not None:  # a pending job, met by a claim: its queue (the key says which) has one fewer
            txn.delete(ready_k, db=self.ready)
            self._tally(txn, ready_k[: ready_k.index(QUEUE_SEP)], _COUNTED[PENDING], -1)
        elif (
            record is None and counted
        ):  # pending or scheduled, perhaps: the record cannot say, nor its queue
            self._counts_inexact(txn)
        if record is None:  # undecodable: rebuild a minimal record around what we know
            key = id_key(job_id)
            raw = txn.get(key, db=self.jobs)
            record = _unreadable_record(job_id)
            if raw is not None:
                raw = bytes(raw)
                record[F_RESULT] = codec.pack_value(raw, what="record", limit=len(raw) + 16)
                reason += "; the record's bytes on disk are kept as the job's result"
            external = txn.get(key, db=self.payloads)
            if external is not None and bad_payload is None:
                try:
                    codec.unpack_stored(external, job_id, "payload")
                except QueueCorrupted:
                    bad_payload = bytes(external)
        record[F_STATE] = FAILED
        record[F_FINISHED_AT] = now_us
        record[F_TOKEN] = None
        record[F_LEASE_UNTIL] = None
        record[F_ERROR] = f"corrupted: {reason}"
        record[F_ERROR_TYPE] = CORRUPTED
        if bad_payload is not None:
            kept = codec.pack_value(bad_payload, what="payload", limit=len(bad_payload) + 16)
            if record[F_PAYLOAD] is None:
                txn.put(id_key(job_id), kept, db=self.payloads)
            else:
                record[F_PAYLOAD] = kept
        self._index(txn, job_id, record)
        self._store(txn, job_id, record)
        if self._payload(txn, job_id, record) is None:
            record[F_PAYLOAD] = codec.pack_value(None, what="payload", limit=16)
        self._store(txn, job_id, record)
        return CorruptedJobQuarantined(job_id, reason)

    def _quarantine_unreadable(
        self, txn: Any, job_id: int, db: Any, key: bytes | None, now_us: int, reason: str
    ) -> CorruptedJobQuarantined:
        """``_quarantine`` of a job whose record does not decode, met through the entry ``key`` of index
        ``db`` (the walk knows where it came from: the record cannot say). ``key`` None: every index entry
        that names the job goes (``_drop_entries``)."""
        if key is None:
            self._drop_entries(txn, {job_id})
        else:
            txn.delete(key, db=db)
        counted = key is None or db is self.ready or db is self.sched  # else it was running, done or failed
        return self._quarantine(txn, job_id, None, None, now_us, reason, counted=counted)

    def _drop_entries(self, txn: Any, job_ids: set[int]) -> None:
        """Delete every index entry that names one of ``job_ids`` (records that do not decode, so their
        keys cannot be computed). A dead letter's entry is its id; the others are found by a scan of the
        other indexes, O(their entries): only ever for broken records, and once for each batch of them."""
        wanted = {id_key(job_id) for job_id in job_ids}
        rest = {key for key in wanted if not txn.delete(key, db=self.failed)}
        if not rest:
            return  # each was a dead letter: a consistent index has no other entry for it
        for db in (self.ready, self.sched, self.lease, self.done_at):
            stale = [key for key in txn.cursor(db=db).iternext(values=False) if key[-8:] in rest]
            for key in stale:
                txn.delete(key, db=db)

    def quarantine_unreadable(self, now: float, met: Sequence[Unreadable]) -> bool:
        """Quarantine the records a read met that do not decode (a read transaction cannot write them):
        each that still does not decode (another process may have done it meanwhile), in one write
        transaction. Never raises, so that the read still answers: a failure is logged. -> whether it
        committed."""
        now_us = micros(now)
        found: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> None:
            found.clear()
            for job_id, db, key in met:
                raw = txn.get(id_key(job_id), db=self.jobs)
                if raw is None:
                    continue
                try:
                    layout.unpack_record(raw, job_id)
                except QueueCorrupted as exc:
                    found.append(self._quarantine_unreadable(txn, job_id, db, key, now_us, str(exc)))

        try:
            self.env.write(txn_fn)
        except QueueError:
            logger.exception("shard %d: %d job(s) whose record does not decode could not be moved to the "
                             "dead letters", self.index, len(met))  # fmt: skip
            return False
        self._report(found)
        return True

    def _report(self, found: Sequence[CorruptedJobQuarantined]) -> None:
        """One log line per job a committed transaction moved to the dead letters (or deleted) because its
        data is broken: it happens once per job, since the dead letter it becomes reads fine."""
        for item in found:
            fate = (
                "deleted, as asked" if item.deleted else "moved to the dead letters (error type 'Corrupted')"
            )
            logger.error("shard %d: job %d %s: %s", self.index, item.job_id, fate, item.reason)

    # ------------------------------------------------------------------ completion (through a record)

    def touch(self, now: float, job_id: int, token: bytes, lease_time: float) -> float:
        lease_us = micros(now + lease_time)

        def txn_fn(txn: Any) -> float:
            record = self._held(txn, job_id, token, whole=False)
            old = record[F_LEASE_UNTIL]
            if old is not None:
                txn.delete(time_key(old, job_id), db=self.lease)
            record[F_LEASE_UNTIL] = lease_us
            txn.put(time_key(lease_us, job_id), b"", db=self.lease)  # still running: no count changes
            self._store(txn, job_id, record)
            return lease_us / 1_000_000

        return self.env.write(txn_fn)

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
            for job_id, token, result in done:
                try:
                    self._complete(txn, now_us, job_id, token, result)
                except QueueCorrupted as exc:
                    skipped[job_id] = str(exc)
            return skipped

        return self.env.write(txn_fn, durable=durable)

    def _complete(self, txn: Any, now_us: int, job_id: int, token: bytes, result: bytes | None) -> None:
        record = self._held(txn, job_id, token, whole=False)
        # running -> done, written out (the hot path: what _unindex() + _index() do, inlined)
        txn.delete(time_key(record[F_LEASE_UNTIL], job_id), db=self.lease)
        txn.put(time_key(now_us, job_id), b"", db=self.done_at)
        record[F_STATE] = DONE
        record[F_FINISHED_AT] = now_us
        record[F_TOKEN] = None
        record[F_LEASE_UNTIL] = None
        record[F_RESULT] = result
        txn.put(id_key(job_id), layout.pack_record(record), db=self.jobs)

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
            return self._fail_record(txn, job_id, record, now, error, retry_at)

        return self.env.write(txn_fn, durable=durable)

    def _fail_record(
        self,
        txn: Any,
        job_id: int,
        record: list[Any],
        now: float,
        error: tuple[str | None, str | None, str | None],
        retry_at: float | None,
    ) -> State:
        now_us = micros(now)
        self._unindex(txn, job_id, record)
        retries = record[F_RETRIES] + 1
        record[F_RETRIES] = retries
        record[F_ERROR], record[F_ERROR_TYPE], record[F_TRACEBACK] = error
        history = record[F_ERRORS] or []
        history.append([error[1], error[0]])
        record[F_ERRORS] = history[-HISTORY_MAX:]
        record[F_TOKEN] = None
        record[F_LEASE_UNTIL] = None
        if retry_at is None:
            record[F_STATE] = FAILED
            record[F_FINISHED_AT] = now_us
        elif retry_at > now:
            record[F_STATE] = SCHEDULED
            record[F_READY_AT] = micros(retry_at)
        else:
            record[F_STATE] = PENDING
            record[F_READY_AT] = now_us
        self._index(txn, job_id, record)
        self._store(txn, job_id, record)
        new_state: State = STATES[record[F_STATE]]
        return new_state

    def release(self, now: float, job_id: int, token: bytes) -> None:
        """Running -> pending without counting an attempt; it keeps its place at the front of its queue."""

        def txn_fn(txn: Any) -> None:
            record = self._held(txn, job_id, token)
            self._unindex(txn, job_id, record)
            _mark_pending_uncharged(record)
            record[F_ATTEMPTS] = max((record[F_ATTEMPTS] or 1) - 1, 0)
            self._index(txn, job_id, record)
            self._store(txn, job_id, record)

        self.env.write(txn_fn)

    # ------------------------------------------------------------------ maintenance

    def recover_expired(self, now: float, batch: int = 1000) -> list[Recovered]:
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
            cursor = txn.cursor(db=self.lease)
            while len(recovered) < batch and cursor.first():
                expiry_us, job_id = time_key_parts(cursor.key())
                if expiry_us > now_us:
                    break
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted as exc:
                    found.append(self._quarantine_unreadable(txn, job_id, self.lease, cursor.key(), now_us,
                                                             str(exc)))  # fmt: skip
                    continue
                if record is None or record[F_STATE] != RUNNING or record[F_LEASE_UNTIL] != expiry_us:
                    cursor.delete()  # stray entry
                    continue
                batched = record[F_CLAIM] == CLAIM_BATCH
                record[F_CLAIM] = CLAIM_ALONE_NEXT
                if batched:
                    self._unindex(txn, job_id, record)
                    _mark_pending_uncharged(record)
                    self._index(txn, job_id, record)
                    self._store(txn, job_id, record)
                    recovered.append(Recovered(job_id, record[F_QUEUE], record[F_NAME], State.PENDING, False))
                    continue
                state = self._fail_record(txn, job_id, record, now, error, _at_once(record, now))
                recovered.append(Recovered(job_id, record[F_QUEUE], record[F_NAME], state))
            return recovered

        recovered = self.env.write(txn_fn)
        self._report(found)
        return recovered

    def scrub(
        self, now: float, start: bytes | None, batch: int = 2000
    ) -> tuple[list[Recovered], bytes | None]:
        """Walk up to ``batch`` records from ``start`` and recover running jobs that have no lease entry
        (only broken data can cause that: RFC-RC-02), and move records that do not decode, in any state,
        to the dead letters. -> (recovered, where to go on, or None at the end). Recovery calls this a step
        at a time, so the whole store is checked over successive rounds."""
        error = ("lease lost: the job was running without a lease", LEASE_EXPIRED, None)
        now_us = micros(now)
        quarantined: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> tuple[list[Recovered], bytes | None]:
            quarantined.clear()
            cursor = txn.cursor(db=self.jobs)
            found = cursor.set_range(start) if start is not None else cursor.first()
            orphans: list[tuple[int, list[Any]]] = []
            unreadable: dict[int, str] = {}
            seen = 0
            while found and seen < batch:
                key, raw = cursor.item()
                if key[:8] == _COUNTERS_KEY:  # the counters, after every job
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
                    if lease_us is None or txn.get(time_key(lease_us, job_id), db=self.lease) is None:
                        orphans.append((job_id, record))
                found = cursor.next()
            resume = cursor.key() if found else None
            recovered = []
            for job_id, record in orphans:
                record[F_LEASE_UNTIL] = None
                state = self._fail_record(txn, job_id, record, now, error, _at_once(record, now))
                recovered.append(Recovered(job_id, record[F_QUEUE], record[F_NAME], state))
            if unreadable:
                self._drop_entries(txn, set(unreadable))  # one scan of the indexes for them all
                for job_id, reason in unreadable.items():
                    quarantined.append(self._quarantine(txn, job_id, None, None, now_us, reason))
            return recovered, resume

        outcome = self.env.write(txn_fn)
        self._report(quarantined)
        return outcome

    def vacuum(self, cutoff: float, batch: int = 1000, *, now: float) -> int:
        """Delete done jobs that finished at or before ``cutoff``. -> how many (at most ``batch``). An entry
        whose job is not done (any more) is dropped, the job left alone; a job whose record does not decode
        goes to the dead letters (``_quarantine``)."""
        cutoff_us, now_us = micros(cutoff), micros(now)
        found: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> int:
            found.clear()
            removed = 0
            cursor = txn.cursor(db=self.done_at)
            while removed < batch and cursor.first():
                index_key = cursor.key()
                finished_us, job_id = time_key_parts(index_key)
                if finished_us > cutoff_us:
                    break
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted as exc:
                    found.append(self._quarantine_unreadable(txn, job_id, self.done_at, index_key, now_us,
                                                             str(exc)))  # fmt: skip
                    continue
                cursor.delete()
                removed += 1
                if record is None:
                    txn.delete(id_key(job_id), db=self.payloads)
                elif record[F_STATE] == DONE:
                    self._delete(txn, job_id, record)  # its done entry, if it was another, is a stray one
            return removed

        removed = self.env.write(txn_fn)
        self._report(found)
        return removed

    def forget_unique(self, now: float, ttl: float, batch: int = 1000) -> int:
        """Drop unique keys used ``max(ttl, UNIQUE_KEY_MIN_TTL)`` seconds or more before ``now``: a key lives
        a day at least, so that a periodic tick (which looks back less than that) stays enqueued once
        whatever the result TTL. -> how many (at most ``batch``). A scan: unique keys are few (one per
        periodic tick)."""
        cutoff_us = micros(now - max(ttl, UNIQUE_KEY_MIN_TTL))

        def txn_fn(txn: Any) -> int:
            old = [k for k, v in txn.cursor(db=self.unique) if _UNIQUE.unpack(v)[1] <= cutoff_us][:batch]
            for key in old:
                txn.delete(key, db=self.unique)
            return len(old)

        return self.env.write(txn_fn)

    def requeue(self, now: float, job_id: int) -> bool:
        """Failed -> pending with retries reset. False if the job is not failed (or gone), or its record
        does not decode: then it becomes a dead letter that says so (``_quarantine``), with nothing left
        to run."""
        now_us = micros(now)
        found: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> bool:
            found.clear()
            record = self._load_or_quarantine(txn, job_id, now_us, found)
            if record is None or found or record[F_STATE] != FAILED:
                return False
            self._unindex(txn, job_id, record)
            record[F_STATE] = PENDING
            record[F_RETRIES] = 0
            record[F_READY_AT] = now_us
            record[F_STARTED_AT] = record[F_FINISHED_AT] = None
            record[F_ERROR] = record[F_ERROR_TYPE] = record[F_TRACEBACK] = None
            self._index(txn, job_id, record)
            self._store(txn, job_id, record)
            return True

        requeued = self.env.write(txn_fn)
        self._report(found)
        return requeued

    def cancel(self, job_id: int, *, now: float) -> bool:
        """Pending or scheduled -> deleted. False if the job is in another state (or gone)."""
        return self.delete(job_id, (PENDING, SCHEDULED), now=now)

    def delete(
        self, job_id: int, states: tuple[int, ...] = (PENDING, SCHEDULED, DONE, FAILED), *, now: float
    ) -> bool:
        """Delete the job, record and index entries in one transaction, if its state is one of ``states``
        (never running: its holder still works on it). False otherwise (or gone). A job whose record does
        not decode is a dead letter first (``_quarantine``): deleted if ``states`` has failed ones."""
        assert RUNNING not in states
        now_us = micros(now)
        found: list[CorruptedJobQuarantined] = []

        def txn_fn(txn: Any) -> bool:
            found.clear()
            record = self._load_or_quarantine(txn, job_id, now_us, found)
            if record is None or record[F_STATE] not in states:
                return False
            self._delete(txn, job_id, record)
            for item in found:
                item.deleted = True
            return True

        deleted = self.env.write(txn_fn)
        self._report(found)
        return deleted

    def _load_or_quarantine(
        self, txn: Any, job_id: int, now_us: int, found: list[CorruptedJobQuarantined]
    ) -> list[Any] | None:
        """``_load``, but a record that does not decode is first quarantined (noted in ``found``): -> the
        dead letter it became."""
        try:
            return self._load(txn, job_id)
        except QueueCorrupted as exc:
            found.append(self._quarantine_unreadable(txn, job_id, None, None, now_us, str(exc)))
            return self._load(txn, job_id)

    def purge(
        self, state: State, cutoff: float | None, batch: int = 1000, start: bytes | None = None, *, now: float
    ) -> tuple[int, bytes | None]:
        """Delete the jobs in ``state`` (only those older than ``cutoff`` if given: by finish time for
        done/failed, by enqueue time otherwise) among the next ``batch`` index entries from ``start``.
        -> (deleted, where the next call starts, or None when the index is done).

        A job whose record does not decode is quarantined (``_quarantine``): a dead letter. Met while
        purging the dead letters, it goes with them if it is old enough: the enqueue time its id gives is
        the only time known of it."""
        cutoff_us = None if cutoff is None else micros(cutoff)
        now_us = micros(now)
        index = self.indexes[state]
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
                    record = self._load(txn, job_id)
                except QueueCorrupted as exc:
                    item = self._quarantine_unreadable(txn, job_id, index, key, now_us, str(exc))
                    quarantined.append(item)
                    if code == FAILED and (cutoff_us is None or job_id >> SHARD_BITS <= cutoff_us):
                        self._delete(txn, job_id, self._load(txn, job_id))  # type: ignore[arg-type]
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
                self._delete(txn, job_id, record)
                deleted += 1
            return deleted, resume

        outcome = self.env.write(txn_fn)
        self._report(quarantined)
        return outcome

    # ------------------------------------------------------------------ reads

    def job(self, job_id: int, *, now: float) -> Job | None:
        """A snapshot of the job, or None if there is none. Never raises on broken data: a job whose
        record does not decode is quarantined first (``quarantine_unreadable``), and this is the dead
        letter it became (or, if that write failed, what it would have become, ``damage`` saying why)."""

        def txn_fn(txn: Any) -> Job | str | None:
            try:
                record = self._load(txn, job_id)
            except QueueCorrupted as exc:
                return str(exc)
            if record is None:
                return None
            return record_to_job(job_id, record, self._payload(txn, job_id, record))

        snapshot = self.env.read(txn_fn)
        if not isinstance(snapshot, str):
            return snapshot
        if self.quarantine_unreadable(now, [(job_id, None, None)]):
            again = self.env.read(txn_fn)
            if not isinstance(again, str):
                return again
        record = _unreadable_record(job_id)  # the write failed: what the dead letter would hold
        record[F_STATE], record[F_FINISHED_AT] = FAILED, micros(now)
        record[F_ERROR], record[F_ERROR_TYPE] = f"corrupted: {snapshot}", CORRUPTED
        return replace(record_to_job(job_id, record, None), damage=snapshot)

    def sort_key(self, state: State, job_id: int) -> bytes | None:
        """Where ``job_id`` sorts in the listing of ``state`` (see ``list_jobs``), from its record; the job
        need not be in that state any more. None if that cannot be known (the record is gone, or does not
        decode)."""
        if state in (State.RUNNING, State.FAILED):
            return id_key(job_id)

        def txn_fn(txn: Any) -> bytes | None:
            try:
                record = self._load(txn, job_id)
            except QueueCorrupted:
                return None  # nowhere in any listing
            if record is None:
                return None
            if state is State.PENDING:
                return ready_key(b"", record[F_PRIORITY], record[F_READY_AT], job_id)[1:]
            if state is State.SCHEDULED:
                return time_key(record[F_READY_AT], job_id)
            finished = record[F_FINISHED_AT]
            return None if finished is None else time_key(finished, job_id)

        return self.env.read(txn_fn)

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
        """Up to ``limit`` jobs in ``state`` of this shard with their sort keys, strictly past ``after_key``,
        undecoded: the caller merges shards by sort key and decodes (``Listed.job()``) only what it keeps.

        Each state is listed in the order of its index: pending in claim order (priority, then ready
        time), scheduled by ETA, done by finish time; running and failed by job id. Sort keys compare
        across shards, so the caller merges shards by them. A job whose record does not decode is
        quarantined once the read is done (``quarantine_unreadable``) and the listing read again: it is
        then among the dead letters."""
        index = self.indexes[state]
        code = STATE_CODE[state]
        unreadable: list[Unreadable] = []

        def txn_fn(txn: Any) -> list[Listed]:
            unreadable.clear()
            cursor = txn.cursor(db=index)
            out: list[Listed] = []

            def take(sort_key: bytes, job_id: int, index_key: bytes | None) -> None:
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted:
                    unreadable.append((job_id, index, index_key))
                    return
                if (
                    record is not None
                    and record[F_STATE] == code
                    and (queue is None or record[F_QUEUE] == queue)
                    and (name is None or record[F_NAME] == name)
                ):
                    out.append(Listed(sort_key, job_id, record, self._payload(txn, job_id, record)))

            if state is State.RUNNING:  # few by nature: sort them all by id
                keys = sorted(key[-8:] for key in cursor.iternext(values=False))
                if newest_first:
                    keys.reverse()
                for key in keys:
                    if len(out) >= limit:
                        break
                    if after_key is None or (key < after_key if newest_first else key > after_key):
                        take(key, id_from_key(key), None)
                return out
            if state is State.PENDING:
                prefixes = [queue_prefix(queue.encode())] if queue is not None else _queue_prefixes(cursor)
            else:
                prefixes = [b""]
            merged: list[Listed] = []
            for prefix in prefixes:
                out = []
                found = _position(cursor, prefix, after_key, newest_first)
                step = cursor.prev if newest_first else cursor.next
                while found and len(out) < limit:
                    key = cursor.key()
                    if not key.startswith(prefix):
                        break
                    take(key[len(prefix) :], id_from_key(key[-8:]), bytes(key))
                    found = step()
                merged.extend(out)
            merged.sort(key=lambda item: item.sort_key, reverse=newest_first)
            return merged[:limit]

        listed = self.env.read(txn_fn)
        if unreadable and self.quarantine_unreadable(now, list(unreadable)):
            listed = self.env.read(txn_fn)  # once: what it quarantined decodes now
        return listed

    def counts(self) -> dict[str, int]:
        """State counts and total puts, O(1): LMDB keeps exact entry counts per database."""

        def txn_fn(txn: Any) -> dict[str, int]:
            out = {state.value: _entries(txn, db) for state, db in self.indexes.items()}
            raw = txn.get(_COUNTERS_KEY, db=self.jobs)
            out["total"] = _COUNTERS.unpack(raw)[1] if raw is not None else 0
            return out

        return self.env.read(txn_fn)

    def queue_counts(self, *, now: float) -> dict[str, dict[str, int]]:
        """queue -> {"pending", "scheduled", "running"} counts in this shard, in one read: pending and
        scheduled from the counters kept with the states (``_QUEUE_COUNTS_KEY``), O(queues); running from
        the running jobs' records, O(running jobs), few by nature. When the counters are not known to be
        exact (a store older than them, a quarantined record), they are rebuilt first
        (``rebuild_queue_counts``). A running job whose record does not decode is not counted, and is
        quarantined once the read is done (``quarantine_unreadable``)."""
        unreadable: list[Unreadable] = []

        def txn_fn(txn: Any) -> dict[str, dict[str, int]] | None:
            unreadable.clear()
            cursor = txn.cursor(db=self.jobs)
            if not cursor.set_key(_QUEUE_COUNTS_KEY):
                return None
            out: dict[str, dict[str, int]] = {}
            prefix = len(_QUEUE_COUNTS_KEY)
            while cursor.next():
                key, value = cursor.item()
                if not key.startswith(_QUEUE_COUNTS_KEY):
                    break
                pending, scheduled = _QUEUE_COUNTS.unpack(value)
                out[bytes(key[prefix:]).decode()] = {"pending": pending, "scheduled": scheduled, "running": 0}
            for key in txn.cursor(db=self.lease).iternext(keys=True, values=False):
                job_id = time_key_parts(key)[1]
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted:
                    unreadable.append((job_id, self.lease, bytes(key)))
                    continue
                if record is not None:
                    counts = out.get(record[F_QUEUE])
                    if counts is None:
                        counts = out[record[F_QUEUE]] = {"pending": 0, "scheduled": 0, "running": 0}
                    counts["running"] += 1
            return out

        counts = self.env.read(txn_fn)
        if counts is None:
            self.rebuild_queue_counts(now)
            counts = self.env.read(txn_fn)
        if unreadable:
            self.quarantine_unreadable(now, list(unreadable))
        return counts or {}

    def rebuild_queue_counts(self, now: float) -> None:
        """Count each queue's pending and scheduled jobs from the indexes (ready keys hold their queue;
        scheduled jobs' records are read) and store the counts, marked exact, in one write transaction:
        O(those jobs), once. A scheduled record met that does not decode is quarantined in it."""
        now_us = micros(now)
        found: list[CorruptedJobQuarantined] = []
        tail = _READY_TAIL.size + 3  # NUL, 2-byte priority, (ready time, id)

        def txn_fn(txn: Any) -> None:
            found.clear()
            counts: dict[bytes, list[int]] = {}
            for key in txn.cursor(db=self.ready).iternext(keys=True, values=False):
                counts.setdefault(bytes(key[:-tail]), [0, 0])[0] += 1
            unreadable: list[tuple[int, bytes, str]] = []
            for key in txn.cursor(db=self.sched).iternext(keys=True, values=False):
                job_id = time_key_parts(key)[1]
                try:
                    record = self._load(txn, job_id)
                except QueueCorrupted as exc:
                    unreadable.append((job_id, bytes(key), str(exc)))
                    continue
                if record is not None:
                    counts.setdefault(record[F_QUEUE].encode(), [0, 0])[1] += 1
            for job_id, key, reason in unreadable:
                found.append(self._quarantine_unreadable(txn, job_id, self.sched, key, now_us, reason))
            cursor = txn.cursor(db=self.jobs)
            stale = []
            if cursor.set_range(_QUEUE_COUNTS_KEY):
                for key in cursor.iternext(values=False):
                    if not key.startswith(_QUEUE_COUNTS_KEY):
                        break
                    stale.append(bytes(key))
            for key in stale:
                txn.delete(key, db=self.jobs)
            for queue, (pending, scheduled) in counts.items():
                txn.put(_QUEUE_COUNTS_KEY + queue, _QUEUE_COUNTS.pack(pending, scheduled), db=self.jobs)
            txn.put(_QUEUE_COUNTS_KEY, _QUEUE_COUNTS_EXACT, db=self.jobs)

        self.env.write(txn_fn)
        self._report(found)

    def verify(self) -> list[str]:
        """Every inconsistency between records, indexes and counters of this shard (empty if none)."""
        tag = f"shard {self.index}"

        def txn_fn(txn: Any) -> list[str]:
            problems: list[str] = []
            expected: dict[State, set[bytes]] = {state: set() for state in self.indexes}
            external = set()
            max_sequence = 0
            jobs = 0
            by_queue: dict[bytes, list[int]] = {}  # what the queue counters should say
            stored_counts: dict[bytes, list[int]] = {}
            exact = undecodable = False
            for key, raw in txn.cursor(db=self.jobs):
                if key[:8] == _COUNTERS_KEY:  # the shard's counters, then the queue counters
                    if key == _QUEUE_COUNTS_KEY:
                        exact = True
                    elif key.startswith(_QUEUE_COUNTS_KEY):
                        stored_counts[bytes(key[len(_QUEUE_COUNTS_KEY) :])] = list(_QUEUE_COUNTS.unpack(raw))
                    continue
                jobs += 1
                job_id = id_from_key(key)
                max_sequence = max(max_sequence, job_id >> 8)
                if job_id & 0xFF != self.index:
                    problems.append(f"{tag}: job {job_id} belongs to shard {job_id & 0xFF}")
                try:
                    record = layout.unpack_record(raw, job_id)
                    state = STATES[record[F_STATE]]
                except (QueueCorrupted, IndexError, TypeError) as exc:
                    problems.append(f"{tag}: job {job_id}: undecodable record ({exc})")
                    undecodable = True  # its queue and state cannot be told: the counts cannot be checked
                    continue
                payload = record[F_PAYLOAD]
                if payload is None:
                    external.add(key)
                    payload = txn.get(key, db=self.payloads)
                    if payload is None:
                        problems.append(f"{tag}: job {job_id} ({state.value}) has no payload")
                for what, data in (("payload", payload), ("result", record[F_RESULT])):
                    try:
                        if data is not None:
                            codec.unpack_stored(data, job_id, what)
                    except QueueCorrupted as exc:
                        problems.append(f"{tag}: {exc} ({state.value})")
                if state is State.RUNNING and (record[F_TOKEN] is None or record[F_LEASE_UNTIL] is None):
                    problems.append(f"{tag}: running job {job_id} has no claim token or lease")
                else:
                    expected[state].add(self._index_key(job_id, record)[1])  # type: ignore[arg-type]
                if record[F_RETRIES] < 0 or record[F_RETRIES] > record[F_MAX_RETRIES] + 1:
                    problems.append(f"{tag}: job {job_id} has retries={record[F_RETRIES]} out of range")
                if state is State.FAILED and record[F_ERROR] is None:
                    problems.append(f"{tag}: failed job {job_id} has no error")
                place = _COUNTED.get(record[F_STATE])
                if place is not None:
                    by_queue.setdefault(record[F_QUEUE].encode(), [0, 0])[place] += 1
            for key in txn.cursor(db=self.payloads).iternext(values=False):
                if key not in external:
                    problems.append(f"{tag}: a stored payload no job refers to ({id_from_key(key)})")
            for state, db in self.indexes.items():
                actual = set(txn.cursor(db=db).iternext(values=False))
                for extra in sorted(actual - expected[state]):
                    job_id = id_from_key(extra[-8:])
                    problems.append(f"{tag}: the {state.value} index has a stray entry for job {job_id}")
                for missing in sorted(expected[state] - actual):
                    job_id = id_from_key(missing[-8:])
                    problems.append(f"{tag}: the {state.value} index lacks job {job_id}")
            raw = txn.get(_COUNTERS_KEY, db=self.jobs)
            sequence, total = _COUNTERS.unpack(raw) if raw is not None else (0, 0)
            if max_sequence > sequence:
                problems.append(f"{tag}: a job id is past the stored sequence {sequence}")
            if jobs > total:
                problems.append(f"{tag}: {jobs} jobs stored but only {total} ever put")
            if exact and not undecodable:  # inexact counters are rebuilt before they are read
                for queue in sorted(by_queue.keys() | stored_counts.keys()):
                    want, have = by_queue.get(queue, [0, 0]), stored_counts.get(queue, [0, 0])
                    if want != have:
                        problems.append(
                            f"{tag}: the counts of queue {queue.decode(errors='replace')!r} say (pending, "
                            f"scheduled) = {tuple(have)}, its jobs are {tuple(want)}"
                        )
            return problems

        return self.env.read(txn_fn)


def _name_bytes(name: str | None) -> bytes:
    return b"" if name is None else name.encode()


def _queue_prefixes(cursor: Any) -> list[bytes]:
    """The (queue name + NUL) prefixes present in the ready index: one seek per queue."""
    prefixes = []
    found = cursor.first()
    while found:
        key = cursor.key()
        prefix = key[: key.index(QUEUE_SEP) + 1]
        prefixes.append(prefix)
        found = cursor.set_range(next_queue_prefix(prefix[:-1]))
    return prefixes


def _position(cursor: Any, prefix: bytes, after_key: bytes | None, backwards: bool) -> bool:
    """Put the cursor on the first entry of ``prefix``'s range strictly past ``after_key`` (walking
    forwards), or strictly before it (backwards). -> whether there is such an entry (the caller still
    checks the prefix)."""
    if not backwards:
        if after_key is None:
            return bool(cursor.set_range(prefix))
        start = prefix + after_key
        found = cursor.set_range(start)
        if found and cursor.key() == start:
            found = cursor.next()
        return bool(found)
    if after_key is not None:
        bound: bytes | None = prefix + after_key
    elif prefix:
        bound = next_queue_prefix(prefix[:-1])
    else:
        bound = None
    if bound is not None and cursor.set_range(bound):
        return bool(cursor.prev())
    return bool(cursor.last())


def _entries(txn: Any, db: Any) -> int:
    return int(txn.stat(db)["entries"])


def _at_once(record: list[Any], now: float) -> float | None:
    """Recovery's decision for a lost lease (a failed attempt): run again at once, or a dead letter when this
    was the last attempt."""
    return decide(record[F_RETRIES] + 1, record[F_MAX_RETRIES], now)
