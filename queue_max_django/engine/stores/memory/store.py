"""``MemoryStore``: the reference store, in this process's memory (see ``__init__.py``).

Every operation takes the space's one lock and runs to its end under it, so each is atomic and
isolated, as a transaction of the other stores is; nothing is written anywhere else. The operations
themselves are the plain functions of ``claims.py``, ``upkeep.py`` and ``reads.py``; this class holds the
lifecycle, the puts, and the lock around each call.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ...cancels import CancelOutcome
from ...concurrency import group_of, served
from ...forks import add_open_probe
from ...job import Job, State
from ...jobspec import JobSpec
from ..types import Candidate, Claimed, ClaimOutcome, Head, NewJobs, Recovered, Sample, StoreInfo
from . import claims, reads, tagged, uniqueness, upkeep
from .concurrency import MemoryConcurrency
from .control import MemoryControl, MemoryLocks
from .hints import MemoryHints
from .pauses import MemoryPauses
from .schedules import MemorySchedules
from .space import Row, Space, micros, ready_key
from .transfer import MemoryTransfer
from .workflows import MemoryWorkflows

_SPACES: dict[str, Space] = {}  # the named stores of this process
_SPACES_LOCK = threading.Lock()
_OPEN: weakref.WeakSet[MemoryStore] = weakref.WeakSet()  # the handles not closed yet


def _open_handles() -> list[str]:
    """What of the memory stores this process holds open (``forks.open_stores``): a worker forked from it
    would work on a copy of the jobs that nobody else sees."""
    return [handle.path for handle in list(_OPEN)]


add_open_probe(_open_handles)


def space_named(name: str) -> Space:
    """The space of the named store ``name``, made on first use; ``""``: a new one of nobody's."""
    if not name:
        return Space("")
    with _SPACES_LOCK:
        found = _SPACES.get(name)
        if found is None:
            found = _SPACES[name] = Space(name)
        return found


def forget(name: str) -> bool:
    """Drop the named store ``name``: the next open of that name starts empty (its open handles keep the
    old data). -> whether there was one."""
    with _SPACES_LOCK:
        return _SPACES.pop(name, None) is not None


def exists(name: str) -> bool:
    """Whether a named store ``name`` was made in this process (and not forgotten)."""
    with _SPACES_LOCK:
        return name in _SPACES


class MemoryStore:
    """The in-memory store (see the module's docstring). ``MemoryStore.open("name")``: a handle on the
    named store of this process (every handle of one name shares its jobs); ``MemoryStore()``: a store of
    its own."""

    kind = "memory"
    shards = 1
    """One shard: its job ids' low byte is 0."""
    offline_compact = False
    """Nothing on disk to rewrite."""
    transactional_enqueue = False
    """No database transaction to join."""
    multi_host = False
    """One process: the jobs are in its memory (a forked child has a copy of its own, shared with nobody)."""
    server_commits = False
    """A commit is this process's own work, done when the call returns."""

    @classmethod
    def open(cls, name: str = "", *, clock: Callable[[], float] | None = None) -> MemoryStore:
        return cls(space_named(name), clock=clock)

    def __init__(self, space: Space | None = None, *, clock: Callable[[], float] | None = None) -> None:
        self.space = space if space is not None else Space("")
        self.path = f"memory://{self.space.name}"
        self.clock: Callable[[], float] = clock or time.time
        self.hints = MemoryHints(self.space)
        self.control = MemoryControl(self.space, self.clock)
        self.locks = MemoryLocks(self.space, self.clock)
        self.pauses = MemoryPauses(self.space, self.clock, self.hints)
        self.schedules = MemorySchedules(self.space)
        self.workflows = MemoryWorkflows(self.space)
        self.concurrency = MemoryConcurrency(self.space)
        self.transfer = MemoryTransfer(self.space)
        _OPEN.add(self)

    @property
    def lock(self) -> Any:
        """The space's one lock (a property: a forked child's space has a new one)."""
        return self.space.lock

    # ------------------------------------------------------------------ lifecycle

    def info(self) -> StoreInfo:
        return StoreInfo(self.kind, self.path, self.shards)

    def after_fork(self) -> None:
        """The child's copy is its own: new locks (a parent's thread may have held them at the fork)."""
        self.space.after_fork()

    def maintain(self, flush: bool) -> None:
        """Nothing to flush or reclaim."""

    def reader_check(self) -> int:
        return 0  # no reader slots

    def end_thread(self) -> None:
        """Nothing is kept per thread."""

    def borrowing(self, connection: Any) -> contextlib.AbstractContextManager[None]:
        raise AssertionError("the memory store cannot work in the caller's transaction")

    def close(self, flush: bool) -> None:
        self.hints.close()  # the data stays, for the other handles and the next open of the name
        _OPEN.discard(self)

    # ------------------------------------------------------------------ enqueue

    def next_shard(self) -> int:
        return 0

    def put_one(self, now: float, shard: int, payload: bytes, spec: JobSpec) -> int:
        return self.enqueue(now, shard, [NewJobs((payload,), spec)], False)[0]

    def enqueue(
        self, now: float, shard: int | None, batches: Sequence[NewJobs], durable: bool, connection: Any = None
    ) -> list[int]:
        """Write ``batches`` at once. A batch with a unique key that is held is decided by its rule
        (``uniqueness.py``). -> the ids."""
        assert connection is None, "the memory store cannot write in a database transaction"
        now_us = micros(now)
        ids: list[int] = []
        with self.lock:
            space = self.space
            uniqueness.refuse(space, batches, now_us)
            for batch in batches:
                rule = batch.unique
                if rule is not None:
                    holder = uniqueness.decide(space, batch, rule, now_us)
                    if holder is not None:
                        ids.append(holder)
                        continue
                spec = batch.spec
                ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
                state = State.SCHEDULED if ready_us > now_us else State.PENDING
                if (
                    state is State.PENDING
                ):  # never ready before the last job put: FIFO if the clock steps back
                    ready_us = space.floor_us = max(now_us, space.floor_us)
                for payload in batch.payloads:
                    row = Row(space.next_id(now_us), state, spec.queue, spec.name, spec.priority, ready_us,
                              spec.max_retries, now_us, spec.timeout, spec.partition_key, bytes(payload),
                              spec.metadata)  # fmt: skip
                    if spec.concurrency is not None:
                        row.limits, row.group = spec.concurrency, group_of(spec.queue, spec.concurrency)
                    space.add(row)
                    space.enqueued[spec.queue] += 1
                    ids.append(row.job_id)
                if rule is not None and batch.payloads:
                    uniqueness.take(space, rule, ids[-1], now_us)
            if ids:
                space.hint()
        return ids

    # ------------------------------------------------------------------ claims

    def head(self, shard: int, now: float, queues: tuple[str, ...] | None) -> Head:
        with self.lock:
            key = self.space.best_ready(queues)
            waiting = bool(self.space.turns.turn) and any(served(g, queues) for g in self.space.turns.turn)
            return Head(None if key is None else -key[0], self.space.next_eta(), waiting)

    def claim(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        lease_time: float,
        token: bytes,
        min_priority: int | None,
        worker: str | None,
        limit: int,
    ) -> ClaimOutcome:
        with self.lock:
            return claims.claim(self.space, now, queues, lease_time, token, min_priority, worker, limit)

    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None:
        with self.lock:
            return claims.claim_job(self.space, now, job_id, lease_time, token, worker, scheduled_too)

    def find_admissible(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        skip_queues: frozenset[str],
        skip_names: frozenset[str],
    ) -> tuple[Candidate | None, float | None]:
        """The best pending job whose queue and name are not held back, and the earliest ETA."""
        with self.lock:
            space = self.space
            names = [q for q in (space.ready if queues is None else queues) if q not in skip_queues]
            best: Row | None = None
            for queue in names:
                for key in space.ready.get(queue, ()):
                    row = space.rows[key[2]]
                    if (row.name or "") not in skip_names:
                        if best is None or key < ready_key(best):
                            best = row
                        break
            eta = space.next_eta()
        if best is None:
            return None, eta
        order = ready_key(best)
        return Candidate(order, best.job_id, 0, best.queue, best.name), eta

    def promote_due(self, shard: int | None, now: float) -> int:
        with self.lock:
            return upkeep.promote(self.space, micros(now))

    # ------------------------------------------------------------------ a claimed job

    def heartbeat(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        with self.lock:
            return claims.heartbeat(self.space, now, job_id, token, lease_time)

    def complete(self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool) -> None:
        with self.lock:
            claims.held(self.space, job_id, token)  # raises, nothing changed, when the token lost it
            claims.complete_many(self.space, now, [(job_id, token, result)])

    def complete_many(
        self, now: float, items: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]:
        with self.lock:
            return claims.complete_many(self.space, now, items)

    def fail(
        self,
        now: float,
        job_id: int,
        token: bytes,
        error: tuple[str | None, str | None, str | None],
        retry_at: float | None,
        durable: bool,
    ) -> State:
        with self.lock:
            return claims.fail(self.space, now, job_id, token, error, retry_at)

    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None:
        with self.lock:
            claims.release(self.space, now, job_id, token, retry_at)

    def save_metadata(self, now: float, job_id: int, token: bytes, metadata: bytes | None) -> None:
        with self.lock:
            claims.save_metadata(self.space, job_id, token, metadata)

    # ------------------------------------------------------------------ management and upkeep

    def requeue(self, now: float, job_id: int) -> bool:
        with self.lock:
            return upkeep.requeue(self.space, now, job_id)

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        with self.lock:
            return upkeep.cancel(self.space, now, job_id, by)

    def cancel_requested(self, job_id: int) -> bool:
        with self.lock:
            return job_id in self.space.cancels

    def delete(self, now: float, job_id: int, states: tuple[State, ...] | None) -> bool:
        with self.lock:
            return upkeep.delete(self.space, job_id, states)

    def purge(self, now: float, state: State, cutoff: float | None) -> int:
        with self.lock:
            return upkeep.purge(self.space, state, cutoff)

    def recover_expired(self, now: float) -> list[Recovered]:
        with self.lock:
            return upkeep.recover_expired(self.space, now)

    def vacuum(self, now: float, cutoff: float, unique_ttl: float) -> int:
        with self.lock:
            return upkeep.vacuum(self.space, now, cutoff, unique_ttl)

    # ------------------------------------------------------------------ reads

    def job(self, now: float, job_id: int) -> Job | None:
        with self.lock:
            row = self.space.rows.get(job_id)
            return None if row is None else reads.as_job(row)

    def list_jobs(
        self,
        now: float,
        state: State,
        *,
        queue: str | None,
        name: str | None,
        after: int | None,
        limit: int,
        newest_first: bool,
        shard: int | None,
    ) -> list[Job]:
        with self.lock:
            return reads.list_jobs(self.space, state, queue=queue, name=name, after=after, limit=limit,
                                   newest_first=newest_first)  # fmt: skip

    def tagged_jobs(
        self, now: float, tags: tuple[str, ...], *, state: State | None, queue: str | None, name: str | None,
        after: int | None, limit: int,
    ) -> list[Job]:  # fmt: skip
        with self.lock:
            return tagged.tagged(
                self.space, tags, state=state, queue=queue, name=name, after=after, limit=limit
            )

    def counts(self, shard: int | None = None) -> dict[str, int]:
        with self.lock:
            return reads.counts(self.space)

    def pending_count(self) -> int:
        with self.lock:
            return reads.counts(self.space)[State.PENDING.value]

    def queue_counts(self, now: float) -> dict[str, dict[str, int]]:
        with self.lock:
            return reads.queue_counts(self.space)

    def oldest_pending(self, now: float) -> dict[str, float]:
        with self.lock:
            return reads.oldest_pending(self.space)

    def finished_totals(self) -> tuple[int, int]:
        with self.lock:
            return reads.finished_totals(self.space)

    def cancel_counts(self) -> tuple[int, int]:
        with self.lock:
            return self.space.cancelled, self.space.cancelled + self.space.cancelled_left

    def unique_counts(self) -> tuple[int, int]:
        with self.lock:
            skipped, replaced = self.space.duplicates
            return skipped, replaced

    def enqueued_totals(self) -> dict[str, int]:
        with self.lock:
            return {queue: count for queue, count in sorted(self.space.enqueued.items()) if count}

    def save_sample(self, sample: Sample, keep: int) -> bool:
        with self.lock:
            return reads.save_sample(self.space, sample, keep)

    def samples(self, since: int) -> list[Sample]:
        with self.lock:
            return reads.samples(self.space, since)

    def verify(self) -> list[str]:
        with self.lock:
            return reads.verify(self.space) + self.control.verify() + self.locks.verify()
