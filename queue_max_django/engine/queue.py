"""``Queue``: the engine's public surface, its options and checks, its store, and the background maintenance.

The Queue talks to one object, its store (``stores/base.py``; the LMDB store is ``stores/lmdb/``), and every
state change is one store operation (one transaction). This module owns policy: validation, events, the
clock, the management calls, and the maintenance schedule (maintenance.py). Writing a put (its payloads, its
shard, its parts, the enqueue events and alert) is the ``Putter``'s (putting.py); claiming, waiting and
ending the claimed jobs (backoff decisions, the completion events) are the ``Consumer``'s (consuming.py);
which shard a consumer claims from is the ``Claimer``'s (claiming.py); rate limits and breakers are the
``Flow`` member's (flow.py). A ``Record`` (record.py) ends its job through the Consumer of the Queue that
claimed it (the ``RecordOwner`` methods ``_ack``, ``_nack``, ``_release``, ``_touch``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .cancels import MAX_CANCEL_BY, CancelOutcome
from .claiming import Claimer
from .concurrency import limited, summary
from .consuming import MAX_IDLE_WAIT as MAX_IDLE_WAIT
from .consuming import Consumer
from .coordinating import Coordination
from .errors import InvalidJob, QueueClosed
from .events import JOB_LOST, Events
from .flow import Flow
from .flowcontrol import FlowControl
from .forks import fork_generation
from .job import MAX_SHARDS, Job, State
from .maintenance import Maintenance, Round
from .options import PutOptions
from .pausecontrol import PauseControl
from .pauses import Pauses
from .putting import Putter, joined
from .record import Record
from .schedulecontrol import ScheduleControl
from .stores.base import Store
from .stores.opening import DEFAULT_MAP_SIZE, open_store
from .tokens import new_token
from .uniqueness import SKIP
from .uniqueputs import UniquePuts, ids_of
from .validate import check_filter, check_number, check_queue_arguments, parse_state, put_defaults
from .workflowing import QueueWorkflows

Clock = Callable[[], float]
logger = logging.getLogger("queue_max_django.engine")


class Queue(Coordination, FlowControl, PauseControl, ScheduleControl, UniquePuts):
    """A persistent, sharded, crash-safe job queue in a directory (or on a store object: see
    ``stores/base.py``). See docs/reference/engine.md."""

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
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
        self.queues: frozenset[str] | None = check_queue_arguments(
            lease_time=lease_time, max_retries=max_retries, retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max, result_ttl=result_ttl, max_payload_bytes=max_payload_bytes,
            queues=queues, recover_interval=recover_interval, vacuum_interval=vacuum_interval,
            sync_interval=sync_interval, alert_threshold=alert_threshold, clock=clock, rng=rng,
            worker_id=worker_id,
        )  # fmt: skip
        self.lease_time = float(lease_time)
        self.max_retries = max_retries
        self.retry_backoff = float(retry_backoff)
        self.retry_backoff_max = float(retry_backoff_max)
        self.result_ttl = float(result_ttl)
        self.max_payload_bytes = int(max_payload_bytes)
        self.sync = bool(sync)
        self.writemap = bool(writemap)
        self.alert_threshold = alert_threshold
        self.worker_id = worker_id  # recorded in each job this Queue claims (Job.worker_ids)
        self.events = Events()  # callbacks: see events.py; the Django layer turns them into signals
        self._rng = rng or random.Random()
        self._rounds: list[Round] = [(float(sync_interval), self._upkeep)]  # the background thread's
        if do_recover:
            self._rounds.append((float(recover_interval), self.recover))
        if do_vacuum:
            self._rounds.append((float(vacuum_interval), self.vacuum))
        self._store = open_store(path, shards=shards, map_size=map_size, map_size_max=map_size_max,
                                 sync=self.sync, writemap=self.writemap, clock=clock, default_clock=time.time,
                                 rotation=self._rng.randrange(MAX_SHARDS))  # fmt: skip
        self._clock: Clock = self._store.clock
        self.path = self._store.path
        self.shard_count = self._store.shards
        self._lock = threading.Lock()
        self._closed = False
        self._putter = Putter(self, self._rng.randrange(self.shard_count))
        self._consumer = Consumer(self)
        self._maintenance: Maintenance | None = None
        self._put_options = PutOptions(self.queues, self.max_retries)
        self._started()

    # ------------------------------------------------------------------ lifecycle

    def _started(self) -> None:
        """Everything of this Queue that is per process: the flow state, the claimer's views, the
        background thread (a forked child starts them again)."""
        store = self._store
        self._flow = Flow(store.control, self._clock)
        self._pauses = Pauses(store.pauses, self._clock)
        self._claimer = Claimer(store, self._clock, self._rng)
        self._generation = fork_generation()
        if len(self._rounds) > 1 or not self.sync:
            self._maintenance = Maintenance(self.path, self._rounds)

    def _live(self) -> Store:
        if self._closed:
            raise QueueClosed(f"the queue at {self.path!r} is closed")
        if self._generation != fork_generation():
            with self._lock:
                if self._generation != fork_generation():
                    self._store.after_fork()  # a forked child: never reuse the parent's handles
                    self._started()
        return self._store

    def close(self) -> None:
        """Stop the background thread, wake waiting consumers, release the store. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._store.hints.close()  # waiting consumers wake at once and see the close
        if self._maintenance is not None:
            self._maintenance.stop()
        self._store.close(flush=not self.sync)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def server_commits(self) -> bool:
        """Is a commit of the store a server's work, which this process waits for (the PostgreSQL store)?
        A worker then acknowledges a batch of jobs while it runs the next one (``worker/acks.py``)."""
        return self._store.server_commits

    def end_thread(self) -> None:
        """The calling thread is done with this queue: release what the store keeps for that thread (the
        PostgreSQL store's connection of the thread, which a thread that just ends gets closed anyway;
        nothing on LMDB). A later call from the thread opens it again."""
        if not self._closed:
            self._store.end_thread()

    def on_connection(self, connection: Any) -> contextlib.AbstractContextManager[None]:
        """Inside the block this thread's operations run on ``connection``, the caller's psycopg 3
        connection inside its open transaction (PostgreSQL only: ``ConfigurationError`` elsewhere): they
        see the jobs that transaction wrote, and what they change commits or rolls back with it."""
        return joined(self._live()).borrowing(connection)

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Queue {self.path!r} shards={self.shard_count}{' closed' if self._closed else ''}>"

    # ------------------------------------------------------------------ put (putting.py)

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
        unique_until: Any = None,
        on_duplicate: str = SKIP,
        connection: Any = None,
        metadata: dict[str, Any] | None = None,
        concurrency: Any = None,
    ) -> int:
        """Store one job. -> its id. Raises ``InvalidJob`` (and writes nothing) on bad input. ``metadata``:
        a small JSON dict kept with the job (``Job.metadata``; ``InvalidMetadata``: engine/metadata.py).

        ``unique_key``: put this job only if no job holds the same key; otherwise act by ``on_duplicate``
        and return the holder's id (``put_unique`` says which it did; ``uniqueputs.py`` has the options).
        Decided in the same transaction as the write, so it holds across processes and crashes. Without
        ``unique_until`` a key is held until ``vacuum()`` forgets it, ``result_ttl`` (a day at least) after
        its put, whatever became of its job: the periodic scheduler relies on it.

        ``connection``: the caller's own psycopg 3 connection to the store's database (PostgreSQL, where
        ``transactional_enqueue`` is true): the job is written in the caller's transaction and commits or
        rolls back with it. A store that cannot (LMDB) raises ``ConfigurationError``."""
        if unique_key is not None:
            return self.put_unique(
                payload, unique_key=unique_key, unique_until=unique_until, on_duplicate=on_duplicate,
                priority=priority, delay=delay, eta=eta, queue=queue, name=name, max_retries=max_retries,
                timeout=timeout, partition_key=partition_key, connection=connection, metadata=metadata,
                concurrency=concurrency,
            ).job_id  # fmt: skip
        store = self._live()
        now = self._clock()
        spec = self._put_options.check(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name, metadata=metadata,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=now,
        )  # fmt: skip
        putter = self._putter
        if concurrency is not None:  # ``((key, n), ...)``: engine/concurrency.py; placed by its first key
            spec, partition_key = limited(spec, concurrency, partition_key)
        if self.sync or connection is not None:
            return putter.put_one(store, now, payload, spec, None, partition_key, connection).job_id
        packed = putter.pack(payload)  # the common case: one job straight to its shard
        job_id = store.put_one(now, putter.route(partition_key), packed, spec)
        if putter.watching:
            putter.announce([job_id], queue, name)
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
        connection: Any = None,
        metadata: dict[str, Any] | None = None,
        unique_keys: Iterable[str] | None = None,
        unique_until: Any = None,
        on_duplicate: str = SKIP,
        concurrency: Any = None,
    ) -> list[int]:
        """Store many jobs with the same options in ONE shard and ONE transaction: all or nothing. With
        ``unique_keys`` (one per payload): ``put_many_unique``'s ids (one transaction per key's shard)."""
        if unique_keys is not None:
            return ids_of(self.put_many_unique(
                payloads, unique_keys=unique_keys, unique_until=unique_until, on_duplicate=on_duplicate,
                priority=priority, delay=delay, eta=eta, queue=queue, name=name, max_retries=max_retries,
                timeout=timeout, partition_key=partition_key, connection=connection, metadata=metadata,
                concurrency=concurrency,
            ))  # fmt: skip
        spec = self._put_options.check(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name, metadata=metadata,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=self._clock(),
        )  # fmt: skip
        if concurrency is not None:
            spec, partition_key = limited(spec, concurrency, partition_key)
        putter = self._putter
        return putter.put_many(putter.route(partition_key), payloads, spec, connection)

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
        metadata: dict[str, Any] | None = None,
        concurrency: Any = None,
    ) -> list[int]:
        """Store many jobs with the same options in parts spread over the store, so that consumers drain
        them in parallel: ``part_size`` jobs a part (default: as many parts as the store has shards),
        each part ONE transaction, all or nothing, the parts on the shards in turn (from the next of the
        Queue's rotation; every part on the key's shard with ``partition_key``). The options and every
        payload are checked before any part is written. -> the ids, in the payloads' order."""
        if part_size is not None and (type(part_size) is not int or part_size < 1):
            raise InvalidJob(f"part_size must be None or an int >= 1, not {part_size!r}")
        spec = self._put_options.check(
            priority=priority, delay=delay, eta=eta, queue=queue, name=name, metadata=metadata,
            max_retries=max_retries, timeout=timeout, partition_key=partition_key, now=self._clock(),
        )  # fmt: skip
        if concurrency is not None:
            spec, partition_key = limited(spec, concurrency, partition_key)
        return self._putter.put_parts(payloads, spec, part_size, partition_key)

    def put_many_to_shard(self, shard: int, payloads: Iterable[Any], **options: Any) -> list[int]:
        """``put_many`` into one given shard (``.map`` spreads a batch over the shards with this)."""
        if type(shard) is not int or not 0 <= shard < self.shard_count:
            raise InvalidJob(f"shard must be from 0 to {self.shard_count - 1}, not {shard!r}")
        options = put_defaults(options)
        concurrency = options.pop("concurrency")
        checked = self._put_options.check(now=self._clock(), **options)
        if concurrency is not None:  # a limit's jobs go to its key's shard, whichever was asked
            checked, route = limited(checked, concurrency, options["partition_key"])
            shard = self._putter.route(route)
        return self._putter.put_many(shard, payloads, checked)

    # ------------------------------------------------------------------ get and completion (consuming.py)

    def get(self, timeout: float | None = None, *, queues: Iterable[str] | None = None) -> Record:
        """Claim the next job (highest priority first). ``timeout=None`` blocks; 0 looks once.
        Raises ``QueueEmpty`` when no job came in time."""
        return self._consumer.get(1, timeout, queues)[0]

    def get_many(
        self, limit: int, timeout: float | None = None, *, queues: Iterable[str] | None = None
    ) -> list[Record]:
        """Claim up to ``limit`` jobs at once: the next ones of one shard, in one transaction, never one
        below a priority another shard holds. Each is an ordinary ``Record`` with its own lease (renew
        them with ``touch()`` if working through them takes long). With a rate limit or circuit breaker
        set, one job at a time is admitted, so this returns one. Waits like ``get()``; ``QueueEmpty``."""
        if type(limit) is not int or limit < 1:
            raise InvalidJob(f"limit must be an int >= 1, not {limit!r}")
        return self._consumer.get(limit, timeout, queues)

    def ack_many(self, done: Sequence[tuple[Record, Any]]) -> dict[int, str]:
        """Acknowledge many (record, result) pairs: one transaction per shard. A record already finished,
        or that no longer holds its job (lease expired and recovered), is skipped; the others complete.
        Results are checked before anything is written (``PayloadNotSerializable``/``PayloadTooLarge``, and
        ``InvalidJob`` for a job listed twice); a result given as a ``codec.Packed`` was packed (and
        checked) already and is stored as it is. -> {job id: why} for the skipped ones."""
        return self._consumer.ack_many(done)

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

    def _hint_watch(self) -> int | None:
        """A descriptor that becomes readable when the store hints consumers (``AsyncQueue``), or None."""
        return self._live().hints.watch()

    # ------------------------------------------------------------------ reads

    def stats(self) -> dict[str, Any]:
        """Counts per state, ``total`` puts ever, and ``shards``; plus ``rate_limits``,
        ``circuit_breakers`` and ``paused`` (``Pause.as_dict()`` each) when there are any. O(shards +
        keys): no scan. ``cancelled``: the dead letters
        that are cancels (``Job.cancelled``), counted within ``failed`` (so the states still add up to at
        most ``total``); ``failed - cancelled`` are the failures."""
        out: dict[str, Any] = self._live().counts()
        out["shards"] = self.shard_count
        out.update(self._flow.stats())
        out.update(self._pause_stats())
        return out

    def concurrency_limits(self) -> dict[str, dict[str, int]]:
        """Per concurrency limit key in use (``put(concurrency=)``): ``{"running", "waiting"}`` jobs, the
        waiting ones held back or not yet claimed (``concurrency.summary``). O(keys + waiting groups)."""
        ops = self._live().concurrency
        return summary(ops.running(), ops.waiting())

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """Per queue name: {"pending", "scheduled", "running"} jobs, over all shards, sorted by name (queues
        with none left out), from counters kept with the states: O(shards x queues). Counters not known to
        be exact (an older store, a quarantined record) are rebuilt first, once, by a walk of the jobs."""
        return self._live().queue_counts(self._clock())

    def now(self) -> float:
        """The store's time (unix seconds), as every operation reads it (the database server's on the
        PostgreSQL store, a fake one in tests)."""
        return self._clock()

    def pending_ages(self) -> dict[str, float]:
        """Per queue with pending jobs, sorted by name: how many seconds its longest-waiting pending job has
        been ready to claim (the queue's lag; 0 for a ready time ahead of the clock; scheduled jobs are not
        waiting yet). O(shards x queues x priorities in use)."""
        now = self._clock()
        return {queue: max(0.0, now - ready) for queue, ready in self._live().oldest_pending(now).items()}

    def shard_stats(self) -> list[dict[str, int]]:
        """``stats()`` of each shard, in shard order."""
        store = self._live()
        return [store.counts(index) for index in range(store.shards)]

    def job(self, job_id: int) -> Job | None:
        """A snapshot of one job, or None if there is none. A record that does not decode is moved to the
        dead letters first: this is that dead letter (error type "Corrupted")."""
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 1 << 64:
            return None
        return self._live().job(self._clock(), job_id)

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
        store = self._live()
        if shard is not None and (type(shard) is not int or not 0 <= shard < store.shards):
            raise InvalidJob(f"shard must be from 0 to {store.shards - 1}, not {shard!r}")
        return store.list_jobs(self._clock(), state, queue=queue, name=name, after=after, limit=limit,
                               newest_first=newest_first, shard=shard)  # fmt: skip

    def tagged(self, *tags: str, state: State | str | None = None, **where: Any) -> list[Job]:
        """The jobs that have every one of ``tags``, newest first, found through the store's tag index (the
        cost is the first tag's jobs, never the store's size). ``state``, ``queue``, ``name``, ``after``
        (the last job id of a page), ``limit`` (50): as ``jobs()``'s (engine/tags.py)."""
        from .validate import tag_listing

        checked, options = tag_listing(tags, state, **where)
        return self._live().tagged_jobs(self._clock(), checked, **options)

    def dead_letters(self, *, after: int | None = None, limit: int = 100) -> list[Job]:
        """Failed jobs, newest first: ``jobs(State.FAILED, newest_first=True, ...)``."""
        return self.jobs(State.FAILED, newest_first=True, after=after, limit=limit)

    # ------------------------------------------------------------------ management

    def claim(self, job_id: int) -> Record | None:
        """Claim this one job now, if it is pending or scheduled (before its ETA), whatever its priority,
        queue, limits and breakers: for running a job inline (the Django layer's immediate mode, tests).
        -> its record, or None if it is running, finished or gone."""
        _check_id(job_id)
        store = self._live()
        claimed = store.claim_job(self._clock(), job_id, self.lease_time, new_token(), self.worker_id, True)
        return None if claimed is None else Record(self._consumer, claimed)

    def requeue(self, job_id: int) -> bool:
        """A failed job goes back to pending with its retries reset. -> False if it is not failed, or
        is a dead letter quarantined as corrupted (``Job.corrupted``: nothing is left to run; delete it)."""
        _check_id(job_id)
        return self._live().requeue(self._clock(), job_id)

    def cancel(self, job_id: int) -> bool:
        """Remove a pending or scheduled job. -> False if it is in another state or gone."""
        _check_id(job_id)
        return self._live().delete(self._clock(), job_id, (State.PENDING, State.SCHEDULED))

    def request_cancel(self, job_id: int, *, by: str | None = None) -> CancelOutcome:
        """Cancel a job in any state: remove a waiting one, mark a running one (cancels.py). ``by``: who
        asks (a user name, a command, a reason; at most ``MAX_CANCEL_BY`` characters), noted with the time
        in the running job's metadata (``Job.cancel_note``)."""
        _check_id(job_id)
        if by is not None and not isinstance(by, str):
            raise InvalidJob(f"by must be a str or None, not {type(by).__name__}")
        return self._live().cancel(self._clock(), job_id, None if by is None else by[:MAX_CANCEL_BY])

    def cancel_requested(self, job_id: int) -> bool:
        """Was a cancel of this running job requested (``request_cancel``), its worker yet to stop it? The
        answer for a job that is not running says nothing (a mark stays until the job is requeued or
        removed)."""
        _check_id(job_id)
        return self._live().cancel_requested(job_id)

    def delete(self, job_id: int, *, state: State | str | None = None) -> bool:
        """Remove a job in any state but running (a dead letter, a done job, a waiting one), with its
        payload and result; with ``state``, only if it is in that state. -> False if not removed (running,
        in another state, or gone). A job whose record does not decode counts as a dead letter."""
        wanted = None if state is None else parse_state(state)
        if wanted is State.RUNNING:
            raise InvalidJob("a running job cannot be deleted: its holder still works on it")
        _check_id(job_id)
        return self._live().delete(self._clock(), job_id, None if wanted is None else (wanted,))

    def purge(self, state: State | str, *, older_than: float | None = None) -> int:
        """Delete every job in ``state`` (never running ones), or those older than ``older_than`` seconds
        (finish time for done/failed, enqueue time otherwise). -> how many. A job whose record does not
        decode is moved to the dead letters as the walk meets it; purging the dead letters deletes it too
        (if it was enqueued before the cutoff: the only time its id still tells)."""
        state = parse_state(state)
        if state is State.RUNNING:
            raise InvalidJob("running jobs cannot be purged: a live worker holds them (or recover() them)")
        if older_than is not None:
            check_number("older_than", older_than, minimum=0, error=InvalidJob)
        store = self._live()
        cutoff = None if older_than is None else self._clock() - older_than
        return store.purge(self._clock(), state, cutoff)

    def recover(self) -> int:
        """Running jobs whose lease expired: a failed attempt ("lease expired"), back to pending or to the
        dead letters. Idempotent. Each call also checks the next stretch of records for running jobs that
        lost their lease entry (broken data), so successive calls cover the whole store. -> how many."""
        recovered = self._live().recover_expired(self._clock())
        events = self.events
        for job in recovered:  # a lost lease is a failed attempt: breakers and listeners hear of it
            if job.charged:  # (claimed in a batch: back uncharged, to be claimed alone; see Recovered)
                self._flow.record_outcome(job.queue, job.name, False)
                self._consumer.emit_failure(job.job_id, job.queue, job.name, job.state, "lease expired")
            if events.listening(JOB_LOST):  # the Django layer logs it: nobody else saw the job end
                events.emit(JOB_LOST, job_id=job.job_id, queue=job.queue, name=job.name, state=job.state,
                            charged=job.charged, attempt=job.attempt, attempts_allowed=job.attempts_allowed,
                            worker=job.worker)  # fmt: skip
        return len(recovered)

    def vacuum(self, older_than: float | None = None) -> int:
        """Delete done jobs (and their results) finished at least ``older_than`` seconds ago
        (default: ``result_ttl``). Failed jobs are kept. -> how many."""
        if older_than is not None:
            check_number("older_than", older_than, minimum=0, error=InvalidJob)
        store, now, ttl = self._live(), self._clock(), self.result_ttl if older_than is None else older_than
        removed = store.vacuum(now, now - ttl, self.result_ttl)
        store.workflows.forget(now, now - ttl)  # workflows that ended, with their nodes' results
        return removed

    @property
    def workflows(self) -> QueueWorkflows:
        """Graphs of jobs run in order (workflowing.py)."""
        return QueueWorkflows(self)

    def promote(self) -> int:
        """Scheduled jobs whose ETA passed become pending now (``get()`` does this too)."""
        return self._live().promote_due(None, self._clock())

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
        return self._live().verify()

    def reader_check(self) -> int:
        """Reclaim LMDB reader slots of dead processes. -> how many. (The background thread does this.)"""
        return self._live().reader_check()

    # ------------------------------------------------------------------ background maintenance

    def _upkeep(self) -> None:
        """The store's own upkeep (LMDB: reader slots of dead processes); and, in the default mode, a flush
        to disk, which bounds what an OS crash can take."""
        self._live().maintain(flush=not self.sync)


def _check_id(job_id: Any) -> None:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id < 1 << 64:
        raise InvalidJob(f"job_id must be a positive 64-bit int, not {job_id!r}")
