"""``LmdbStore``: the embedded store, a directory of LMDB environments (one per shard, and one for control).

It composes the pieces of this folder: the shards' atomic operations, the control environment (rate limits,
breakers, locks, the worker registry), the wake file, and group commit for durable puts. Every operation
is one LMDB write transaction per shard it touches, and hints waiting consumers after its commit when it may
have made a job claimable (``hints``). Shards are addressed by index (0 to ``shards`` - 1); a job's shard is
part of its id (``keys.shard_of``), so job operations take only the id.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...cancels import CancelOutcome
from ...errors import ConfigurationError, InvalidJob, QueueCorrupted, QueueError
from ...forks import fork_generation
from ...job import MAX_SHARDS, STATE_CODE, Job, State, shard_of
from ...jobspec import JobSpec
from ...validate import check_number
from ..types import Candidate, Claimed, ClaimOutcome, Head, NewJobs, Recovered, Sample, StoreInfo
from . import tagged
from .concurrency import LmdbConcurrency
from .control import Control
from .coordination import Coordination
from .env import CONTROL_DB_NAMES, REGISTRY, EnvOptions
from .groupcommit import GroupCommitter
from .history import History, enqueued_by_queue, finished_totals
from .meta import (
    CONTROL_DIR,
    LAYOUT_VERSION,
    META_FILE,
    WAKE_FILE,
    open_store_meta,
    read_store_meta,
    shard_dir,
)
from .pauses import LmdbPauses
from .reads import Listed
from .schedules import LmdbSchedules
from .shard import Shard
from .transfer import LmdbTransfer
from .wake import Waker
from .workflows import LmdbWorkflows

BATCH = 1000  # jobs one maintenance transaction handles at most
DEFAULT_MAP_SIZE = 1 << 30  # per shard; virtual address space, not disk (the file grows with the data)


@dataclass(frozen=True, slots=True)
class Unopenable:
    """Why a directory holds a store that cannot be opened as asked: ``foreign`` (the reason it is not a
    store this version reads), or its shard count when it differs from the one asked for."""

    foreign: str | None = None
    shards_on_disk: int | None = None


class LmdbStore:
    """The jobs of a ``Queue`` in a directory on this machine's disk. See the module docstring."""

    kind = "lmdb"
    offline_compact = True
    """``queue_compact`` can rewrite the store's files to their live size while no process has it open."""
    transactional_enqueue = False
    """A put cannot join the caller's database transaction: the store is not the application's database."""
    multi_host = False
    """Only processes on this machine can open the store (LMDB's locks live in shared memory)."""
    server_commits = False
    """A commit is this process's own work (with ``sync=True``, its fsync too): nothing to overlap it with."""

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        shards: int | None,
        map_size: int,
        map_size_max: int | None,
        sync: bool,
        writemap: bool,
        clock: Callable[[], float],
        rotation: int,
    ) -> LmdbStore:
        """Check the LMDB options (``ConfigurationError`` naming the bad one) and open the store at ``path``,
        creating it with ``shards`` shards (None: 6) if it does not exist."""
        if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                                   or not 1 <= shards <= MAX_SHARDS):  # fmt: skip
            raise ConfigurationError(f"shards must be an int from 1 to {MAX_SHARDS} or None, not {shards!r}")
        check_number("map_size", map_size, minimum=1 << 20, maximum=1 << 50)
        check_number("map_size_max", map_size_max, minimum=map_size, maximum=1 << 50, allow_none=True)
        options = EnvOptions(int(map_size), map_size_max, bool(sync), bool(writemap))
        return cls(_store_path(path), shards, options, clock, rotation)

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """Whether a store was made at ``path`` (its ``store.json`` is there), creating nothing."""
        return os.path.isfile(os.path.join(path, META_FILE))

    @staticmethod
    def unopenable(path: str, shards: int | None) -> Unopenable | None:
        """What stands between the directory ``path`` and a store this version opens with ``shards``
        (None: any count), read from what is on disk, creating nothing. None: nothing (or no store yet)."""
        try:
            meta = read_store_meta(path) if os.path.isdir(path) else None
        except (QueueError, OSError) as exc:  # StoreMismatch, or StoreError: its folders cannot be listed
            return Unopenable(foreign=str(exc))
        if meta is None:
            return None
        if meta.layout != LAYOUT_VERSION:
            return Unopenable(foreign=f"its layout version is {meta.layout}; this version reads layout "
                                      f"{LAYOUT_VERSION}")  # fmt: skip
        if shards is not None and shards != meta.shards:
            return Unopenable(shards_on_disk=meta.shards)
        return None

    def __init__(
        self, path: str, shards: int | None, options: EnvOptions, clock: Callable[[], float], rotation: int
    ) -> None:
        self.path = path
        self._options = options
        self.clock = clock  # read by the flow and lock operations inside their transactions
        meta = open_store_meta(path, shards)
        self.shards: int = meta.shards
        """How many shards the store has: each a writer of its own, claimed from in parallel."""
        self.hints = Waker(os.path.join(path, WAKE_FILE), self.shards)
        self._rotation = itertools.count(rotation)
        self._pending_cache: dict[int, tuple[int, int]] = {}  # shard -> (last txn id, pending jobs)
        self._scrub_from: list[bytes | None] = [None] * self.shards  # recover_expired's walk through records
        self._filters: dict[tuple[str, ...], list[bytes]] = {}  # queue filters as the shards seek them
        self._open()

    # ------------------------------------------------------------------ lifecycle

    def _open(self) -> None:
        envs = []
        try:
            for index in range(self.shards):
                envs.append(REGISTRY.acquire(shard_dir(self.path, index), self._options))
            control_env = REGISTRY.acquire(
                os.path.join(self.path, CONTROL_DIR),
                replace(self._options, map_size=1 << 24),
                CONTROL_DB_NAMES,
            )
        except BaseException:
            for env in envs:
                REGISTRY.release(env)
            raise
        self._control_env = control_env
        self.control = Control(control_env, self.clock)
        self.locks = Coordination(control_env, self.clock)
        self.pauses = LmdbPauses(control_env, self.clock, self.hints)
        self.schedules = LmdbSchedules(control_env)
        self.workflows = LmdbWorkflows(self)
        self.concurrency = LmdbConcurrency(lambda: self._shards)
        self.transfer = LmdbTransfer(lambda: self._shards, self.hints.notify)
        self._history = History(control_env)
        self._envs = envs
        self._shards = [Shard(index, env) for index, env in enumerate(envs)]
        self._committers = [GroupCommitter(self._durable_enqueue(shard)) for shard in self._shards]
        self._generation = fork_generation()

    def after_fork(self) -> None:
        """In a forked child: open the environments afresh (a parent's LMDB handles must not be used)."""
        self._open()

    @property
    def forked(self) -> bool:
        return self._generation != fork_generation()

    def close(self, flush: bool) -> None:
        """Release the environments (after a sync of each with ``flush``) and wake the waiting consumers."""
        self.hints.close()
        if self._generation == fork_generation():
            for env in [*self._envs, self._control_env]:
                if flush:
                    env.sync()
                REGISTRY.release(env)

    def info(self) -> StoreInfo:
        return StoreInfo(self.kind, self.path, self.shards)

    def maintain(self, flush: bool) -> None:
        """The store's own upkeep, run by the Queue's background thread every ``sync_interval``: reclaim the
        reader slots of dead processes, and (``flush``) write what is committed to disk, which bounds what
        an OS crash can take in the default (not ``sync``) mode: the shards', and the control data's (rate
        limits, breakers, locks, the worker registry)."""
        self.reader_check()
        if flush:
            for env in [*self._envs, self._control_env]:
                env.sync()

    def reader_check(self) -> int:
        """Reclaim LMDB reader slots of dead processes, in the shards and the control data. -> how many."""
        return sum(env.reader_check() for env in [*self._envs, self._control_env])

    def end_thread(self) -> None:
        """Nothing: LMDB keeps nothing per thread between transactions."""

    def borrowing(self, connection: Any) -> contextlib.AbstractContextManager[None]:
        raise AssertionError("the LMDB store cannot work in the caller's transaction")

    # ------------------------------------------------------------------ enqueue

    def _durable_enqueue(self, shard: Shard) -> Callable[[Sequence[NewJobs]], list[tuple[int, bool]]]:
        def commit(batches: Sequence[NewJobs]) -> list[tuple[int, bool]]:
            ids, wake = shard.enqueue(self.clock(), batches, durable=True)
            return [(job_id, wake) for job_id in ids]

        return commit

    def next_shard(self) -> int:
        """The next shard in turn, for a put that no key routes."""
        return next(self._rotation) % self.shards

    def put_one(self, now: float, shard: int, payload: bytes, spec: JobSpec) -> int:
        """Write one job to ``shard``. -> its id."""
        job_id, wake = self._shards[shard].put_one(now, payload, spec)
        if wake:
            self.hints.notify(shard)
        return job_id

    def enqueue(
        self, now: float, shard: int | None, batches: Sequence[NewJobs], durable: bool, connection: Any = None
    ) -> list[int]:
        """Write ``batches`` to ``shard`` in ONE transaction (all or nothing; a batch with a unique key that
        was seen writes nothing and gets the earlier job's id, ``unique_hit`` set). ``durable``: synced
        before this returns, through the shard's group commit, which writes the batches of concurrent
        callers in one transaction and one sync. ``shard=None`` (durable only): the store picks, a shard
        whose group commit is forming if there is one. -> the ids, batch after batch. (Group commit takes
        single jobs.) ``connection`` is never given (``transactional_enqueue`` is false)."""
        assert connection is None, "the LMDB store cannot write in the caller's transaction"
        if durable and len(batches) == 1 and len(batches[0].payloads) == 1:
            if shard is None:
                shard = next((i for i, c in enumerate(self._committers) if c.forming), None)
                if shard is None:
                    shard = self.next_shard()
            done = self._committers[shard].submit(batches)
            if any(wake for _id, wake in done):
                self.hints.notify(shard)
            return [job_id for job_id, _wake in done]
        if shard is None:
            shard = self.next_shard()
        ids, wake = self._shards[shard].enqueue(now, batches, durable=durable)
        if wake:
            self.hints.notify(shard)
        return ids

    # ------------------------------------------------------------------ claims

    def seek_filter(self, queues: tuple[str, ...] | None) -> list[bytes] | None:
        """``queues`` (sorted names, or None for all) as the shards' claims and looks take them."""
        if queues is None:
            return None
        found = self._filters.get(queues)
        if found is None:
            if len(self._filters) > 64:
                self._filters.clear()
            found = self._filters[queues] = [name.encode() for name in queues]
        return found

    def head(self, shard: int, now: float, queues: tuple[str, ...] | None) -> Head:
        """``shard``'s best claimable priority among ``queues`` and its earliest ETA (a read)."""
        return self._shards[shard].peek(now, self.seek_filter(queues))

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
        """Claim up to ``limit`` next jobs of ``shard`` in ONE transaction, none below ``min_priority``.
        Raises ``CorruptedJobQuarantined`` when the first job met does not decode (it was moved aside)."""
        one = self._shards[shard]
        env = one.env
        waited = env.waited_writes
        seek = None if queues is None else self.seek_filter(queues)
        found = one.claim_many(now, seek, lease_time, token, min_priority, worker, limit=limit)
        claimed, priority, eta, limited = found
        return ClaimOutcome(claimed, priority, eta, env.waited_writes != waited, limited)

    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None:
        """Claim exactly this job if it is pending (or scheduled, with ``scheduled_too``). None otherwise."""
        one = self._job_shard(job_id)
        if one is None:
            return None
        return one.claim_job(now, job_id, lease_time, token, scheduled_too=scheduled_too, worker=worker)

    def find_admissible(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        skip_queues: frozenset[str],
        skip_names: frozenset[str],
    ) -> tuple[Candidate | None, float | None]:
        """The best pending job of ``shard`` whose queue and name are not held back, and the earliest ETA."""
        skipped = frozenset(name.encode() for name in skip_queues)
        return self._shards[shard].peek_allowed(now, self.seek_filter(queues), skipped, skip_names)

    def promote_due(self, shard: int | None, now: float) -> int:
        """Scheduled jobs whose ETA passed become pending (``shard``, or all), in batches. -> how many."""
        shards = self._shards if shard is None else [self._shards[shard]]
        total = _in_batches(shards, lambda one: one.promote_due(now, BATCH))
        if total:
            self.hints.notify(shard)
        return total

    # ------------------------------------------------------------------ a claimed job

    def _shard(self, job_id: int) -> Shard:
        index = shard_of(job_id)
        if index >= self.shards:
            raise QueueCorrupted(f"job {job_id} names shard {index}, but the store has {self.shards}")
        return self._shards[index]

    def _job_shard(self, job_id: int) -> Shard | None:
        index = shard_of(job_id)
        return self._shards[index] if index < self.shards else None

    def heartbeat(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        """Extend the lease ``token`` holds to ``now + lease_time``. -> (the new expiry, cancel requested)."""
        return self._shard(job_id).touch(now, job_id, token, lease_time)

    def complete(self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool) -> None:
        """The job ``token`` holds is done, ``result`` kept; ``QueueCorrupted`` if the token lost it."""
        one = self._shard(job_id)
        one.complete(now, job_id, token, result, durable)
        if one.released:  # it released a workflow's node (workflows.py)
            self.workflows.hint(one)

    def complete_many(
        self, now: float, items: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]:
        """(job id, token, result) done, one transaction per shard. -> {job id: why} of those skipped."""
        by_shard: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        for item in items:
            by_shard.setdefault(shard_of(item[0]), []).append(item)
        skipped: dict[int, str] = {}
        for batch in by_shard.values():
            one = self._shard(batch[0][0])
            skipped.update(one.complete_many(now, batch, durable))
            if one.released:  # it released a workflow's node (workflows.py)
                self.workflows.hint(one)
        return skipped

    def fail(
        self,
        now: float,
        job_id: int,
        token: bytes,
        error: tuple[str | None, str | None, str | None],
        retry_at: float | None,
        durable: bool,
    ) -> State:
        """A failed attempt: scheduled again at ``retry_at``, or a dead letter (None). -> the new state."""
        one = self._shard(job_id)
        state = one.fail(now, job_id, token, error, retry_at=retry_at, durable=durable)
        self.hints.notify(one.index)
        return state

    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None:
        """Back to pending (scheduled until a ``retry_at`` after ``now``), not charged an attempt."""
        one = self._shard(job_id)
        one.release(now, job_id, token, retry_at)
        self.hints.notify(one.index)

    def save_metadata(self, now: float, job_id: int, token: bytes, metadata: bytes | None) -> None:
        """The running job ``token`` holds gets ``metadata``; ``QueueCorrupted`` if the token lost it."""
        self._shard(job_id).save_metadata(job_id, token, metadata)

    # ------------------------------------------------------------------ management

    def requeue(self, now: float, job_id: int) -> bool:
        one = self._job_shard(job_id)
        if one is None or not one.requeue(now, job_id):
            return False
        self.hints.notify(one.index)
        return True

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        """Remove a waiting job, mark a running one "cancel requested" (``manage.cancel``)."""
        one = self._job_shard(job_id)
        if one is None:
            return CancelOutcome.MISSING
        outcome = one.cancel(now, job_id, by)
        self.workflows.hint(one)
        return outcome

    def cancel_requested(self, job_id: int) -> bool:
        one = self._job_shard(job_id)
        return one is not None and one.cancel_requested(job_id)

    def delete(self, now: float, job_id: int, states: tuple[State, ...] | None) -> bool:
        """Remove the job if it is in one of ``states`` (None: any but running)."""
        one = self._job_shard(job_id)
        if one is None:
            return False
        if states is None:
            return one.delete(job_id, now=now)
        return one.delete(job_id, tuple(STATE_CODE[state] for state in states), now=now)

    def purge(self, now: float, state: State, cutoff: float | None) -> int:
        total = 0
        for one in self._shards:
            start: bytes | None = None
            while True:
                deleted, start = one.purge(state, cutoff, BATCH, start, now=now)
                total += deleted
                if start is None:
                    break
        return total

    def recover_expired(self, now: float) -> list[Recovered]:
        """Every running job whose lease expired before ``now``: a charged failed attempt (or, claimed in a
        batch, back uncharged), plus the next stretch of the walk that finds running jobs without a lease."""
        recovered: list[Recovered] = []
        for one in self._shards:
            while True:
                batch = one.recover_expired(now, BATCH)
                recovered.extend(batch)
                if len(batch) < BATCH:
                    break
            orphans, self._scrub_from[one.index] = one.scrub(now, self._scrub_from[one.index])
            recovered.extend(orphans)
        if recovered:
            self.hints.notify()
        return recovered

    def vacuum(self, now: float, cutoff: float, unique_ttl: float) -> int:
        """Delete done jobs finished before ``cutoff``, and forget unique keys older than ``unique_ttl``."""
        _in_batches(self._shards, lambda one: one.forget_unique(now, unique_ttl, BATCH))
        return _in_batches(self._shards, lambda one: one.vacuum(cutoff, BATCH, now=now))

    # ------------------------------------------------------------------ reads

    def job(self, now: float, job_id: int) -> Job | None:
        one = self._job_shard(job_id)
        return None if one is None else one.job(job_id, now=now)

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
        """Jobs in ``state`` in the order of its index across shards, from after job ``after``."""
        after_key = None
        if after is not None:
            one = self._job_shard(after)
            after_key = None if one is None else one.sort_key(state, after)
            if after_key is None:
                raise InvalidJob(
                    f"after={after}: that job no longer exists, so the listing cannot go on from it; "
                    f"list again from the start"
                )
        found: list[Listed] = []
        for one in self._shards if shard is None else [self._shards[shard]]:
            found.extend(one.list_jobs(state, after_key=after_key, limit=limit, newest_first=newest_first,
                                       queue=queue, name=name, now=now))  # fmt: skip
        found.sort(key=lambda item: item.sort_key, reverse=newest_first)
        return [listed.job() for listed in found[:limit]]  # decode only what is returned

    tagged_jobs = tagged.tagged_jobs  # Store.tagged_jobs (tagged.py)

    def counts(self, shard: int | None = None) -> dict[str, int]:
        """Jobs per state and ``total`` puts ever, of ``shard`` or of the whole store. No scan."""
        if shard is not None:
            return self._shards[shard].counts()
        out: dict[str, int] = {state.value: 0 for state in State}
        out["total"] = out["cancelled"] = 0
        for one in self._shards:
            for key, value in one.counts().items():
                out[key] += value
        return out

    def pending_count(self) -> int:
        """Pending jobs, re-reading only the shards that committed since the last count."""
        total = 0
        cache = self._pending_cache
        for one in self._shards:
            txnid = one.env.last_txnid()
            cached = cache.get(one.index)
            if cached is None or cached[0] != txnid:
                cached = (txnid, one.counts()["pending"])
                cache[one.index] = cached
            total += cached[1]
        return total

    def queue_counts(self, now: float) -> dict[str, dict[str, int]]:
        """Per queue: pending, scheduled and running jobs, from counters (inexact ones rebuilt first)."""
        total: dict[str, dict[str, int]] = {}
        for one in self._shards:
            for queue, counts in one.queue_counts(now=now).items():
                into = total.setdefault(queue, {"pending": 0, "scheduled": 0, "running": 0})
                for state, count in counts.items():
                    into[state] += count
        return dict(sorted(total.items()))

    def oldest_pending(self, now: float) -> dict[str, float]:
        """Per queue with pending jobs: when its longest-waiting one became ready to claim (unix seconds).
        O(shards x queues x priorities in use): one seek each, whatever the number of jobs."""
        oldest: dict[str, int] = {}
        for one in self._shards:
            for queue, ready_us in one.oldest_ready().items():
                oldest[queue] = min(oldest.get(queue, ready_us), ready_us)
        return {queue: oldest[queue] / 1_000_000 for queue in sorted(oldest)}

    def finished_totals(self) -> tuple[int, int]:
        """(jobs ever done, jobs ever dead-lettered): O(shards), see ``history.py``."""
        done = failed = 0
        for one in self._shards:
            shard_done, shard_failed = finished_totals(one)
            done, failed = done + shard_done, failed + shard_failed
        return done, failed

    def cancel_counts(self) -> tuple[int, int]:
        """(cancelled dead letters now, jobs ever cancelled while they ran): O(shards)."""
        now = ever = 0
        for one in self._shards:
            shard_now, shard_ever = one.cancel_counts()
            now, ever = now + shard_now, ever + shard_ever
        return now, ever

    def unique_counts(self) -> tuple[int, int]:
        """(duplicates ever skipped, ever replaced): O(shards)."""
        pairs = [one.unique_counts() for one in self._shards]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def enqueued_totals(self) -> dict[str, int]:
        """Per queue, sorted by name: jobs ever put into it. O(shards x queues)."""
        total: dict[str, int] = {}
        for one in self._shards:
            for queue, count in enqueued_by_queue(one).items():
                total[queue] = total.get(queue, 0) + count
        return dict(sorted(total.items()))

    def save_sample(self, sample: Sample, keep: int) -> bool:
        return self._history.save_sample(sample, keep)

    def samples(self, since: int) -> list[Sample]:
        return self._history.samples(since)

    def verify(self) -> list[str]:
        problems: list[str] = []
        for one in self._shards:
            problems.extend(one.verify())
        return problems + self.control.verify() + self.locks.verify()


def _in_batches(shards: Sequence[Shard], step: Callable[[Shard], int]) -> int:
    """Repeat ``step`` (one transaction of at most BATCH jobs) on each shard until a step does less than a
    full batch. -> the total done."""
    total = 0
    for one in shards:
        while True:
            count = step(one)
            total += count
            if count < BATCH:
                break
    return total


def _store_path(path: Any) -> str:
    """The store's directory as a real path. An empty path (an unset environment variable) is refused:
    it would put the store in whatever the current directory is."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigurationError(f"path must be a str or a path-like object naming a directory, not {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(
            f"path must name the store's directory, not {text!r}: an empty path would put the store in the "
            f"current directory (an unset environment variable?)"
        )
    if "\x00" in text:
        raise ConfigurationError(f"path cannot contain a NUL character: {text!r}")
    return os.path.realpath(text)
