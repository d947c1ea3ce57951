"""``Space``: everything one in-memory store holds, and the one lock every operation takes.

A job is a ``Row`` of plain Python values (times in integer µs, as the other stores keep them; the payload,
result and metadata as the bytes the Queue packed). Each state has one index, kept sorted in the order a
claim or a listing reads it: pending per queue by (-priority, ready time, id), scheduled by (ready time,
id), running by (lease expiry, id), done by (finish time, id); dead letters are found by their state. A row
enters and leaves its index only through ``index``/``unindex``, which also keep the counts per queue and
state, so the counts and the indexes can never disagree with the rows.

Several ``MemoryStore`` handles (one per ``Queue``) may share one ``Space``, as several Queues share the
files of one LMDB store: each handle has its own clock and hints, the data and the lock are the space's.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...forks import fork_generation
from ...job import CANCELLED, State
from ...tags import TAGS_MARK, stored_tags
from ...workflows import WORKFLOW_MARK
from ..types import Sample
from .turns import Turns

HISTORY_MAX = 10  # the error and worker histories keep the last ten, as the other stores do
CLAIM_BATCH = "batch"  # claimed with others: a lease expiry goes back uncharged, to be claimed alone
CLAIM_ALONE_NEXT = "alone-next"  # its lease once expired: the next claim takes it alone


_ENDS = (State.DONE, State.FAILED)
_WAITS = (State.PENDING, State.SCHEDULED)


def micros(seconds: float) -> int:
    """Unix seconds -> integer µs, truncated (an ETA read back is never later than the time it was set
    for), never below 0."""
    value = int(seconds * 1_000_000)
    return value if value > 0 else 0


@dataclass(slots=True)
class Row:
    """One job as the memory store keeps it."""

    job_id: int
    state: State
    queue: str
    name: str | None
    priority: int
    ready_us: int
    max_retries: int
    enqueued_us: int
    timeout: float | None
    partition_key: Any
    payload: bytes
    metadata: bytes | None
    retries: int = 0
    attempts: int = 0
    started_us: int | None = None
    finished_us: int | None = None
    lease_us: int | None = None
    token: bytes | None = None
    claim: str | None = None  # CLAIM_BATCH, CLAIM_ALONE_NEXT or None
    result: bytes | None = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    worker_ids: list[str] = field(default_factory=list)
    errors: list[tuple[str | None, str | None]] = field(default_factory=list)  # (type, message) each
    limits: tuple[tuple[str, int], ...] | None = None  # its concurrency limits (engine/concurrency.py)
    group: str | None = None  # concurrency.group_of(queue, limits), where it waits its turn

    def remember_error(self, message: str | None, error_type: str | None, traceback: str | None) -> None:
        self.error, self.error_type, self.traceback = message, error_type, traceback
        self.errors = [*self.errors, (error_type, message)][-HISTORY_MAX:]

    def remember_worker(self, worker: str) -> None:
        self.worker_ids = [*self.worker_ids, worker][-HISTORY_MAX:]


def is_cancel(row: Row) -> bool:
    """Is the row a dead letter that is a cancel (``Job.cancelled``)?"""
    return row.state is State.FAILED and row.error_type == CANCELLED


def ready_key(row: Row) -> tuple[int, int, int]:
    """Where a pending job sorts, in its queue and across queues: the smallest is claimed first."""
    return (-row.priority, row.ready_us, row.job_id)


class Space:
    """The data of one in-memory store (see the module's docstring). Callers hold ``lock`` around every
    read and write of it: one operation, one critical section."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.RLock()
        self.rows: dict[int, Row] = {}
        self.ready: dict[str, list[tuple[int, int, int]]] = {}  # queue -> sorted ready_key()s
        self.scheduled: list[tuple[int, int]] = []  # (ready µs, id)
        self.leases: list[tuple[int, int]] = []  # (lease expiry µs, id)
        self.done: list[tuple[int, int]] = []  # (finish µs, id)
        self.counts: Counter[tuple[str, State]] = Counter()  # (queue, state) -> jobs
        self.enqueued: Counter[str] = Counter()  # queue -> jobs ever put
        self.left: Counter[State] = Counter()  # DONE/FAILED -> jobs that left that state (removed, requeued)
        self.cancelled = 0  # dead letters that are cancels (error type ``job.CANCELLED``) now
        self.cancelled_left = 0  # such dead letters that left the failed state (removed, requeued)
        self.sequence = 0  # the last job id's sequence (job.py: max(previous + 1, now in µs))
        self.floor_us = 0  # the ready time of the last job put pending: FIFO when the clock steps back
        # unique key -> (job id, when it was taken, µs; hold; window end, µs): uniqueness.py
        self.unique: dict[bytes, tuple[int, int, int, int]] = {}
        self.duplicates = [0, 0]  # duplicates ever skipped, replaced (uniqueness.py)
        self.cancels: dict[int, int] = {}  # job id -> when a cancel was requested (µs)
        self.moved: set[int] = set()  # ids taken in by a move (transfer.py), until it forgets them
        self.samples: dict[int, Sample] = {}  # minute -> its sample
        self.limits: dict[str, bytes] = {}  # flowstate's packed values, as every store keeps them
        self.breakers: dict[str, bytes] = {}
        self.flow_version = 0
        self.pauses: dict[str, bytes] = {}  # pausestate.target_key -> pausestate.pack (pauses.py)
        self.schedules: dict[str, bytes] = {}  # schedule name -> schedulestate.pack (schedules.py)
        self.pause_version = 0
        self.locks: dict[str, tuple[str, float, float]] = {}  # name -> (owner, expires at, since)
        self.workers: dict[str, dict[str, Any]] = {}  # worker id -> its report (WorkerInfo's fields)
        self.workflows: dict[int, Any] = {}  # workflow id -> its nodes (workflows.py)
        self.node_ended: Any = None  # settles a node whose job ended (workflows.ended, set by its store)
        self.node_requeued: Any = None  # reopens a node whose job was requeued (workflows.requeued, likewise)
        self.hint_count = 0  # bumped by every write that may make a job claimable (hints.py)
        self.hinted = threading.Condition(self.lock)
        self.watchers: weakref.WeakSet[Any] = weakref.WeakSet()  # hints with descriptors to write to
        self.generation = fork_generation()
        self.turns = Turns()  # limited jobs: waiting per group, running per key (memory/concurrency.py)
        self.tags: dict[str, list[int]] = {}  # tag -> the sorted ids of its jobs (engine/tags.py)

    def after_fork(self) -> None:
        """A forked child has a copy of the data and nobody else's threads: new locks (a parent's thread
        may have held the old ones at the fork). Once per fork, whichever handle asks first."""
        if self.generation != fork_generation():
            self.generation = fork_generation()
            self.lock = threading.RLock()
            self.hinted = threading.Condition(self.lock)

    # ------------------------------------------------------------------ the indexes, and the counts

    def index(self, row: Row) -> None:
        """Enter ``row`` in its state's index and count it (it is not in any index now)."""
        state = row.state
        if state is State.PENDING:
            if row.group is not None:
                self.turns.wait(row.group, ready_key(row))
            else:
                bisect.insort(self.ready.setdefault(row.queue, []), ready_key(row))
        elif state is State.SCHEDULED:
            bisect.insort(self.scheduled, (row.ready_us, row.job_id))
        elif state is State.RUNNING:
            assert row.lease_us is not None
            bisect.insort(self.leases, (row.lease_us, row.job_id))
            if row.limits is not None:
                self.turns.start(row.limits)
        elif state is State.DONE:
            assert row.finished_us is not None
            bisect.insort(self.done, (row.finished_us, row.job_id))
        elif is_cancel(row):
            self.cancelled += 1
        self.counts[row.queue, state] += 1
        if row.metadata is not None and state in _ENDS and WORKFLOW_MARK in row.metadata:
            self.node_ended(self, row)  # a node's job ended: its children may be released

    def unindex(self, row: Row) -> None:
        """Take ``row`` out of its state's index and its count (before its state or sort fields change). A
        done or failed row is only ever unindexed to leave its state (removed, requeued): it is counted as
        one that left (``finished_totals``, ``cancel_counts``)."""
        state = row.state
        if state is State.PENDING:
            if row.group is not None:
                self.turns.unwait(row.group, ready_key(row))
            else:
                entries = self.ready[row.queue]
                remove_entry(entries, ready_key(row))
                if not entries:
                    del self.ready[row.queue]
        elif state is State.SCHEDULED:
            remove_entry(self.scheduled, (row.ready_us, row.job_id))
        elif state is State.RUNNING:
            remove_entry(self.leases, (row.lease_us, row.job_id))
            if row.limits is not None:
                self.turns.end(row.limits)
        elif state is State.DONE:
            remove_entry(self.done, (row.finished_us, row.job_id))
        if state in (State.DONE, State.FAILED):
            self.left[state] += 1
            if is_cancel(row):
                self.cancelled -= 1
                self.cancelled_left += 1
        self.counts[row.queue, state] -= 1
        if not self.counts[row.queue, state]:
            del self.counts[row.queue, state]

    def add(self, row: Row) -> None:
        self.rows[row.job_id] = row
        self.index(row)
        self.tag(row)

    def tag(self, row: Row) -> None:
        """Enter ``row`` under each of its tags (``tags``)."""
        if row.metadata is not None and TAGS_MARK in row.metadata:
            for tag in stored_tags(row.metadata):
                bisect.insort(self.tags.setdefault(tag, []), row.job_id)

    def untag(self, row: Row) -> None:
        """Take ``row`` out of ``tags`` (before it goes, or takes other metadata)."""
        if row.metadata is not None and TAGS_MARK in row.metadata:
            for tag in stored_tags(row.metadata):
                ids = self.tags.get(tag, [])
                at = bisect.bisect_left(ids, row.job_id)
                if at < len(ids) and ids[at] == row.job_id:
                    del ids[at]
                    if not ids:
                        del self.tags[tag]

    def remove(self, row: Row) -> None:
        """Delete the job: its row, its index entry, its cancel mark (it goes with the job). A node's job
        removed while it waited ends its node, cancelled."""
        self.unindex(row)
        if row.metadata is not None and row.state in _WAITS and WORKFLOW_MARK in row.metadata:
            self.node_ended(self, row)
        del self.rows[row.job_id]
        self.cancels.pop(row.job_id, None)
        self.untag(row)

    def next_id(self, now_us: int) -> int:
        """A new job id: ``sequence << 8`` (shard 0), the sequence ``max(previous + 1, now in µs)``."""
        self.sequence = self.sequence + 1 if self.sequence >= now_us else now_us
        return self.sequence << 8

    # ------------------------------------------------------------------ reading the indexes

    def best_ready(self, queues: tuple[str, ...] | None) -> tuple[int, int, int] | None:
        """The ready key of the next job to claim among ``queues`` (None: every queue), or None."""
        names = self.ready.keys() if queues is None else [q for q in queues if q in self.ready]
        heads = [self.ready[name][0] for name in names]
        return min(heads, default=None)

    def next_eta(self) -> float | None:
        return self.scheduled[0][0] / 1_000_000 if self.scheduled else None

    def hint(self) -> None:
        """A job may have become claimable: wake this store's waiting consumers (in every handle)."""
        self.hint_count += 1
        self.hinted.notify_all()
        for watcher in list(self.watchers):
            watcher.poke()


def remove_entry(entries: list[Any], key: Any) -> None:
    at = bisect.bisect_left(entries, key)
    assert at < len(entries) and entries[at] == key, f"index entry {key!r} is missing"
    del entries[at]
