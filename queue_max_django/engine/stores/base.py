"""The store interface: what a ``Queue`` asks of the store that keeps its jobs, written so that a new store
can be implemented from this file and proven by the contract suite (``tests/store_contract/``), which runs
every statement tagged ``[sc_...]`` below against every store kind.

The Queue is the policy (validation, routing, priority across shards, backoff decisions, flow admission,
events, the clock, the maintenance schedule); a store is the atomic operations on what is stored. Each
operation below is one transaction of the store unless its docstring says otherwise (LMDB: one write
transaction per shard it touches; PostgreSQL: one statement, or one transaction), and passes only the
plain values of ``types.py`` across the line: no bytes of the store's layout, no cursors, no environments.

**Jobs and their states.** A job is in one of five states (``job.State``), and only these operations move
it (each moves the job and every count and index that mentions it together, or not at all):

================  =====================  ==========================================================
from              to                     by
================  =====================  ==========================================================
(new)             pending / scheduled    ``enqueue``, ``put_one`` (scheduled when ``ready_at`` > now)
scheduled         pending                ``promote_due``, and a ``claim`` of its shard (due jobs first)
pending           running                ``claim``, ``claim_job`` (``claim_job`` also from scheduled)
running           done                   ``complete``, ``complete_many``
running           pending/scheduled      ``fail`` with a ``retry_at`` (charged), ``release`` (not)
running           failed (dead letter)   ``fail`` without ``retry_at``, ``recover_expired`` (last try)
running           pending                ``recover_expired`` (charged, or uncharged for a batch claim)
failed            pending                ``requeue``
any but running   (gone)                 ``delete``, ``purge``, ``cancel`` (pending/scheduled), and
                                         ``vacuum`` (done)
any live          failed (Corrupted)     quarantine, when the job's stored data does not decode
(a waiting node)  pending                the transaction that ends its last parent (workflows)
================  =====================  ==========================================================

A node of a workflow that waits on its parents is not a job, so it has no state here: the store keeps it
beside the jobs until the transaction that ends its last parent writes its job (``contract/workflows.py``).

- [sc_ids] A job id is a positive int, unique in the store and never reused; the shard that holds the job is
  its low byte (``job.shard_of``: ``sequence << 8 | shard``, ``job.job_id_for``), so job operations take the
  id alone. Within a shard, later puts get larger ids. A store of one shard gives ids whose low byte is 0.
- [sc_time] Every time is unix seconds (a float) that the caller passes as ``now`` (the Queue's clock): a
  job's ``enqueued_at``, ``started_at``, ``finished_at``, its ETA and its lease are ``now`` (or
  ``now + lease_time``, ``retry_at``) of the operation that set them, never the wall clock. A store keeps
  at least µs precision. The flow and lock operations take no ``now``: they read ``Store.clock`` inside
  their transaction (after any lock they wait for), so that the state they apply it to is never newer than
  the time.
- [sc_token] A running job is held by the ``token`` (opaque bytes) of the claim that took it, until
  ``lease_until``. Every operation on a claimed job (``heartbeat``, ``complete``, ``fail``, ``release``,
  ``save_metadata``) checks that ``token`` still holds it, and when it does not (the job is gone, not
  running, or claimed again by another token after its lease expired) raises ``errors.QueueCorrupted``
  saying which, and writes nothing. A holder whose lease expired still holds the job until
  ``recover_expired`` moves it.
- [sc_quarantine] Broken data is damage, never an error of every claim: a job whose stored data does not
  decode (its payload, or its record on a store where a record can be half-written) is *quarantined* when
  an operation meets it: it becomes a dead letter (failed, ``finished_at`` now, no holder) with error type
  ``job.CORRUPTED`` and an error that starts with ``"corrupted: "``, its bytes kept where they can be read
  (``Job.damage`` says what does not decode), and the operation goes on as if the job were not there. A
  claim that met it first raises ``types.CorruptedJobQuarantined`` after its transaction committed (the
  caller claims again). ``requeue`` refuses such a dead letter: what it would run is not what was put.
- [sc_hints] Waking idle consumers is part of the contract: every operation that may make a job claimable
  (an enqueue that leads its queue or is the earliest ETA, a ``fail`` with a retry, a ``release``, a
  ``requeue``, a recovery, a promotion) hints the waiting consumers of this process after it commits, and
  those of other processes where the store can, through ``hints``. A hint is only a hint: consumers
  re-check the store, and every wait is bounded (``MAX_IDLE_WAIT``), so a lost hint costs at most one idle
  re-check.
- Names are checked before anything is written: lock names, owners, worker ids and unique keys by
  ``types.id_bytes`` (``errors.InvalidJob``), the same limits on every store. Everything else a store is
  given was validated by the Queue (queue names, priorities from ``job.PRIORITY_MIN`` to ``PRIORITY_MAX``,
  payload sizes), and a store may assume it.

**What a store may leave out.** A store says what it can do as class attributes, and the Queue (or the
Django layer) checks them where a feature is asked for, so a store without a capability is never asked to
use it:

- ``shards``: how many shards it has, numbered from 0, each claimed from in parallel (a store that orders
  and locks jobs itself has one);
- ``offline_compact``: ``queue_compact`` can rewrite its files while no process has it open;
- ``transactional_enqueue``: ``enqueue`` takes the caller's database ``connection`` and writes in its
  transaction (false: ``connection`` is never given);
- ``multi_host``: processes on several machines can share it;
- ``server_commits``: a commit is a server's work, which this process waits for and can overlap with its
  own (the worker then writes its acknowledgements while it runs the next jobs).

Every method of ``Store`` and of the protocols it hands out (``contract/``: ``Hints``, ``FlowOps``,
``LockOps``, ``PauseOps``, ``TransferOps``, ``ScheduleOps``) must exist; where a store has nothing to
do, the method says so (``reader_check`` returns 0, ``Hints.watch`` returns None, ``end_thread`` does
nothing). The ``durable`` arguments ask for the commit to be on disk before the call returns; a store whose
every commit already is (PostgreSQL with ``synchronous_commit``) ignores them.

Three details of the embedded LMDB store show in the protocol, and stay on purpose:

- ``JobSpec.encoded``: a slot where a store may cache its own encoding of a put's options (the Queue
  keeps one ``JobSpec`` per option set, and never shares one between stores). It is on the spec rather
  than in a cache of the store's because a put is the hot path: reading a slot costs less than a lookup
  keyed by the spec. A store with nothing to cache leaves it alone.
- ``reader_check``: the public ``Queue.reader_check`` asks for it on demand (the background upkeep does it
  too, through ``maintain``). Any store whose processes can leave slots behind when they die has the same
  need; the others return 0.
- ``types.MAX_KEY_BYTES`` (511, LMDB's largest key) bounds names on every store, so that a name valid on
  one store is valid on all of them (a store moved from one kind to another keeps its names).

The protocols are for readers and type checkers: nothing checks them at run time on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..cancels import CancelOutcome
from ..job import Job, State
from ..jobspec import JobSpec
from .contract.concurrency import ConcurrencyOps
from .contract.flow import FlowOps
from .contract.hints import Hints
from .contract.locks import LockOps
from .contract.pauses import PauseOps
from .contract.schedules import ScheduleOps
from .contract.transfer import TransferOps
from .contract.workflows import WorkflowOps
from .types import (
    Candidate,
    Claimed,
    ClaimOutcome,
    Head,
    NewJobs,
    Recovered,
    Sample,
    StoreInfo,
)

Queues = tuple[str, ...] | None  # a queue filter: sorted names, or None for every queue
ErrorInfo = tuple[str | None, str | None, str | None]  # a failure's message, type and traceback


class Store(Protocol):
    """The operations of a store (see the module docstring for what every operation shares). Flow (rate
    limits, breakers) and locks (named locks, the worker registry) are the ``control`` and ``locks``
    members, shared by every process of the store."""

    kind: str  # "lmdb", "postgresql": what ``info()`` and the checks show
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

    @property
    def pauses(self) -> PauseOps: ...

    @property
    def schedules(self) -> ScheduleOps: ...

    @property
    def workflows(self) -> WorkflowOps: ...

    @property
    def concurrency(self) -> ConcurrencyOps: ...

    @property
    def transfer(self) -> TransferOps: ...

    # -- lifecycle
    def info(self) -> StoreInfo:
        """What the store is, for display: kind, location (never a password), shards. [sc_info]"""

    def after_fork(self) -> None:
        """In a forked child, before any other call: drop what belongs to the parent process (handles,
        connections); the child then opens its own."""

    def maintain(self, flush: bool) -> None:
        """The store's own upkeep, called by the Queue's background thread every ``sync_interval``
        (``flush``: also write what is committed to disk, where commits are not synced one by one). Job
        states never change here."""

    def reader_check(self) -> int:
        """Reclaim what dead processes left in the store's shared state (LMDB: reader slots). -> how many;
        0 where there is nothing of the kind. (Why this stays in the protocol: the module docstring.)"""

    def end_thread(self) -> None:
        """The calling thread is done with the store: release what the store keeps for that thread."""

    def borrowing(self, connection: Any) -> AbstractContextManager[None]:
        """Inside the block, this thread's operations run on ``connection``, the caller's, in its open
        transaction; only where ``transactional_enqueue`` is true (the Queue checks)."""

    def close(self, flush: bool) -> None:
        """Wake the waiting consumers (``hints.close``) and release the store (``flush``: sync first). Called
        once; no operation follows."""

    # -- enqueue
    def put_one(self, now: float, shard: int, payload: bytes, spec: JobSpec) -> int:
        """``enqueue`` of one job, no unique key, not durable: a single put's path (the hot one), in one
        transaction. -> its id. [sc_put_one]"""

    def enqueue(
        self, now: float, shard: int | None, batches: Sequence[NewJobs], durable: bool, connection: Any = None
    ) -> list[int]:
        """Write ``batches`` to ``shard`` in one transaction, all or nothing. -> the ids, batch after batch,
        in the order of their payloads. ``shard`` None (``durable`` only): the store picks one.

        - [sc_enqueue_state] Each job is pending, ready at ``now``, or, when its ``spec.ready_at`` is after
          ``now``, scheduled until then; it takes every option of ``spec`` (queue, name, priority,
          max_retries, timeout, partition_key, metadata), no retries, no attempts, ``enqueued_at`` now.
        - [sc_enqueue_fifo] A pending job is ready no earlier than the last job this process put pending in
          that shard (if the clock steps back, the new one still goes behind it): FIFO within a priority.
        - [sc_enqueue_counts] ``counts()``: its state and ``total`` grow by the jobs written, and
          ``enqueued_totals()`` of their queue.
        - [sc_enqueue_unique] A batch with a ``unique`` rule (one payload) is decided by
          ``contract/uniqueness.py`` in this transaction. With ``HOLD_REMEMBERED`` (the periodic ticks'),
          a key used before (and not yet forgotten by ``vacuum``) writes nothing: its id is the earlier
          job's, and its ``unique_hit`` is set. Otherwise the key is recorded with the new job.
        - [sc_enqueue_connection] ``connection``: the caller's database connection, given only where
          ``transactional_enqueue`` is true (the Queue checks): the jobs are written in the caller's
          transaction, and exist only if it commits.
        - ``durable``: on disk before this returns (see the module docstring)."""

    # -- claims
    def head(self, shard: int, now: float, queues: Queues) -> Head:
        """A read of ``shard``: the best priority of its pending jobs among ``queues``, and the earliest ETA
        of its scheduled jobs (of any queue; None: none). Changes nothing. [sc_head]"""

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
    ) -> ClaimOutcome:
        """Claim up to ``limit`` pending jobs of ``shard`` among ``queues`` in one transaction.

        - [sc_claim_promotes] First, in the same transaction, the shard's due scheduled jobs become pending
          (as ``promote_due``): a claim never passes over a job whose ETA passed for one of lower priority.
        - [sc_claim_order] Jobs are taken in claim order: higher priority first, then earlier ready time
          (its put, or the end of its delay or backoff), then smaller id; never one of another queue.
        - [sc_claim_marks] Each taken job becomes running: held by ``token`` until ``now + lease_time``,
          ``started_at`` now, ``attempts`` + 1, ``worker`` (when given) added to its ``worker_ids`` (the
          last ten kept). Its ``retries`` are not charged: only a failure is.
        - [sc_claim_outranked] The claim stops before a job below ``min_priority`` (the best priority the
          caller saw in another shard): nothing claimed and a ``head_priority`` means "outranked, look
          again".
        - [sc_claim_outcome] -> ``ClaimOutcome``: the claimed jobs in claim order (possibly none), the
          priority of the next claimable job after them (None: there is none), the earliest ETA as
          ``head`` gives it, and ``contended`` (True only if the claim had to wait for another writer: a
          hint to prefer another shard; False is always allowed).
        - [sc_claim_batch] A claim that takes two or more jobs marks them a batch: if their lease expires,
          recovery does not charge them (see ``recover_expired``). A job whose lease once expired is
          claimed alone: a claim stops before it when it has taken others, and takes nothing after it
          when it comes first (its ``Claimed.alone`` is True).
        - [sc_claim_quarantine] A job met on the way whose payload (or record) does not decode is
          quarantined; if it came first, ``CorruptedJobQuarantined`` is raised once the transaction
          committed, else the jobs before it are the claim (those after it stay pending, uncharged)."""

    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None:
        """Claim exactly this job, as ``claim`` marks one (never a batch), if it is pending, or scheduled
        with ``scheduled_too`` (it starts now, before its ETA). -> None, nothing changed, if it is in
        another state or missing (or its id names a shard the store does not have); None too if its payload
        does not decode, after quarantining it. [sc_claim_job]"""

    def find_admissible(
        self, shard: int, now: float, queues: Queues, skip_queues: frozenset[str], skip_names: frozenset[str]
    ) -> tuple[Candidate | None, float | None]:
        """A read for a flow-controlled consumer: the first pending job of ``shard`` in claim order among
        ``queues`` whose queue is not in ``skip_queues`` and whose name is not in ``skip_names`` (a job
        without a name is never skipped by name), and the earliest ETA of its scheduled jobs. Its
        ``Candidate.order`` is ``(-priority, ready time in µs, id)``, comparable across shards and stores.
        Changes nothing. [sc_find_admissible]"""

    def promote_due(self, shard: int | None, now: float) -> int:
        """Scheduled jobs of ``shard`` (None: every shard) whose ETA is at or before ``now`` become pending,
        their ready time their ETA (FIFO by when they became due). -> how many. [sc_promote]"""

    # -- a claimed job (each checks ``token`` first: ``QueueCorrupted`` and nothing written when it no
    # longer holds the job [sc_token])
    def heartbeat(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        """Extend the lease to ``now + lease_time`` (also one that expired, as long as nothing recovered the
        job). -> (the new expiry, whether the job is marked "cancel requested"), in one round trip: the
        holder learns of a cancel at its next heartbeat. [sc_heartbeat]"""

    def complete(self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool) -> None:
        """The job is done: running -> done, ``finished_at`` now, ``result`` (packed bytes, or None) kept,
        no holder, no lease; its retries, errors and metadata stay as they are. [sc_complete]"""

    def complete_many(
        self, now: float, items: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]:
        """``complete`` each (job id, token, result), at most one transaction per shard. A job its token no
        longer holds is skipped, never raised: the others still complete. -> {job id: why} of those skipped
        (``{}``: all done). [sc_complete_many]"""

    def fail(
        self, now: float, job_id: int, token: bytes, error: ErrorInfo, retry_at: float | None, durable: bool
    ) -> State:
        """A failed attempt, as the caller decided it (``retry.decide`` on the retries its claim read: the
        token proves they are current): ``retries`` + 1, ``error`` (message, type, traceback) recorded as
        the job's last error and (type, message) appended to its ``errors`` (the last ten kept), no holder,
        and then:

        - ``retry_at`` None: failed, a dead letter, ``finished_at`` now;
        - ``retry_at`` after ``now``: scheduled until ``retry_at``;
        - else pending at once, ready at ``now`` (behind the jobs already waiting).

        -> the new state. [sc_fail] Breakers are the caller's to charge (``FlowOps.record``)."""

    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None:
        """Give the job back, not charged: running -> pending at its old place (its ready time unchanged),
        no holder, ``started_at`` none, ``attempts`` - 1, ``retries`` unchanged; with ``retry_at`` after
        ``now``, scheduled until then instead. [sc_release]"""

    def save_metadata(self, now: float, job_id: int, token: bytes, metadata: bytes | None) -> None:
        """Replace the metadata of the running job ``token`` holds (its JSON text, ``metadata.py``; None:
        none), keeping the cancel note ``cancel`` wrote there, if any [sc_cancel_note]; the job stays as
        it is. [sc_save_metadata]"""

    # -- management and upkeep
    def requeue(self, now: float, job_id: int) -> bool:
        """A dead letter back to pending, ready at ``now`` (behind the jobs waiting), ``retries`` 0, its last
        error and ``finished_at`` cleared, its cancel mark (if any) dropped; its attempts and error history
        stay. -> False, nothing changed, if it is not a dead letter (or missing) or is one quarantined as
        corrupted (``CORRUPTED``). [sc_requeue]"""

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        """In one transaction: remove the job if it is pending or scheduled (``REMOVED``); mark it "cancel
        requested" if it is running (``REQUESTED``: kept apart from its record, reported by ``heartbeat``:
        ``cancel_requested``); else ``FINISHED`` (done or failed) or ``MISSING``, changing nothing.
        [sc_cancel] [sc_cancel_note] A mark also puts ``{"by": by, "at": now}`` in the job's metadata under
        ``job.CANCEL_KEY``, over an earlier note (``save_metadata`` keeps it; ``Job.cancel_note``)."""

    def cancel_requested(self, job_id: int) -> bool:
        """Is the job marked "cancel requested" (``cancel``)? [sc_cancel_mark] A mark stays while its job is
        stored (released or retried: its next holder sees it; done; a dead letter): ``requeue`` drops it,
        and it goes with the job in the transaction that removes it (``delete``, ``purge``, ``vacuum``,
        ``cancel``)."""

    def delete(self, now: float, job_id: int, states: tuple[State, ...] | None) -> bool:
        """Remove the job (its record, payload and result) if it is in one of ``states`` (None:
        any but running; never running, whose holder still works on it). -> False, nothing changed,
        otherwise or if it is missing. [sc_delete]"""

    def purge(self, now: float, state: State, cutoff: float | None) -> int:
        """Remove every job in ``state`` (never ``RUNNING``: the Queue refuses), or only those at or before
        ``cutoff``: by finish time for done and failed jobs, by enqueue time otherwise. In transactions of
        a bounded batch each, not one: jobs put meanwhile may or may not go. -> how many. [sc_purge]"""

    def recover_expired(self, now: float) -> list[Recovered]:
        """Take back every running job whose lease expired at or before ``now`` (its holder died or
        stalled), in transactions of a bounded batch each. Idempotent. -> what it did, one ``Recovered``
        each.

        - [sc_recover_charged] A job claimed alone is charged a failed attempt: ``retries`` + 1, error type
          ``"LeaseExpired"``, then pending at once (ready now) if ``retry.decide(retries + 1,
          max_retries, now)`` allows, else a dead letter (``finished_at`` now).
        - [sc_recover_batch] A job claimed in a batch is not charged (its holder ran at most one job of the
          batch, and which one is unknown): it goes back to pending at its old place, as ``release`` puts a
          job, except that its ``attempts`` stay counted.
        - [sc_recover_alone] Either way, the job is claimed alone next time (``claim``).
        - [sc_recover_result] Each ``Recovered`` says its queue and name, the state it went to, whether
          it was charged, the attempt that was lost (1 for the first) of how many allowed (``max_retries +
          1``), and the worker that held it (the last of its ``worker_ids``; None if its claim named none).
        - A store where a running job can lose its lease through broken data (LMDB) also repairs the next
          stretch of such jobs on each call, charging them as expired."""

    def vacuum(self, now: float, cutoff: float, unique_ttl: float) -> int:
        """Remove done jobs that finished at or before ``cutoff`` (never failed ones; their cancel marks with
        them), and forget unique keys used more than ``max(unique_ttl, types.UNIQUE_KEY_MIN_TTL)`` seconds
        before ``now`` (a put with such a key then writes a new job). In bounded batches. -> how many jobs.
        [sc_vacuum] [sc_vacuum_unique]"""

    # -- reads (each one consistent snapshot)
    def job(self, now: float, job_id: int) -> Job | None:
        """The job as it is stored, or None if it is missing. A value that does not decode (payload,
        result, partition key, metadata) does not raise: it reads as its raw bytes (metadata: as none),
        named in ``Job.damage``. [sc_job]"""

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
        """Up to ``limit`` jobs in ``state`` (of ``queue``, of ``name``, of ``shard`` when given), across
        shards, in the order of the state (``newest_first``: reversed): pending in claim order, scheduled by
        ETA, done by finish time, then id; running and failed by id. [sc_list_order]
        ``after``: only the jobs strictly past that job's place in this order (keyset paging: pass the
        last job of a page). ``errors.InvalidJob`` when that place can no longer be known (the job is gone,
        for a listing by time); a listing by id goes on from any id. [sc_list_after]"""

    def tagged_jobs(
        self,
        now: float,
        tags: tuple[str, ...],
        *,
        state: State | None,
        queue: str | None,
        name: str | None,
        after: int | None,
        limit: int,
    ) -> list[Job]:
        """Up to ``limit`` jobs that have every one of ``tags`` (checked tags, at least one: engine/tags.py),
        in any state or in ``state``, of ``queue``/``name`` when given, across shards, newest first (by id),
        with ids below ``after`` (keyset paging: pass the last job of a page; any id will do). The index of
        the first tag is walked, never the store: the cost is that tag's jobs. See contract/tags.py.
        [sc_tags_list]"""

    def counts(self, shard: int | None = None) -> dict[str, int]:
        """Jobs per state (every ``State`` value a key), ``cancelled`` (``cancel_counts``' first, within
        ``failed``) and ``total`` (puts ever), of ``shard`` or of the whole store, from counters (never a
        walk of the jobs). [sc_counts]"""

    def pending_count(self) -> int:
        """``counts()["pending"]``, as cheaply as the store can (the idle path asks it). [sc_counts]"""

    def queue_counts(self, now: float) -> dict[str, dict[str, int]]:
        """Per queue with live jobs, sorted by name: ``{"pending", "scheduled", "running"}`` counts, from
        counters. [sc_queue_counts]"""

    def oldest_pending(self, now: float) -> dict[str, float]:
        """Per queue with pending jobs, sorted by name: when its longest-waiting pending job became ready
        to claim (unix seconds: its put, or the end of its delay or backoff). O(queues x priorities in
        use), never a walk of the jobs. [sc_oldest_pending]"""

    def finished_totals(self) -> tuple[int, int]:
        """(jobs ever done, jobs ever dead-lettered), store-wide: the jobs in each state now plus those that
        left it since (vacuumed, purged, deleted, requeued), so both only grow. Counted by the operations
        that remove such jobs, never by ``complete`` or ``fail``: no write on the hot path. O(shards).
        [sc_finished_totals]"""

    def cancel_counts(self) -> tuple[int, int]:
        """(dead letters that are cancels now, jobs ever cancelled while they ran), store-wide.
        [sc_cancel_counts] A dead letter whose error type is ``job.CANCELLED`` counts from the ``fail`` that
        made it until it leaves the failed state (requeued, deleted, purged), then as one that left (the
        second only grows), in step with the state counts (the same transactions). O(shards)."""

    def unique_counts(self) -> tuple[int, int]:
        """(duplicates ever skipped, duplicates ever replaced) by a put's unique key, store-wide
        (``contract/uniqueness.py``). O(shards). [sc_unique_counts]"""

    def enqueued_totals(self) -> dict[str, int]:
        """Per queue that ever had one, sorted by name: jobs ever put into it (its share of ``counts()``'s
        ``total``), counted by the put's own transaction. O(shards x queues). [sc_enqueue_counts]"""

    # -- the throughput history (a ring of per-minute samples, written by ``engine/throughput.py``)
    def save_sample(self, sample: Sample, keep: int) -> bool:
        """Store ``sample`` unless its minute already has one (several samplers of one store: the first
        wins), and drop the samples older than ``keep`` minutes before it. One transaction. -> whether it
        was written. [sc_samples]"""

    def samples(self, since: int) -> list[Sample]:
        """The samples of minute ``since`` and later, oldest first. [sc_samples]"""

    def verify(self) -> list[str]:
        """Walk the whole store (not a hot path) and name every inconsistency between jobs, indexes and
        counters, and every flow value and lock record that does not decode. ``[]``: consistent. Reads
        only. [sc_verify]"""
