"""``Queue``: validation, routing across shards, waiting, completing records, and the background maintenance.

Every state change is delegated to one ``Shard`` method (one LMDB transaction). This module owns policy:
which shard a job goes to, which shard a consumer claims from (never passing over a higher priority),
backoff, the clock, waking consumers, and the recovery/vacuum/sync thread. A ``Record`` (record.py) ends
its job through the Queue that claimed it (the ``RecordOwner`` methods ``_ack``, ``_nack``, ``_release``,
``_touch``); rate limits and breakers are the ``Flow`` member's (flow.py).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import logging
import os
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from . import codec
from .errors import (
    ConfigurationError,
    InvalidJob,
    QueueClosed,
    QueueCorrupted,
    QueueEmpty,
    UnknownQueue,
)
from .events import ALERT, JOB_ENQUEUED, JOB_FAILED, JOB_RETRIED, JOB_STARTED, JOB_SUCCEEDED, Events
from .flow import Flow
from .forks import fork_generation
from .job import MAX_SHARDS, PRIORITY_MAX, STATE_CODE, Job, State, shard_of
from .jobspec import JobSpec
from .ratelimit import Rate
from .record import Record
from .retry import decide
from .stores.lmdb.control import Control
from .stores.lmdb.coordination import Coordination
from .stores.lmdb.env import CONTROL_DB_NAMES, REGISTRY, EnvOptions
from .stores.lmdb.groupcommit import GroupCommitter
from .stores.lmdb.meta import CONTROL_DIR, WAKE_FILE, open_store_meta, shard_dir
from .stores.lmdb.reads import Listed
from .stores.lmdb.shard import Shard
from .stores.lmdb.wake import SLOT, Waker
from .stores.types import CorruptedJobQuarantined, LockHolder, NewJobs, Recovered, WorkerInfo, id_bytes
from .validate import (
    MAX_NAME,
    MAX_RETRIES_LIMIT,
    MAX_SECONDS,
    bad_character,
    check_filter,
    check_number,
    check_put,
    describe_error,
    parse_state,
    put_defaults,
    ready_at,
    validate_queue_name,
)

DEFAULT_MAP_SIZE = 1 << 30  # per shard; virtual address space, not disk (the file grows with the data)
MAX_IDLE_WAIT = 1.0  # an idle get() re-checks the store at least this often, hint or not
BATCH = 1000
PREFERENCE_RUN = 32  # claims a consumer makes from its preferred shard before it moves to the next
UNKNOWN = PRIORITY_MAX + 1  # a view's bound for a shard that was hinted and not read yet: above any job
_SLOT_BITS = SLOT * 8
_SLOT_MASK = (1 << _SLOT_BITS) - 1
_PLAIN_NUMBERS = (int, float)  # exactly these types (not bool): the checks that need no function call

Clock = Callable[[], float]
logger = logging.getLogger("queue_max_django.engine")


SPEC_CACHE_MAX = 256  # JobSpecs kept for option sets used before (no delay, eta or partition key)


@dataclass(slots=True)
class _View:
    """One consumer thread's picture of the shards: each shard's best claimable priority (an upper bound
    until a wake hint says something arrived) and the earliest ETA of a scheduled job."""

    allowed: list[bytes] | None
    priorities: list[int | None]
    next_eta: float | None
    slots: bytes | None  # the wake file's slots when the shards were read (see wake.py), None: unknown
    etas: list[float | None]  # each shard's earliest ETA


class Queue:
    """A persistent, sharded, crash-safe job queue in a directory. See docs/reference/engine.md."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shards: int | None = None,
        lease_time: float = 30.0,
        max_retries: int = 3,
        retry_backoff: float = 1.0,
        retry_backoff_max: float = 3600.0,
        result_ttl: float = 86400.0,
        max_payload_bytes: int = 2**20,
        queues: Iterable[str] | None = None,
        map_size: int = DEFAULT_MAP_SIZE,
        map_size_max: int | None = None,
        sync: bool = False,
        writemap: bool = False,
        do_recover: bool = True,
        recover_interval: float = 15.0,
        do_vacuum: bool = True,
        vacuum_interval: float = 300.0,
        sync_interval: float = 1.0,
        alert_threshold: int | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        worker_id: str | None = None,
    ) -> None:
        if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)
                                   or not 1 <= shards <= MAX_SHARDS):  # fmt: skip
            raise ConfigurationError(f"shards must be an int from 1 to {MAX_SHARDS} or None, not {shards!r}")
        check_number("lease_time", lease_time, minimum=0.001)
        if type(max_retries) is not int or not 0 <= max_retries <= MAX_RETRIES_LIMIT:
            raise ConfigurationError(
                f"max_retries must be an int from 0 to {MAX_RETRIES_LIMIT}, not {max_retries!r}"
            )
        check_number("retry_backoff", retry_backoff, minimum=0)
        check_number("retry_backoff_max", retry_backoff_max, minimum=0)
        check_number("result_ttl", result_ttl, minimum=0)
        check_number("max_payload_bytes", max_payload_bytes, minimum=16, maximum=1 << 30)
        check_number("map_size", map_size, minimum=1 << 20, maximum=1 << 50)
        check_number("map_size_max", map_size_max, minimum=map_size, maximum=1 << 50, allow_none=True)
        check_number("recover_interval", recover_interval, minimum=0.01)
        check_number("vacuum_interval", vacuum_interval, minimum=0.01)
        check_number("sync_interval", sync_interval, minimum=0.01)
        self.path = _store_path(path)
        self.lease_time = float(lease_time)
        self.max_retries = max_retries
        self.retry_backoff = float(retry_backoff)
        self.retry_backoff_max = float(retry_backoff_max)
        self.result_ttl = float(result_ttl)
        self.max_payload_bytes = int(max_payload_bytes)
        self.queues: frozenset[str] | None = None
        if queues is not None:
            if isinstance(queues, str):
                raise ConfigurationError("queues must be a list of names, not one string")
            try:
                self.queues = frozenset(validate_queue_name(name) for name in queues)
            except InvalidJob as exc:
                raise ConfigurationError(f"queues: {exc}") from None
            except TypeError:
                raise ConfigurationError(f"queues must be a list of names, not {queues!r}") from None
        if clock is not None and not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning unix seconds, not {clock!r}")
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            raise ConfigurationError(f"rng must be a random.Random, not {rng!r}")
        self.sync = bool(sync)
        self.writemap = bool(writemap)
        if alert_threshold is not None and (type(alert_threshold) is not int or alert_threshold < 0):
            raise ConfigurationError(f"alert_threshold must be None or an int >= 0, not {alert_threshold!r}")
        self.alert_threshold = alert_threshold
        if worker_id is not None and (not isinstance(worker_id, str) or not 0 < len(worker_id) <= MAX_NAME
                                      or bad_character(worker_id) is not None):  # fmt: skip
            raise ConfigurationError(
                f"worker_id must be None or a str of 1 to {MAX_NAME} characters without control characters "
                f"or lone surrogates, not {worker_id!r}"
            )
        self.worker_id = worker_id  # recorded in each job this Queue claims (Job.worker_ids)
        self.events = Events()  # callbacks: see events.py; the Django layer turns them into signals
        self._alert_quiet_until = 0.0
        self._pending_cache: dict[int, tuple[int, int]] = {}  # shard -> (last txn id, pending jobs)
        self._clock: Clock = clock or time.time
        self._rng = rng or random.Random()
        self._do_recover = do_recover
        self._do_vacuum = do_vacuum
        self._intervals = {"recover": float(recover_interval), "vacuum": float(vacuum_interval),
                           "sync": float(sync_interval)}  # fmt: skip
        self._options = EnvOptions(int(map_size), map_size_max, self.sync, self.writemap)
        meta = open_store_meta(self.path, shards)
        self.shard_count = meta.shards
        self._lock = threading.Lock()
        self._closed = False
        self._rotation = itertools.count(self._rng.randrange(self.shard_count))
        self._waker = Waker(os.path.join(self.path, WAKE_FILE), self.shard_count)
        self._stop = threading.Event()
        self._maintenance: threading.Thread | None = None
        self._local = threading.local()  # per consumer thread: its view of the shards' heads
        self._consumer_numbers = itertools.count()
        self._valid_queues: set[str] = set()  # queue names already validated
        self._valid_names: set[str] = set()  # job names already validated
        self._specs: dict[tuple[Any, ...], JobSpec] = {}  # see _job_options
        self._scrub_from: list[bytes | None] = [None] * self.shard_count  # recover()'s walk through records
        self._open_shards()

    # ------------------------------------------------------------------ lifecycle

    def _open_shards(self) -> None:
        envs = []
        try:
            for index in range(self.shard_count):
                envs.append(REGISTRY.acquire(shard_dir(self.path, index), self._options))
        except BaseException:
            for env in envs:
                REGISTRY.release(env)
            raise
        try:
            control_env = REGISTRY.acquire(
                os.path.join(self.path, CONTROL_DIR),
                replace(self._options, map_size=1 << 24),
                CONTROL_DB_NAMES,
            )
        except BaseException:
            for env in envs:
                REGISTRY.release(env)
            raise
        self._control = Control(control_env, self._clock)
        self._coordination = Coordination(control_env, self._clock)
        self._flow = Flow(self._control, self._clock)
        self._envs = envs
        self._shards = [Shard(index, env) for index, env in enumerate(envs)]
        self._committers = [GroupCommitter(self._durable_enqueue(shard)) for shard in self._shards]
        self._generation = fork_generation()
        self._local = threading.local()
        if self._do_recover or self._do_vacuum or not self.sync:
            self._stop = threading.Event()
            self._maintenance = threading.Thread(
                target=self._maintain, name=f"queue-max-maintenance:{self.path}", daemon=True
            )
            self._maintenance.start()

    def _durable_enqueue(self, shard: Shard) -> Callable[[Sequence[NewJobs]], list[tuple[int, bool]]]:
        def commit(batches: Sequence[NewJobs]) -> list[tuple[int, bool]]:
            ids, wake = shard.enqueue(self._clock(), batches, durable=True)
            return [(job_id, wake) for job_id in ids]

        return commit

    def _live(self) -> list[Shard]:
        if self._closed:
            raise QueueClosed(f"the queue at {self.path!r} is closed")
        if self._generation != fork_generation():
            with self._lock:
                if self._generation != fork_generation():
                    self._open_shards()  # a forked child: never reuse the parent's handles
        return self._shards

    def _shard(self, job_id: int) -> Shard:
        shards = self._live()
        index = shard_of(job_id)
        if index >= len(shards):
            raise QueueCorrupted(f"job {job_id} names shard {index}, but the store has {len(shards)}")
        return shards[index]

    def close(self) -> None:
        """Stop the background thread, wake waiting consumers, release the environments. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._waker.close()
        thread = self._maintenance
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=10)
        if self._generation == fork_generation():
            for env in [*self._envs, self._control.env]:
                if not self.sync:
                    env.sync()
                REGISTRY.release(env)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Queue {self.path!r} shards={self.shard_count}{' closed' if self._closed else ''}>"

    # ------------------------------------------------------------------ put

    def _job_options(
        self,
        *,
        priority: int,
        delay: float | None,
        eta: float | _dt.datetime | None,
        queue: str,
        name: str | None,
        max_retries: int | None,
        timeout: float | None,
        partition_key: Any,
        now: float,
    ) -> JobSpec:
        """Validate everything but the payload. Raises ``InvalidJob``; runs on every put, so the common
        case (options used before, no delay) costs a few type checks and a dict lookup."""
        if (
            delay is None and eta is None and timeout is None and partition_key is None
            and type(priority) is int and (max_retries is None or type(max_retries) is int)
        ):  # fmt: skip
            # Options seen before: their JobSpec was validated then (the types checked here keep a bool
            # or a float from matching an equal int's entry).
            spec = self._specs.get((queue, name, priority, max_retries, None))
            if spec is not None:
                return spec
        check_put(priority=priority, queue=queue, name=name, max_retries=max_retries, timeout=timeout,
                  partition_key=partition_key, queues=self.queues, now=now, valid_queues=self._valid_queues,
                  valid_names=self._valid_names)  # fmt: skip
        given_max_retries = max_retries  # None (the Queue's default) is its own cache entry
        if max_retries is None:
            max_retries = self.max_retries
        if partition_key is None and delay is None and eta is None:
            # Validated values only: priority and max_retries ints (not bools; max_retries None for the
            # Queue's default: looked up as given, above), timeout a number, so equal keys mean equal
            # records (timeout 1 and 1.0 share one: both are stored as 1.0).
            key = (queue, name, priority, given_max_retries, timeout)
            spec = self._specs.get(key)
            if spec is None:
                if len(self._specs) >= SPEC_CACHE_MAX:
                    self._specs.clear()
                spec = self._specs[key] = JobSpec(
                    queue, name, priority, None, max_retries, _seconds(timeout), None
                )
            return spec
        ready = None if delay is None and eta is None else ready_at(delay, eta, now)
        return JobSpec(queue, name, priority, ready, max_retries, _seconds(timeout), partition_key)

    def _pack_payload(self, payload: Any) -> bytes:
        return codec.pack_value(payload, what="payload", limit=self.max_payload_bytes)

    def _route(self, partition_key: Any) -> int:
        if partition_key is None:
            return next(self._rotation) % self.shard_count
        return zlib.crc32(msgpack.packb(partition_key, use_bin_type=True)) % self.shard_count

    def _route_durable(self, partition_key: Any) -> int:
        """Durable puts without a partition key join a batch that is already forming, if any: an fsync
        shared by more puts is the whole point of group commit."""
        if partition_key is None:
            for index, committer in enumerate(self._committers):
                if committer.forming:
                    return index
        return self._route(partition_key)

    def put(
        self,
        payload: Any,
        *,
        priority: int = 0,
        delay: float | None = None,
        eta: float | _dt.datetime | None = None,
        queue: str = "default",
        name: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        partition_key: Any = None,
        unique_key: str | None = None,
    ) -> int:
        """Store one job. -> its id. Raises ``InvalidJob`` (and writes nothing) on bad input.

        ``unique_key``: put this job only if no put used the same key (``vacuum()`` forgets keys used more
        than ``result_ttl`` ago, and a day at least); otherwise write nothing and return the id of the job
        that key made (checked in the same transaction as the write, so it holds across processes and
        crashes; the periodic scheduler relies on it)."""
        shards = self._live()
        now = self._clock()
        spec = self._job_options(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=now,
        )  # fmt: skip
        unique = None
        if unique_key is not None:
            unique = id_bytes("unique_key", unique_key, MAX_NAME)
            if partition_key is not None:  # the key must route the job, or another shard would not know it
                raise InvalidJob("give unique_key or partition_key, not both")
            partition_key = unique_key  # one key, one shard: the check and the write meet there
        packed = self._pack_payload(payload)
        unique_hit = False
        if self.sync:
            index = self._route_durable(partition_key)
            job = NewJobs((packed,), spec, unique)
            job_id, wake = self._committers[index].submit([job])[0]
            unique_hit = job.unique_hit
        elif unique is None:
            index = self._route(partition_key)
            job_id, wake = shards[index].put_one(now, packed, spec)
        else:
            index = self._route(partition_key)
            job = NewJobs((packed,), spec, unique)
            ids, wake = shards[index].enqueue(now, [job])
            job_id, unique_hit = ids[0], job.unique_hit
        if wake:
            self._waker.notify(index)
        if self._watching and not unique_hit:
            self._after_put([job_id], queue, name)
        return job_id

    def put_many(
        self,
        payloads: Iterable[Any],
        *,
        priority: int = 0,
        delay: float | None = None,
        eta: float | _dt.datetime | None = None,
        queue: str = "default",
        name: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        partition_key: Any = None,
    ) -> list[int]:
        """Store many jobs with the same options in ONE shard and ONE transaction: all or nothing."""
        spec = self._job_options(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=self._clock(),
        )  # fmt: skip
        return self._put_batch(self._route(partition_key), payloads, spec)

    def _put_batch(self, shard: int, payloads: Iterable[Any], spec: JobSpec) -> list[int]:
        packed = codec.pack_values(payloads, what="payload", limit=self.max_payload_bytes)
        return self._write_batch(shard, packed, spec)

    def _write_batch(self, shard: int, packed: list[bytes], spec: JobSpec) -> list[int]:
        """Store packed payloads in one shard, in one transaction. -> their ids."""
        shards = self._live()
        if not packed:
            return []
        ids, wake = shards[shard].enqueue(self._clock(), [NewJobs(packed, spec)], durable=self.sync)
        if wake:
            self._waker.notify(shard)
        if self._watching:
            self._after_put(ids, spec.queue, spec.name)
        return ids

    def put_parts(
        self,
        payloads: Iterable[Any],
        *,
        part_size: int | None = None,
        priority: int = 0,
        delay: float | None = None,
        eta: float | _dt.datetime | None = None,
        queue: str = "default",
        name: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        partition_key: Any = None,
    ) -> list[int]:
        """Store many jobs with the same options in parts spread over the store, so that consumers drain
        them in parallel: ``part_size`` jobs a part (default: as many parts as the store has shards),
        each part ONE transaction, all or nothing, the parts on the shards in turn (from the next of the
        Queue's rotation; every part on the key's shard with ``partition_key``). The options and every
        payload are checked before any part is written. -> the ids, in the payloads' order."""
        if part_size is not None and (type(part_size) is not int or part_size < 1):
            raise InvalidJob(f"part_size must be None or an int >= 1, not {part_size!r}")
        spec = self._job_options(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=self._clock(),
        )  # fmt: skip
        packed = codec.pack_values(payloads, what="payload", limit=self.max_payload_bytes)
        count = self.shard_count
        size = part_size or max(1, -(-len(packed) // count))
        first = self._route(partition_key)
        step = 0 if partition_key is not None else 1
        ids: list[int] = []
        for part, start in enumerate(range(0, len(packed), size)):
            ids += self._write_batch((first + part * step) % count, packed[start : start + size], spec)
        return ids

    def put_many_to_shard(self, shard: int, payloads: Iterable[Any], **options: Any) -> list[int]:
        """``put_many`` into one given shard (``.map`` spreads a batch over the shards with this)."""
        if type(shard) is not int or not 0 <= shard < self.shard_count:
            raise InvalidJob(f"shard must be from 0 to {self.shard_count - 1}, not {shard!r}")
        checked = self._job_options(now=self._clock(), **put_defaults(options))
        return self._put_batch(shard, payloads, checked)

    # ------------------------------------------------------------------ get

    def _queue_filter(self, queues: Iterable[str] | None) -> list[bytes] | None:
        if queues is None:
            if self.queues is None:
                return None
            return sorted(name.encode() for name in self.queues)
        if isinstance(queues, str):
            queues = [queues]
        names = []
        for name in queues:
            validate_queue_name(name)
            if self.queues is not None and name not in self.queues:
                raise UnknownQueue(f"unknown queue {name!r}: this Queue serves {sorted(self.queues)}")
            names.append(name.encode())
        return sorted(set(names))

    def _look(
        self, shards: list[Shard], now: float, allowed: list[bytes] | None, previous: _View | None = None
    ) -> _View:
        """Read every shard's head (one short read transaction each) and promote due scheduled jobs.
        With ``previous``, only the shards whose wake slot changed since it was taken are looked at again
        (every commit that can raise a head writes its shard's slot, or slot 0 for all); the others keep
        what ``previous`` saw, which stays an upper bound: heads only fall without a hint. When exactly one
        shard's slot changed it is not read at all: it becomes UNKNOWN, the highest bound there is, so the
        next claim goes there first and learns its head and its ETA in the claim's own transaction."""
        if previous is not None and previous.allowed != allowed:
            previous = None
        while True:
            slots = self._waker.slots()
            old = None if previous is None else previous.slots
            if previous is None or old is None or slots is None or len(old) != len(slots):
                # Nothing to compare with (first look, a slot first written, the file unreadable): read all.
                view = _View(allowed, [None] * len(shards), None, slots, [None] * len(shards))
                reread = shards
            else:
                # The changed slots are the non-zero 8-byte groups of old XOR new: one big-int operation.
                diff = int.from_bytes(old, "little") ^ int.from_bytes(slots, "little")
                view = previous  # updated in place; its slots last, once the shards that changed are read
                if diff & _SLOT_MASK:  # slot 0 ("any shard") changed: read all
                    reread = shards
                elif not diff:
                    reread = []
                else:
                    low = ((diff & -diff).bit_length() - 1) // _SLOT_BITS
                    high = (diff.bit_length() - 1) // _SLOT_BITS
                    if low == high:  # one shard: claim there next and learn its head then
                        view.priorities[low - 1] = UNKNOWN
                        view.etas[low - 1] = None
                        reread = []
                    else:
                        reread = [shards[slot - 1] for slot in range(low, high + 1)
                                  if diff >> (slot * _SLOT_BITS) & _SLOT_MASK]  # fmt: skip
            for shard in reread:
                head = shard.peek(now, allowed)
                view.priorities[shard.index], view.etas[shard.index] = head.priority, head.next_eta
            view.slots = slots
            etas = view.etas
            view.next_eta = min([eta for eta in etas if eta is not None], default=None)
            if view.next_eta is None or view.next_eta > now:
                return view
            for index, eta in enumerate(etas):
                if eta is not None and eta <= now:
                    shards[index].promote_due(now)
            previous = None

    def _try_claim(self, allowed: list[bytes] | None, limit: int = 1) -> tuple[list[Record], float | None]:
        """Claim the highest-priority job(s) across shards. -> (records, possibly none; the earliest future
        ETA). More than one (``limit``) only when no rate limit or breaker is set: those admit job by job.

        Each consumer thread keeps a view of the shards' head priorities. Heads only fall when others
        claim; anything that can raise one (a put, a retry, a release, a requeue, recovery) writes the wake
        hint, so the view is re-read whenever a hint arrived or an ETA passed. A claim passes the best
        priority the other shards may hold, and takes nothing below it (the view is refreshed if its own
        head is lower): no job is ever taken over a higher-priority one seen by the view."""
        shards = self._live()
        flow = self._flow
        state = flow.state()
        if state is not None:
            held = flow.fast_admission(state)
            if held is None:
                claimed, next_eta = flow.claim(shards, allowed, state, self.lease_time, self.worker_id)
                return ([] if claimed is None else [Record(self, claimed)]), next_eta
            records: list[Record] = []
            try:
                records, next_eta = self._claim_best(shards, allowed, 1)
            finally:
                flow.settle(held, (records[0].queue, records[0].name) if records else None)
            return records, next_eta
        return self._claim_best(shards, allowed, limit)

    def _claim_best(
        self, shards: list[Shard], allowed: list[bytes] | None, limit: int
    ) -> tuple[list[Record], float | None]:
        count = len(shards)
        local = self._local
        view: _View | None = getattr(local, "view", None)
        now = self._clock()
        changed = self._waker.changed()  # always asked first: it also starts this thread's watch
        if (
            changed
            or view is None
            or view.allowed != allowed
            or (view.next_eta is not None and view.next_eta <= now)
        ):
            view = local.view = self._look(shards, now, allowed, view)
        for _attempt in range(4 * count + 4):
            priorities = view.priorities
            known = [priority for priority in priorities if priority is not None]
            if not known:
                return [], view.next_eta
            # The best priority, on the first shard holding it from this thread's preferred one on; and
            # the best that any other shard may hold (the claim takes nothing below it).
            best_priority = max(known)
            start = self._preferred_shard(local, count)
            try:
                best = priorities.index(best_priority, start)
            except ValueError:
                best = priorities.index(best_priority)
            known.remove(best_priority)
            runner_up = max(known) if known else None
            env = shards[best].env
            waited = env.waited_writes
            try:
                outcome = shards[best].claim_many(
                    now, allowed, self.lease_time, os.urandom(16), runner_up, self.worker_id, limit=limit
                )
            except CorruptedJobQuarantined as exc:
                local.view = None
                raise QueueCorrupted(
                    f"job {exc.job_id} could not be delivered: {exc.reason}. It was moved to the dead "
                    f"letters (error type 'Corrupted'); the queue goes on with the other jobs."
                ) from None
            # That shard's head and earliest ETA now, exactly: they were read in the claim's transaction.
            claimed, priorities[best], eta = outcome
            if view.etas[best] != eta:
                view.etas[best] = eta
                view.next_eta = min((e for e in view.etas if e is not None), default=None)
                if eta is not None and eta <= now:  # scheduled jobs there are due: make them pending
                    shards[best].promote_due(now)
                    priorities[best] = UNKNOWN
            if env.waited_writes != waited and count > 1:
                local.base += self._rng.randrange(1, count)  # someone else writes here: prefer another shard
            if claimed:
                return [Record(self, job) for job in claimed], view.next_eta
        local.view = None
        return [], view.next_eta

    def _preferred_shard(self, local: threading.local, count: int) -> int:
        """Where this consumer thread looks first among shards of equal priority. Each thread has its own
        shard and stays on it for a run of claims before moving to the next, so that concurrent consumers
        (threads or processes) mostly write to different shards instead of queueing on one write lock, and
        no shard waits longer than ``count`` runs. A claim that had to wait for the shard's write lock
        moves the thread to a random other shard (``_claim_best``): consumers that drift onto one shard
        part again."""
        base = getattr(local, "base", None)
        if base is None:
            # Consecutive worker processes have consecutive pids, and each thread of a process takes the
            # next number: consumers start on different shards as long as there are shards enough.
            base = local.base = os.getpid() + next(self._consumer_numbers)
            local.claims = 0
        local.claims += 1
        return int(base + local.claims // PREFERENCE_RUN) % count

    def get(self, timeout: float | None = None, *, queues: Iterable[str] | None = None) -> Record:
        """Claim the next job (highest priority first). ``timeout=None`` blocks; 0 looks once.
        Raises ``QueueEmpty`` when no job came in time."""
        return self._get(1, timeout, queues)[0]

    def get_many(
        self, limit: int, timeout: float | None = None, *, queues: Iterable[str] | None = None
    ) -> list[Record]:
        """Claim up to ``limit`` jobs at once: the next ones of one shard, in one transaction, never one
        below a priority another shard holds. Each is an ordinary ``Record`` with its own lease (renew
        them with ``touch()`` if working through them takes long). With a rate limit or circuit breaker
        set, one job at a time is admitted, so this returns one. Waits like ``get()``; ``QueueEmpty``."""
        if type(limit) is not int or limit < 1:
            raise InvalidJob(f"limit must be an int >= 1, not {limit!r}")
        return self._get(limit, timeout, queues)

    def _get(self, limit: int, timeout: float | None, queues: Iterable[str] | None) -> list[Record]:
        if timeout is not None and not (type(timeout) in _PLAIN_NUMBERS and 0 <= timeout <= MAX_SECONDS):
            check_number("timeout", timeout, minimum=0, error=InvalidJob)  # raises, or accepts an odd type
        allowed = None if queues is None and self.queues is None else self._queue_filter(queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            records, next_eta = self._try_claim(allowed, limit)
            if records:
                self._waker.reset_poll()
                if self.events.listening(JOB_STARTED):
                    for record in records:
                        self.events.emit(JOB_STARTED, job_id=record.job_id, queue=record.queue,
                                         name=record.name, attempt=record.attempts)  # fmt: skip
                return records
            wait = MAX_IDLE_WAIT
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueEmpty(f"no job within {timeout} s")
                wait = min(wait, remaining)
            if next_eta is not None:
                wait = min(wait, max(next_eta - self._clock(), 0.0005))
            self._waker.wait(wait)
            self._local.view = None  # whatever woke us, look at the store afresh

    def ack_many(self, done: Sequence[tuple[Record, Any]]) -> dict[int, str]:
        """Acknowledge many (record, result) pairs: one transaction per shard. A record already finished,
        or that no longer holds its job (lease expired and recovered), is skipped; the others complete.
        Results are checked before anything is written (``PayloadNotSerializable``/``PayloadTooLarge``, and
        ``InvalidJob`` for a job listed twice). -> {job id: why} for the skipped ones."""
        by_shard: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        skipped: dict[int, str] = {}
        if len({record.job_id for record, _result in done}) != len(done):
            raise InvalidJob("ack_many() was given the same job twice: each job can be acked once")
        for record, result in done:
            if record.finished:
                skipped[record.job_id] = "this record was already acked, nacked or released"
                continue
            by_shard.setdefault(shard_of(record.job_id), []).append(
                (record.job_id, record._token, None if result is None else self._pack_result(result))
            )
        shards = self._live()
        for index, items in by_shard.items():
            skipped.update(shards[index].complete_many(self._clock(), items, self.sync))
        flow = self._flow.state()  # read once for the batch: breakers only matter when there are some
        breakers = flow is not None and bool(flow.breakers)
        for record, result in done:
            if record.job_id not in skipped and not record.finished:
                self._succeeded(record, result, breakers)
        return skipped

    # ------------------------------------------------------------------ a Record's owner (record.py)

    def _ack(self, record: Record, result: Any) -> None:
        job_id = record.job_id
        packed = None if result is None else self._pack_result(result)
        self._shard(job_id).complete(self._clock(), job_id, record._token, packed, self.sync)
        self._succeeded(record, result, True)

    def _succeeded(self, record: Record, result: Any, count_outcome: bool) -> None:
        record.finished = True
        if count_outcome:
            self._flow.record_outcome(record.queue, record.name, True)
        if self.events.listening(JOB_SUCCEEDED):
            self.events.emit(JOB_SUCCEEDED, job_id=record.job_id, queue=record.queue, name=record.name,
                             result=result)  # fmt: skip

    def _pack_result(self, result: Any) -> bytes:
        return codec.pack_value(result, what="result", limit=self.max_payload_bytes)

    def _nack(
        self, record: Record, error: BaseException | str | None, delay: float | None, permanent: bool
    ) -> State:
        if delay is not None:
            check_number("delay", delay, minimum=0, error=InvalidJob)
        job_id = record.job_id
        shard = self._shard(job_id)
        described = describe_error(error)
        now = self._clock()
        retry_at = decide(record.retries + 1, record._max_retries, now, delay=delay, permanent=permanent,
                          base=self.retry_backoff, cap=self.retry_backoff_max, rng=self._rng)  # fmt: skip
        state = shard.fail(now, job_id, record._token, described, retry_at=retry_at, durable=self.sync)
        record.finished = True
        self._waker.notify(shard.index)
        self._flow.record_outcome(record.queue, record.name, False)
        self._emit_failure(job_id, record.queue, record.name, state, described[0])
        return state

    def _release(self, record: Record) -> None:
        shard = self._shard(record.job_id)
        shard.release(self._clock(), record.job_id, record._token)
        record.finished = True
        self._waker.notify(shard.index)

    def _touch(self, record: Record) -> float:
        return self._shard(record.job_id).touch(self._clock(), record.job_id, record._token, self.lease_time)

    @contextlib.contextmanager
    def processing(
        self, timeout: float | None = 5.0, *, queues: Iterable[str] | None = None
    ) -> Iterator[Record]:
        """``with q.processing() as record:`` acks on success, nacks on an exception (and re-raises it).
        A ``KeyboardInterrupt``/``SystemExit`` releases the job instead: it was not the job's fault."""
        record = self.get(timeout, queues=queues)
        try:
            yield record
        except Exception as exc:
            if not record.finished:
                record.nack(exc)
            raise
        except BaseException:
            if not record.finished:
                record.release()
            raise
        else:
            if not record.finished:
                record.ack()

    @property
    def _watching(self) -> bool:
        """Does anyone listen for puts (an enqueue listener, or an alert threshold with a listener)?"""
        events = self.events
        return events.listening(JOB_ENQUEUED) or (
            self.alert_threshold is not None and events.listening(ALERT)
        )

    def _after_put(self, ids: list[int], queue: str, name: str | None) -> None:
        events = self.events
        if events.listening(JOB_ENQUEUED):
            for job_id in ids:
                events.emit(JOB_ENQUEUED, job_id=job_id, queue=queue, name=name)
        threshold = self.alert_threshold
        if threshold is not None and events.listening(ALERT) and time.monotonic() >= self._alert_quiet_until:
            pending = self._pending_count()
            if pending > threshold:
                self._alert_quiet_until = time.monotonic() + 1.0  # at most one alert a second
                events.emit(ALERT, type="pending", pending=pending, threshold=threshold)

    def _pending_count(self) -> int:
        """Pending jobs in all shards, re-reading only the shards that committed since the last count."""
        total = 0
        cache = self._pending_cache
        for shard in self._live():
            txnid = shard.env.last_txnid()
            cached = cache.get(shard.index)
            if cached is None or cached[0] != txnid:
                cached = (txnid, shard.counts()["pending"])
                cache[shard.index] = cached
            total += cached[1]
        return total

    def _emit_failure(self, job_id: int, queue: str, name: str | None, state: State, error: str) -> None:
        event = JOB_FAILED if state is State.FAILED else JOB_RETRIED
        if self.events.listening(event):
            self.events.emit(event, job_id=job_id, queue=queue, name=name, error=error, state=state)

    # ------------------------------------------------------------------ reads

    def stats(self) -> dict[str, Any]:
        """Counts per state, ``total`` puts ever, and ``shards``; plus ``rate_limits`` and
        ``circuit_breakers`` when there are any. O(shards + keys): no scan."""
        out: dict[str, Any] = {state.value: 0 for state in State}
        out["total"] = 0
        for shard in self._live():
            for key, value in shard.counts().items():
                out[key] += value
        out["shards"] = self.shard_count
        out.update(self._flow.stats())
        return out

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """Per queue name: {"pending", "scheduled", "running"} jobs, over all shards, sorted by name (queues
        with none left out). From counters kept in the same transactions as the states: O(shards x
        queues), whatever the number of jobs. A shard whose counters are not known to be exact (a store
        written by an older version, a record quarantined whose queue could not be read) rebuilds them
        first, once, with a walk of its waiting and running jobs."""
        total: dict[str, dict[str, int]] = {}
        for shard in self._live():
            for queue, counts in shard.queue_counts(now=self._clock()).items():
                into = total.setdefault(queue, {"pending": 0, "scheduled": 0, "running": 0})
                for state, count in counts.items():
                    into[state] += count
        return dict(sorted(total.items()))

    def shard_stats(self) -> list[dict[str, int]]:
        """``stats()`` of each shard, in shard order."""
        return [shard.counts() for shard in self._live()]

    def job(self, job_id: int) -> Job | None:
        """A snapshot of one job, or None if there is no such job (any more). A job whose record does not
        decode is moved to the dead letters first: this is that dead letter (error type "Corrupted")."""
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 1 << 64:
            return None
        shards = self._live()
        index = shard_of(job_id)
        return shards[index].job(job_id, now=self._clock()) if index < len(shards) else None

    def jobs(
        self,
        state: State | str,
        *,
        queue: str | None = None,
        name: str | None = None,
        after: int | None = None,
        limit: int = 50,
        newest_first: bool = False,
        shard: int | None = None,
    ) -> list[Job]:
        """Jobs in one state, ``limit`` at a time, in the order of the state's index: pending in claim order
        (priority, then ready time), scheduled by ETA, done by finish time, running and failed by job id
        (enqueue order). ``newest_first`` reverses it. Keyset paging: pass the last job's ``job_id`` as
        ``after`` for the next page; every page costs the same at any depth. ``queue``/``name`` filter
        as they scan (pending jobs of one queue are a seek, not a scan); ``shard`` lists one shard only."""
        state = parse_state(state)
        check_filter("queue", queue)
        check_filter("name", name)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidJob(f"limit must be an int >= 1, not {limit!r}")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise InvalidJob(f"after must be a job id, not {after!r}")
        shards = self._live()
        if shard is not None:
            if type(shard) is not int or not 0 <= shard < len(shards):
                raise InvalidJob(f"shard must be from 0 to {len(shards) - 1}, not {shard!r}")
            shards = [shards[shard]]
        after_key = None
        if after is not None:
            index = shard_of(after)
            every = self._live()
            after_key = every[index].sort_key(state, after) if index < len(every) else None
            if after_key is None:
                raise InvalidJob(
                    f"after={after}: that job no longer exists, so the listing cannot go on from it; "
                    f"list again from the start"
                )
        found: list[Listed] = []
        now = self._clock()
        for one in shards:
            found.extend(one.list_jobs(state, after_key=after_key, limit=limit, newest_first=newest_first,
                                       queue=queue, name=name, now=now))  # fmt: skip
        found.sort(key=lambda item: item.sort_key, reverse=newest_first)
        return [listed.job() for listed in found[:limit]]  # decode only what is returned

    def dead_letters(self, *, after: int | None = None, limit: int = 100) -> list[Job]:
        """Failed jobs, newest first: ``jobs(State.FAILED, newest_first=True, ...)``."""
        return self.jobs(State.FAILED, newest_first=True, after=after, limit=limit)

    # ------------------------------------------------------------------ management

    def claim(self, job_id: int) -> Record | None:
        """Claim this one job now, if it is pending or scheduled (before its ETA), whatever its priority,
        queue, limits and breakers: for running a job inline (the Django layer's immediate mode, tests).
        -> its record, or None if it is running, finished or gone."""
        shard = self._job_shard(job_id)
        if shard is None:
            return None
        claimed = shard.claim_job(
            self._clock(), job_id, self.lease_time, os.urandom(16), scheduled_too=True, worker=self.worker_id
        )
        return None if claimed is None else Record(self, claimed)

    def requeue(self, job_id: int) -> bool:
        """A failed job goes back to pending with its retries reset. -> False if it is not failed."""
        shard = self._job_shard(job_id)
        if shard is None or not shard.requeue(self._clock(), job_id):
            return False
        self._waker.notify(shard.index)
        return True

    def cancel(self, job_id: int) -> bool:
        """Remove a pending or scheduled job. -> False if it is in another state or gone."""
        shard = self._job_shard(job_id)
        return shard is not None and shard.cancel(job_id, now=self._clock())

    def delete(self, job_id: int, *, state: State | str | None = None) -> bool:
        """Remove a job in any state but running (a dead letter, a done job, a waiting one), with its
        payload and result; with ``state``, only if it is in that state. -> False if not removed (running,
        in another state, or gone). A job whose record does not decode counts as a dead letter."""
        wanted = None if state is None else parse_state(state)
        if wanted is State.RUNNING:
            raise InvalidJob("a running job cannot be deleted: its holder still works on it")
        shard = self._job_shard(job_id)
        if shard is None:
            return False
        if wanted is None:
            return shard.delete(job_id, now=self._clock())
        return shard.delete(job_id, (STATE_CODE[wanted],), now=self._clock())

    def _job_shard(self, job_id: int) -> Shard | None:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 1 << 64:
            raise InvalidJob(f"job_id must be a positive 64-bit int, not {job_id!r}")
        shards = self._live()
        index = shard_of(job_id)
        return shards[index] if index < len(shards) else None

    def purge(self, state: State | str, *, older_than: float | None = None) -> int:
        """Delete every job in ``state`` (never running ones), or those older than ``older_than`` seconds
        (finish time for done/failed, enqueue time otherwise). -> how many. A job whose record does not
        decode is moved to the dead letters as the walk meets it; purging the dead letters deletes it too
        (if it was enqueued before the cutoff: the only time its id still tells)."""
        state = parse_state(state)
        if state is State.RUNNING:
            raise InvalidJob(
                "running jobs cannot be purged: they belong to a live worker (or recover() them)"
            )
        if older_than is not None:
            check_number("older_than", older_than, minimum=0, error=InvalidJob)
        cutoff = None if older_than is None else self._clock() - older_than
        total = 0
        for shard in self._live():
            start: bytes | None = None
            while True:
                deleted, start = shard.purge(state, cutoff, BATCH, start, now=self._clock())
                total += deleted
                if start is None:
                    break
        return total

    def recover(self) -> int:
        """Running jobs whose lease expired: a failed attempt ("lease expired"), back to pending or to the
        dead letters. Idempotent. Each call also checks the next stretch of records for running jobs that
        lost their lease entry (broken data), so successive calls cover the whole store. -> how many."""
        recovered: list[Recovered] = []
        for shard in self._live():
            while True:
                batch = shard.recover_expired(self._clock(), BATCH)
                recovered.extend(batch)
                if len(batch) < BATCH:
                    break
            orphans, self._scrub_from[shard.index] = shard.scrub(self._clock(), self._scrub_from[shard.index])
            recovered.extend(orphans)
        if recovered:
            self._waker.notify()
            for job in recovered:  # a lost lease is a failed attempt: breakers and listeners hear of it
                if not job.charged:
                    continue  # claimed in a batch: back uncharged, to be claimed alone (shard.py)
                self._flow.record_outcome(job.queue, job.name, False)
                self._emit_failure(job.job_id, job.queue, job.name, job.state, "lease expired")
        return len(recovered)

    def vacuum(self, older_than: float | None = None) -> int:
        """Delete done jobs (and their results) finished at least ``older_than`` seconds ago
        (default: ``result_ttl``). Failed jobs are kept. -> how many."""
        if older_than is not None:
            check_number("older_than", older_than, minimum=0, error=InvalidJob)
        cutoff = self._clock() - (self.result_ttl if older_than is None else older_than)
        self._in_batches(lambda shard: shard.forget_unique(self._clock(), self.result_ttl, BATCH))
        return self._in_batches(lambda shard: shard.vacuum(cutoff, BATCH, now=self._clock()))

    def promote(self) -> int:
        """Scheduled jobs whose ETA passed become pending now (``get()`` also does this as it goes)."""
        total = self._in_batches(lambda shard: shard.promote_due(self._clock(), BATCH))
        if total:
            self._waker.notify()
        return total

    def _in_batches(self, step: Callable[[Shard], int]) -> int:
        """Repeat ``step`` (one transaction of at most BATCH jobs) on each shard until a step does less
        than a full batch. -> the total done."""
        total = 0
        for shard in self._live():
            while True:
                count = step(shard)
                total += count
                if count < BATCH:
                    break
        return total

    def wait_until_empty(self, timeout: float | None = None, *, poll_interval: float = 0.005) -> bool:
        """Block until nothing is pending, scheduled or running. -> False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            stats = self.stats()
            if stats["pending"] + stats["scheduled"] + stats["running"] == 0:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll_interval)

    def verify(self) -> list[str]:
        """Walk the whole store and report every inconsistency between records, indexes and counters.
        An empty list means the store is consistent. Reads only; O(jobs)."""
        problems: list[str] = []
        for shard in self._live():
            problems.extend(shard.verify())
        return problems

    # ------------------------------------------------------------------ rate limits and breakers (flow.py)

    def set_rate_limit(self, key: str, rate: Any, *, burst: int | None = None) -> Rate:
        """Limit ``key`` to ``rate`` ("160/m", "10/s", "5000/h", ``(count, seconds)``, or an int per minute),
        shared by every process; ``burst`` defaults to the count. Takes effect at once, also for running
        workers; changing a limit keeps the tokens there are. -> the parsed ``Rate``."""
        self._live()
        return self._flow.set_rate_limit(key, rate, burst=burst)

    def remove_rate_limit(self, key: str) -> bool:
        self._live()
        return self._flow.remove_rate_limit(key)

    def reset_rate_limit(self, key: str) -> bool:
        """Fill ``key``'s bucket again. -> False if there is no such limit."""
        self._live()
        return self._flow.reset_rate_limit(key)

    def rate_limits(self) -> dict[str, Rate]:
        self._live()
        return self._flow.rate_limits()

    def try_acquire(self, key: str) -> bool:
        """Take one token from ``key`` if there is one now. A key without a limit always grants."""
        self._live()
        return self._flow.try_acquire(key)

    def acquire(self, key: str, timeout: float | None = None) -> None:
        """Take one token from ``key``, waiting for it; ``RateLimited`` (with ``retry_after``) if it would
        take longer than ``timeout`` seconds."""
        if timeout is not None:
            check_number("timeout", timeout, minimum=0, error=InvalidJob)
        self._live()
        self._flow.acquire(key, timeout)

    def remaining(self, key: str) -> float | None:
        """Tokens ``key`` has now (fractional), or None if it has no limit."""
        self._live()
        return self._flow.remaining(key)

    def retry_after(self, key: str) -> float:
        """Seconds until ``key`` has a token (0 if it has one now, or has no limit)."""
        self._live()
        return self._flow.retry_after(key)

    def set_circuit_breaker(self, key: str, *, threshold: int = 5, recovery_timeout: float = 60.0) -> None:
        """Open ``key``'s breaker after ``threshold`` consecutive failures of jobs under it; after
        ``recovery_timeout`` seconds one trial job passes: success closes it, failure opens it again."""
        self._live()
        self._flow.set_circuit_breaker(key, threshold=threshold, recovery_timeout=recovery_timeout)

    def remove_circuit_breaker(self, key: str) -> bool:
        self._live()
        return self._flow.remove_circuit_breaker(key)

    def reset_circuit_breaker(self, key: str) -> bool:
        """Close ``key``'s breaker now. -> False if there is no such breaker."""
        self._live()
        return self._flow.reset_circuit_breaker(key)

    def circuit_breakers(self) -> dict[str, dict[str, Any]]:
        """Every breaker: state, consecutive failures, threshold, timeout, seconds to the next trial."""
        self._live()
        return self._flow.circuit_breakers()

    # ------------------------------------------------------------------ locks and the worker registry

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take (or, if ``owner`` already holds it, renew) the store-wide lock ``name`` for ``ttl`` seconds.
        -> False if another owner holds it. A holder that dies loses it when the ttl runs out."""
        check_number("ttl", ttl, minimum=0.001, error=InvalidJob)
        self._live()
        return self._coordination.acquire_lock(name, owner, float(ttl))

    def release_lock(self, name: str, owner: str) -> bool:
        """Give up ``name`` if ``owner`` holds it. -> whether it did. The lock is free at once; its record
        stays, expired as of now, for ``last_lock_holder``."""
        self._live()
        return self._coordination.release_lock(name, owner)

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now; None if it is free (never taken, expired or released)."""
        self._live()
        return self._coordination.lock_holder(name)

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last record of ``name`` whether it is held, expired or released (then ``expires_at`` is when
        it was released); None if nobody ever took it. A new holder learns from it until when its
        predecessor held the lock (the periodic scheduler resumes its ticks from there)."""
        self._live()
        return self._coordination.last_lock_holder(name)

    def report_worker(self, worker_id: str, *, stale_after: float, **fields: Any) -> None:
        """Register or refresh a worker in the store's registry (``workers()`` reads it). Fields: ``pid``,
        ``host``, ``started_at``, ``queues``, ``threads``, ``current_jobs``, ``processed``, ``failed``."""
        check_number("stale_after", stale_after, minimum=0.001, error=InvalidJob)
        self._live()
        self._coordination.report_worker(worker_id, stale_after=float(stale_after), **fields)

    def remove_worker(self, worker_id: str) -> bool:
        self._live()
        return self._coordination.remove_worker(worker_id)

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """Workers that reported within their ``stale_after`` (all registered ones with ``include_dead``)."""
        self._live()
        return self._coordination.workers(include_dead=include_dead)

    def prune_workers(self) -> int:
        """Forget workers that stopped reporting. -> how many."""
        self._live()
        return self._coordination.prune_workers()

    def reader_check(self) -> int:
        """Reclaim LMDB reader slots of dead processes. -> how many. (The background thread does this.)"""
        return sum(env.reader_check() for env in self._envs_live())

    def _envs_live(self) -> list[Any]:
        self._live()
        return self._envs

    # ------------------------------------------------------------------ background maintenance

    def _maintain(self) -> None:
        """The background thread: recovery, vacuum and syncs on their intervals. A round that fails is
        logged, with its traceback, unless it failed as the round before did: the same problem every 15 s
        is one log line (until a round works again), not a line per round."""
        stop = self._stop
        intervals = self._intervals
        due = {name: time.monotonic() + interval for name, interval in intervals.items()}
        last_failure: str | None = None
        while not stop.is_set():
            now = time.monotonic()
            wait = max(0.0, min(due.values()) - now)
            if stop.wait(wait):
                return
            now = time.monotonic()
            try:
                if now >= due["recover"]:
                    due["recover"] = now + intervals["recover"]
                    self.reader_check()
                    if self._do_recover:
                        self.recover()
                if now >= due["vacuum"]:
                    due["vacuum"] = now + intervals["vacuum"]
                    if self._do_vacuum:
                        self.vacuum()
                if now >= due["sync"]:
                    due["sync"] = now + intervals["sync"]
                    if not self.sync:
                        for env in self._envs:
                            env.sync()  # bounds what an OS crash can take in the default mode
                last_failure = None
            except QueueClosed:
                return
            except Exception as exc:  # keep maintaining; the next round retries
                failure = f"{type(exc).__name__}: {exc}"
                if failure != last_failure:
                    logger.exception("background maintenance of %s failed", self.path)
                last_failure = failure


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


def _seconds(timeout: float | None) -> float | None:
    return None if timeout is None else float(timeout)
