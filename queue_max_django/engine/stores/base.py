"""The store interface: what a ``Queue`` asks of the store that keeps its jobs.

The Queue is the policy (validation, routing, priority across shards, backoff decisions, flow admission,
events, the clock, the maintenance schedule); a store is the atomic operations on what is stored. Each
operation below is one transaction of the store (LMDB: one write transaction per shard it touches), takes
the time as ``now`` from the Queue's clock (flow and lock operations read the same clock inside their
transactions), and passes only the plain values of ``types.py`` across the line: no bytes of the store's
layout, no cursors, no environments.

A store also says what it can do, as class attributes checked where a feature is asked for:
``shards`` (how many, each claimed from in parallel), ``offline_compact`` (``queue_compact`` can rewrite its
files), ``transactional_enqueue`` (a put can join the caller's database transaction), ``multi_host``
(processes on several machines can share it), ``server_commits`` (a commit is a server's work, which this
process waits for and can overlap with its own: the worker then writes its acknowledgements while it runs
the next jobs).

Waking idle consumers is part of the contract: every operation that may make a job claimable (an enqueue
that leads its queue, a failed attempt scheduled again, a release, a requeue, recovery, promotion) hints
the waiting consumers after it commits, through ``hints``. A hint is only a hint: consumers re-check the
store, and every wait is bounded (``MAX_IDLE_WAIT``), so a lost hint costs at most one idle re-check.

The protocols are for readers and type checkers: nothing checks them at run time on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..breaker import BreakerPolicy
from ..cancels import CancelOutcome
from ..flowstate import FlowState
from ..job import Job, State
from ..jobspec import JobSpec
from ..ratelimit import Rate
from .types import (
    Candidate,
    Claimed,
    ClaimOutcome,
    Head,
    LockHolder,
    NewJobs,
    Recovered,
    Sample,
    StoreInfo,
    WorkerInfo,
)

Queues = tuple[str, ...] | None  # a queue filter: sorted names, or None for every queue
ErrorInfo = tuple[str | None, str | None, str | None]  # a failure's message, type and traceback


class Hints(Protocol):
    """How a store wakes consumers that wait for work (LMDB: the wake file, see ``lmdb/wake.py``)."""

    def changed(self) -> bool:
        """Did a hint arrive since this thread last waited or asked? Consumes them; True when unknown."""
        ...

    def mark(self) -> Any:
        """An opaque reading of the hints, to compare with a later one (``changed_since``)."""
        ...

    def changed_since(self, old: Any, new: Any) -> list[int] | None:
        """The shards hinted between two marks, or None when any shard may have been."""
        ...

    def wait(self, timeout: float) -> None:
        """Return when a hint arrives or ``timeout`` seconds pass, whichever is first."""
        ...

    def reset_poll(self) -> None:
        """Work was found: a polling fallback starts short again."""
        ...

    def watch(self) -> int | None:
        """A new non-blocking file descriptor that becomes readable when a hint arrives, for an event loop
        (``AsyncQueue``), or None when the store has none (then the caller polls). The caller drains it
        with ``os.read`` after each wake-up and closes it."""
        ...

    def notify(self, shard: int | None = None) -> None:
        """Hint that a job of ``shard`` (None: of any shard) may have become claimable."""
        ...

    def close(self) -> None:
        """Wake every waiter; later waits return at once."""
        ...


class FlowOps(Protocol):
    """Rate limits (token buckets) and circuit breakers shared by every process of a store (``flow.py``
    asks; the policies are the pure ``ratelimit`` and ``breaker``). Each call is one transaction that reads
    the state, applies the policy with ``now`` read from the clock inside it, and writes the result: two
    processes taking tokens at once never both spend the same one."""

    def state(self) -> FlowState:
        """Every limit and breaker, as one consistent read."""
        ...

    def version(self) -> int:
        """A number that changes whenever any process commits a flow change (a cheap cache key)."""
        ...

    def set_limit(self, key: str, rate: Rate) -> None: ...
    def remove_limit(self, key: str) -> bool: ...
    def reset_limit(self, key: str) -> bool: ...

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """``n`` tokens from every limited key of ``keys``, all or none. -> (granted, retry after)."""
        ...

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        """Return ``give_back`` unused tokens, then take up to ``most`` whole ones. -> how many."""
        ...

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        """Undo an ``admit`` whose job could not be claimed after all (tokens, a half-open trial)."""
        ...

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None: ...
    def remove_breaker(self, key: str) -> bool: ...
    def reset_breaker(self, key: str) -> bool: ...

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Every breaker of ``keys`` allows a job and every limit has ``n`` tokens: all or nothing.
        -> (admitted, seconds to wait before trying again)."""
        ...

    def record(self, keys: Sequence[str], success: bool) -> None:
        """A job under ``keys`` finished: count it in each of their breakers."""
        ...


class LockOps(Protocol):
    """Named locks (leases with a ttl, on the store's clock) and the worker registry."""

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool: ...
    def release_lock(self, name: str, owner: str) -> bool: ...
    def lock_holder(self, name: str) -> LockHolder | None: ...
    def last_lock_holder(self, name: str) -> LockHolder | None: ...
    def report_worker(
        self,
        worker_id: str,
        *,
        stale_after: float,
        started_at: float | None = None,
        pid: int | None = None,
        host: str | None = None,
        queues: tuple[str, ...] | None = None,
        threads: int = 1,
        current_jobs: tuple[int, ...] = (),
        processed: int = 0,
        failed: int = 0,
    ) -> None:
        """Record (or refresh) one worker's report; its last heartbeat is now."""
        ...

    def remove_worker(self, worker_id: str) -> bool: ...
    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]: ...
    def prune_workers(self) -> int: ...


class Store(Protocol):
    """The operations of a store. Shards are numbered from 0; a job's shard is part of its id, so the job
    operations take only the id. Flow (rate limits, breakers) and locks (named locks, the worker registry)
    are the ``control`` and ``locks`` members, shared by every process of the store."""

    kind: str
    path: str  # where it is, to show: the LMDB directory; for a server, its address without a password
    clock: Callable[[], float]  # the time of every operation: the Queue's clock unless one was given
    shards: int
    offline_compact: bool
    transactional_enqueue: bool
    multi_host: bool
    server_commits: bool

    @property
    def hints(self) -> Hints: ...

    @property
    def control(self) -> FlowOps: ...

    @property
    def locks(self) -> LockOps: ...

    # -- lifecycle
    def info(self) -> StoreInfo: ...
    def after_fork(self) -> None: ...
    def maintain(self, flush: bool) -> None: ...
    def reader_check(self) -> int: ...
    def end_thread(self) -> None:
        """The calling thread is done with the store: release what the store keeps for that thread."""
        ...

    def close(self, flush: bool) -> None: ...

    # -- enqueue
    def next_shard(self) -> int: ...
    def put_one(self, now: float, shard: int, payload: bytes, spec: JobSpec) -> int: ...
    def enqueue(
        self, now: float, shard: int | None, batches: Sequence[NewJobs], durable: bool, connection: Any = None
    ) -> list[int]:
        """Write ``batches`` in one transaction -> their ids. ``connection``: the caller's database
        connection, only where ``transactional_enqueue`` is true (the Queue checks): the jobs are written
        in the caller's transaction."""
        ...

    # -- claims
    def head(self, shard: int, now: float, queues: Queues) -> Head: ...
    def claim(
        self,
        shard: int,
        now: float,
        queues: Queues,
        lease_time: float,
        token: bytes,
        min_priority: int | None,
        worker: str | None,
        limit: int,
    ) -> ClaimOutcome: ...
    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None: ...
    def find_admissible(
        self, shard: int, now: float, queues: Queues, skip_queues: frozenset[str], skip_names: frozenset[str]
    ) -> tuple[Candidate | None, float | None]: ...
    def promote_due(self, shard: int | None, now: float) -> int: ...

    # -- a claimed job (each checks ``token``: ``QueueCorrupted`` when it no longer holds the job)
    def heartbeat(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        """Extend the lease to ``now + lease_time``. -> (the new expiry, whether the job is marked "cancel
        requested"), in one round trip: the holder learns of a cancel at its next heartbeat."""
        ...

    def complete(
        self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool
    ) -> None: ...
    def complete_many(
        self, now: float, items: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]: ...
    def fail(
        self, now: float, job_id: int, token: bytes, error: ErrorInfo, retry_at: float | None, durable: bool
    ) -> State: ...
    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None: ...
    def save_metadata(self, now: float, job_id: int, token: bytes, metadata: bytes | None) -> None:
        """Replace the metadata of the running job ``token`` holds (its JSON text, ``metadata.py``; None:
        none), keeping the cancel note ``cancel`` wrote there, if any; the job stays as it is.
        ``QueueCorrupted``, nothing written, when the token lost it."""
        ...

    # -- management and upkeep
    def requeue(self, now: float, job_id: int) -> bool:
        """A dead letter back to pending, retries reset, its cancel mark (if any) dropped. False, nothing
        changed, if it is not a dead letter (or gone) or is one quarantined as corrupted (``CORRUPTED``)."""
        ...

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        """In one transaction: remove the job if it is pending or scheduled; mark it "cancel requested" if
        it is running (kept apart from its record, reported by ``heartbeat`` until the job is requeued or
        vacuumed) and put ``{"by": by, "at": now}`` in its metadata under ``job.CANCEL_KEY`` (which
        ``save_metadata`` keeps); else say it finished or is missing, changing nothing."""
        ...

    def cancel_requested(self, job_id: int) -> bool:
        """Is the job marked "cancel requested" (``cancel``)? A running job keeps its mark until its holder
        stops it; a mark outlives the job until the vacuum or a requeue drops it."""
        ...

    def delete(self, now: float, job_id: int, states: tuple[State, ...] | None) -> bool: ...
    def purge(self, now: float, state: State, cutoff: float | None) -> int: ...
    def recover_expired(self, now: float) -> list[Recovered]: ...
    def vacuum(self, now: float, cutoff: float, unique_ttl: float) -> int: ...

    # -- reads
    def job(self, now: float, job_id: int) -> Job | None: ...
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
    ) -> list[Job]: ...
    def counts(self, shard: int | None = None) -> dict[str, int]: ...
    def pending_count(self) -> int: ...
    def queue_counts(self, now: float) -> dict[str, dict[str, int]]: ...
    def oldest_pending(self, now: float) -> dict[str, float]:
        """Per queue with pending jobs, sorted by name: when its longest-waiting pending job became ready
        to claim (unix seconds: its put, or the end of its delay or backoff). O(queues x priorities in
        use), never a walk of the jobs."""
        ...

    def finished_totals(self) -> tuple[int, int]:
        """(jobs ever done, jobs ever dead-lettered), store-wide: the jobs in each state now plus those that
        left it since (vacuumed, purged, deleted, requeued), so both only grow. Counted by the operations
        that remove such jobs, never by ``complete`` or ``fail``: no write on the hot path. O(shards)."""
        ...

    def cancel_counts(self) -> tuple[int, int]:
        """(dead letters that are cancels now, jobs ever cancelled while they ran), store-wide: a dead letter
        whose error type is ``job.CANCELLED`` counts from the ``fail`` that made it until it leaves the
        failed state (requeued, deleted, purged), then as one that left; ``counts()["cancelled"]`` is the
        first. Kept in step with the state counts in the same transactions. O(shards)."""
        ...

    def enqueued_totals(self) -> dict[str, int]:
        """Per queue that ever had one, sorted by name: jobs ever put into it (its share of ``counts()``'s
        ``total``), counted by the put's own transaction. O(shards x queues)."""
        ...

    # -- the throughput history (a ring of per-minute samples, written by ``engine/throughput.py``)
    def save_sample(self, sample: Sample, keep: int) -> bool:
        """Store ``sample`` unless its minute already has one (several samplers of one store: the first
        wins), and drop the samples older than ``keep`` minutes before it. One transaction. -> whether it
        was written."""
        ...

    def samples(self, since: int) -> list[Sample]:
        """The samples of minute ``since`` and later, oldest first."""
        ...

    def verify(self) -> list[str]: ...
