"""``PostgresStore``: the store on PostgreSQL, for any number of machines (``schema.py`` has the tables).

Every operation is one SQL statement where it can be (data-modifying CTEs move a job and change its
counters together), run on the calling thread's connection outside any explicit transaction, so it is
atomic and costs one round trip; the few that need several statements run in one transaction. Claims lock
the rows they take with ``FOR UPDATE SKIP LOCKED``, so concurrent consumers never wait for each other;
no transaction stays open while a task runs. Every time is a parameter read from the store's clock (the
server's, see ``clock.py``, or a test's). The store has one shard: its job ids' low byte is 0.

A commit is as durable as the server's ``synchronous_commit`` says (on by default: a commit returns once
its WAL is on disk), for every operation; the ``durable`` arguments of the store interface, which ask the
LMDB store for an fsync, change nothing here.

This module holds the lifecycle, puts, claims and the completion of claimed jobs (their SQL is in
``job_sql.py``); ``upkeep.py`` holds recovery, promotion, vacuum, purge and the management writes;
``reads.py`` the reads and ``verify``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...cancels import CancelOutcome
from ...errors import QueueCorrupted, SchemaError
from ...job import STATES, Job, State
from ...jobspec import JobSpec
from ..types import (
    Candidate,
    Claimed,
    ClaimOutcome,
    Head,
    NewJobs,
    Recovered,
    Sample,
    StoreInfo,
)
from . import cancels, claims, history, job_sql, reads, schema, tagged, uniqueness, upkeep
from .clock import ServerClock
from .concurrency import PgConcurrency, limit_new
from .connection import PREPARE_THRESHOLD, Connections, display_url, savepoint, server_bound
from .control import PgControl
from .coordination import PgCoordination
from .hints import PgHints
from .pauses import PgPauses
from .rows import CLAIMED_COLUMNS, as_claimed, micros, pack_key
from .schedules import PgSchedules
from .schema import PENDING, RUNNING, SCHEDULED
from .sql import FOLD_JOURNAL, slot
from .transfer import PgTransfer
from .workflows import PgWorkflows

VACUUM_CHECK_INTERVAL = 30.0  # seconds between maintain()'s looks at the dead rows of the churned tables


class PostgresStore:
    """The PostgreSQL store (see the module's docstring). ``open(url)`` checks the schema."""

    kind = "postgresql"
    shards = 1
    """One shard: the database orders and locks jobs itself, and its job ids' low byte is 0."""
    offline_compact = False
    """PostgreSQL reclaims space itself (autovacuum); ``queue_compact`` is for the LMDB store."""
    transactional_enqueue = True
    """A put can join the caller's transaction on the same database (``put(..., connection=)``)."""
    multi_host = True
    """Processes on any number of machines share the store; the server's clock is their one clock."""
    server_commits = True
    """A commit is a round trip to the server, which does the work and waits for its WAL flush
    (``synchronous_commit``) while this process could go on."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Callable[[], float] | None = None,
        listen: bool = True,
        notify: bool = True,
        poll_interval: float = 1.0,
        local_clock: Callable[[], float] = time.time,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connection: Any = None,
    ) -> PostgresStore:
        """The store in the database at ``url`` (created tables: ``schema.create``, or ``manage.py
        migrate``). ``clock``: a test's; None: the server's, read through ``local_clock`` (this machine's;
        tests give a wrong one). ``listen``/``notify``: wake consumers by LISTEN/NOTIFY (``hints.py``);
        ``poll_interval``: the longest poll-only wait. ``prepare_threshold``: psycopg's for the store's
        connections (None: no server-side prepared statements). Behind PgBouncer in transaction mode:
        ``listen=False, prepare_threshold=None``, and the store keeps no state in a server session
        (``connection.py``). ``connection``: the caller's, inside its open transaction on that database;
        the opening's statements (the schema's version, a reading of the server's clock: both read only)
        then run on it, and the store opens no connection of its own (through a pool of one server
        connection, one would wait for the caller's transaction). ``SchemaError`` when the tables are
        missing or at another version."""
        return cls(url, clock=clock, listen=listen, notify=notify, poll_interval=poll_interval,
                   local_clock=local_clock, prepare_threshold=prepare_threshold,
                   connection=connection)  # fmt: skip

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] | None,
        listen: bool,
        notify: bool,
        poll_interval: float,
        local_clock: Callable[[], float] = time.time,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connection: Any = None,
    ) -> None:
        self.url = url
        self.path = display_url(url)
        self.db = Connections(url, prepare_threshold=prepare_threshold)
        self.server_clock: ServerClock | None = None
        if clock is None:
            guard = self.db.guard
            self.server_clock = ServerClock(
                self.db.connect, local_clock, guard=lambda conn: guard(conn, drop=False), lent=self.db.lent
            )
        with self.db.borrowed(connection) if connection is not None else contextlib.nullcontext():
            conn = self.db.connection()
            with self.db.guard(conn):
                found = schema.version(conn)
            if found != schema.SCHEMA_VERSION:
                what = "has no queue_max tables" if found is None else f"has queue_max schema version {found}"
                raise SchemaError(
                    f"the database at {self.path} {what}; this version of queue_max_django needs version "
                    f"{schema.SCHEMA_VERSION}: run `manage.py migrate` (or schema.create() outside Django)"
                )
            if self.server_clock is not None:
                # Read now, not on the first clock() inside some transaction: no operation then needs a
                # second connection while it holds one (through a pool of one server connection, it would
                # wait for itself).
                self.server_clock.sample()
        self.clock: Callable[[], float] = clock or self.server_clock  # type: ignore[assignment]
        self._ready_floor = 0  # the ready time (µs) of the last job this process put pending
        self._vacuum_check_due = 0.0  # time.monotonic() of maintain()'s next look at the churned tables
        self.hints = PgHints(self.db.connect, listen=listen, notify=notify, poll_interval=poll_interval)
        self.control = PgControl(self.db, self.clock)
        self.concurrency = PgConcurrency(self)
        self.locks = PgCoordination(self.db, self.clock)
        self.pauses = PgPauses(self.db, self.clock, self.hints)
        self.schedules = PgSchedules(self.db)
        self.workflows = PgWorkflows(self)
        self.transfer = PgTransfer(self)

    def params(self, **params: Any) -> dict[str, Any]:
        params["slot"] = slot()
        params["channel"] = self.hints.channel
        params["notify"] = self.hints.sends
        return params

    # ------------------------------------------------------------------ lifecycle

    def info(self) -> StoreInfo:
        return StoreInfo(self.kind, self.path, self.shards)

    def after_fork(self) -> None:
        """Connections and the listener are per process: a forked child opens its own on first use."""

    def maintain(self, flush: bool) -> None:
        """Fold the committed journal of the counters (puts in callers' transactions) into the shared
        rows, read the server's clock again when due (``ServerClock``), and every ``VACUUM_CHECK_INTERVAL``
        vacuum the tables that churn if they are bloated (``upkeep.vacuum_churned``)."""
        conn = self.db.connection()
        with self.db.guard(conn):
            conn.execute(FOLD_JOURNAL)
            looked = time.monotonic()
            if looked >= self._vacuum_check_due:
                self._vacuum_check_due = looked + VACUUM_CHECK_INTERVAL
                upkeep.vacuum_churned(conn)
        if self.server_clock is not None:
            self.server_clock.maybe_resample()

    def reader_check(self) -> int:
        return 0  # LMDB's reader slots: nothing of the kind here

    def end_thread(self) -> None:
        """The calling thread is done with the store: close its connection now (a thread that ends
        without this call has it closed as it ends)."""
        self.db.close_thread()

    def borrowing(self, connection: Any) -> contextlib.AbstractContextManager[None]:
        """This thread's operations run on ``connection`` (the caller's, inside its open transaction)
        until the block ends (``Connections.borrowed``)."""
        return self.db.borrowed(connection)

    def close(self, flush: bool) -> None:
        self.hints.close()
        self.db.close()

    # ------------------------------------------------------------------ enqueue

    def put_one(self, now: float, shard: int, payload: bytes, spec: JobSpec) -> int:
        """One job, the common put (no unique key, not in a caller's transaction): its one statement in
        its own transaction, one round trip, without ``enqueue``'s batches around it."""
        if spec.concurrency is not None:  # a second statement in the same transaction
            return self.enqueue(now, shard, [NewJobs((payload,), spec)], False)[0]
        state, params = self._put_params(spec, micros(now))
        params["payload"] = payload
        conn = self.db.connection()
        with self.db.guard(conn):
            row = self.db.first_row(conn, job_sql.PUT_ONE[state], params)
        if row[2]:  # it leads its queue: wake a consumer of this process (the NOTIFY wakes the others)
            self.hints.local()
        return int(row[0])

    def enqueue(
        self, now: float, shard: int | None, batches: Sequence[NewJobs], durable: bool, connection: Any = None
    ) -> list[int]:
        """Write ``batches`` in ONE transaction: on ``connection`` (the caller's, inside its own
        transaction: the jobs commit or roll back with it) or on this thread's. A batch with a unique key
        is decided by ``uniqueness.py``. -> the ids."""
        if connection is not None:
            with self.db.guard(connection, drop=False):
                if len(batches) == 1 and batches[0].unique is None:
                    return self._enqueue_on(connection, now, batches, joined=True)
                # Several statements: all or none (a savepoint inside the caller's transaction).
                with savepoint(connection):
                    return self._enqueue_on(connection, now, batches, joined=True)
        if len(batches) == 1 and batches[0].unique is None and batches[0].spec.concurrency is None:
            conn = self.db.connection()  # one statement: its own transaction, one round trip
            with self.db.guard(conn):
                return self._enqueue_on(self.db.runner(conn), now, batches)
        with self.db.transaction() as conn:
            return self._enqueue_on(conn, now, batches)

    def _enqueue_on(
        self, conn: Any, now: float, batches: Sequence[NewJobs], joined: bool = False
    ) -> list[int]:
        now_us = micros(now)
        ids: list[int] = []
        execute = self._joined_execute(conn) if joined else conn.execute
        for batch in batches:
            payloads = list(batch.payloads)
            if not payloads:
                continue
            rule = batch.unique
            if rule is not None:
                holder = uniqueness.decide(self, execute, batch, rule, now_us)
                if holder is not None:
                    ids.append(holder)
                    continue
            spec = batch.spec
            state, params = self._put_params(spec, now_us)
            if len(payloads) == 1:  # a statement the server plans once (job_sql._enqueue_one_sql)
                params["payload"] = payloads[0]
                one, _sent, lead = execute(job_sql.ENQUEUE_ONE[state, joined], params).fetchone()
                new = [one]
            else:
                params.update(payloads=payloads, count=len(payloads), state=state)
                statement = job_sql.ENQUEUE_JOINED if joined else job_sql.ENQUEUE
                new, _sent, lead = execute(statement, params).fetchone()
            if spec.concurrency is not None:  # in the same transaction (concurrency.py)
                execute(*limit_new(new, spec, self.params(now=now_us)))
                lead = True
            if lead:
                self.hints.local()
            if rule is not None:
                uniqueness.name(execute, rule, new[0])
            ids.extend(new)
        return ids

    def _put_params(self, spec: JobSpec, now_us: int) -> tuple[int, dict[str, Any]]:
        """The state of new jobs of ``spec`` put at ``now_us``, and their statement's parameters (all but
        the payloads)."""
        ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
        state = SCHEDULED if ready_us > now_us else PENDING
        if state == PENDING:
            # FIFO outlives the clock stepping back, for this process's puts: a new job is never ready
            # before the last one it put (the id breaks the tie; across processes, the server's clock
            # orders them).
            ready_us = self._ready_floor = max(now_us, self._ready_floor)
        params = self.params(
            queue=spec.queue, name=spec.name, priority=spec.priority, ready=ready_us,
            max_retries=spec.max_retries, now=now_us, timeout=spec.timeout,
            partition_key=pack_key(spec.partition_key),
            metadata=None if spec.metadata is None else spec.metadata.decode(),
        )  # fmt: skip
        return state, params

    def _joined_execute(self, conn: Any) -> Callable[[str, Any], Any]:
        """How the statements of a put run on the caller's connection: bound on the server and prepared
        there once they ran the store's ``prepare_threshold`` times (``connection.server_bound``)."""
        return server_bound(conn, self.db.caller_cursor(conn), self.db.prepare_threshold)

    def one(self, sql: str, params: Any) -> Any:
        """One statement in its own (implicit) transaction on this thread's connection: one round trip.
        -> its first row."""
        conn = self.db.connection()
        with self.db.guard(conn):
            return self.db.runner(conn).execute(sql, params).fetchone()

    def rows(self, sql: str, params: Any) -> list[Any]:
        conn = self.db.connection()
        with self.db.guard(conn):
            rows: list[Any] = self.db.runner(conn).execute(sql, params).fetchall()
            return rows

    # ------------------------------------------------------------------ claims

    def head(self, shard: int, now: float, queues: tuple[str, ...] | None) -> Head:
        sql = job_sql.variant(job_sql.HEAD, queues is not None)
        priority, eta_us, limited = self.one(sql, {"queues": None if queues is None else list(queues)})
        return Head(priority, None if eta_us is None else eta_us / 1_000_000, limited)

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
        """Claim up to ``limit`` next jobs in ONE statement (``FOR UPDATE SKIP LOCKED``: consumers never
        wait for each other), none below ``min_priority``."""
        params = self.params(queues=None if queues is None else list(queues), min_priority=min_priority,
                              limit=limit, now=micros(now), lease=micros(now + lease_time), token=token,
                              worker=worker)  # fmt: skip
        expected = params["pauses"] = self.pauses.expected()  # [sc_pause_fresh]: the claim's guard
        asked = time.monotonic()
        rows = claims.claim_rows(
            self, params, queues is not None, min_priority is not None, expected is not None
        )
        head, eta_us, alone, limited = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
        self.control.seen(rows[0][4], asked)
        if expected is not None and self.pauses.guarded(rows[0][-1], expected, asked):
            return ClaimOutcome([], None, None if eta_us is None else eta_us / 1_000_000, False, limited)
        claimed = claims.delivered(self, rows, bool(alone), now, token)
        return ClaimOutcome(claimed, head, None if eta_us is None else eta_us / 1_000_000, False, limited)

    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None:
        states = [PENDING, SCHEDULED] if scheduled_too else [PENDING]
        params = self.params(id=job_id, states=states, now=micros(now), lease=micros(now + lease_time),
                              token=token, worker=worker)  # fmt: skip
        expected = params["pauses"] = None if scheduled_too else self.pauses.expected()
        asked = time.monotonic()
        row = self.one(job_sql.variant(job_sql.CLAIM_JOB, False, False, expected is not None), params)
        if expected is not None:  # [sc_pause_fresh]
            if self.pauses.guarded(row[-1], expected, asked):
                return None
            row = None if row[0] is None else row[:-1]
        if row is None:  # not waiting, or limited: then its limits decide (concurrency.py)
            return self.concurrency.claim_job(now, job_id, lease_time, token, worker, scheduled_too)
        try:
            return as_claimed(row[:CLAIMED_COLUMNS], False)
        except QueueCorrupted as exc:
            upkeep.quarantine(self, micros(now), job_id, str(exc))
            return None

    def find_admissible(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        skip_queues: frozenset[str],
        skip_names: frozenset[str],
    ) -> tuple[Candidate | None, float | None]:
        params = {"queues": None if queues is None else list(queues), "skip_queues": list(skip_queues),
                  "skip_names": list(skip_names)}  # fmt: skip
        sql = job_sql.variant(job_sql.ADMISSIBLE, queues is not None)
        job_id, priority, ready_us, queue, name, eta_us = self.one(sql, params)
        eta = None if eta_us is None else eta_us / 1_000_000
        if job_id is None:
            return None, eta
        return Candidate((-priority, ready_us, job_id), job_id, 0, queue, name), eta

    def promote_due(self, shard: int | None, now: float) -> int:
        return upkeep.promote_due(self, now)

    # ------------------------------------------------------------------ a claimed job

    def heartbeat(self, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
        row = self.one(cancels.HEARTBEAT, (micros(now + lease_time), job_id, token))
        if row is None:
            raise self._not_held(job_id, token)
        return row[0] / 1_000_000, bool(row[1])

    def complete(self, now: float, job_id: int, token: bytes, result: bytes | None, durable: bool) -> None:
        skipped = self.complete_many(now, [(job_id, token, result)], durable)
        if skipped:
            raise QueueCorrupted(skipped[job_id])

    def complete_many(
        self, now: float, items: Sequence[tuple[int, bytes, bytes | None]], durable: bool
    ) -> dict[int, str]:
        """(job id, token, result) done, in ONE statement. -> {job id: why} of those this token no longer
        held (the others are done)."""
        asked = time.monotonic()
        if len(items) == 1:  # a statement the server plans once (job_sql._complete_sql)
            ((job_id, token, result),) = items
            params = self.params(id=job_id, token=token, result=result, now=micros(now))
            done, freed, version = self.one(job_sql.COMPLETE_ONE, params)
        else:
            params = self.params(ids=[item[0] for item in items], tokens=[item[1] for item in items],
                                 results=[item[2] for item in items], now=micros(now))  # fmt: skip
            done, freed, version = self.one(job_sql.COMPLETE, params)
        self.control.seen(version, asked)
        if freed:
            self.hints.local()
        finished = set(done or ())
        return {
            job_id: str(self._not_held(job_id, token)) for job_id, token, _ in items if job_id not in finished
        }

    def fail(
        self,
        now: float,
        job_id: int,
        token: bytes,
        error: tuple[str | None, str | None, str | None],
        retry_at: float | None,
        durable: bool,
    ) -> State:
        now_us = micros(now)
        message, error_type, traceback = error
        params = self.params(id=job_id, token=token, now=now_us, error=message, error_type=error_type,
                              traceback=traceback)  # fmt: skip
        if retry_at is None:
            state = State.FAILED
            done, freed = self.one(job_sql.DEAD, params)
            if freed:
                self.hints.local()
        else:
            retry_us = micros(retry_at)
            scheduled = retry_us > now_us
            state = State.SCHEDULED if scheduled else State.PENDING
            params.update(state=SCHEDULED if scheduled else PENDING, ready=retry_us if scheduled else now_us)
            done = self.one(job_sql.RETRY, params)[0]
            if done is not None:
                self.hints.local()
        if done is None:
            raise self._not_held(job_id, token)
        return state

    def release(self, now: float, job_id: int, token: bytes, retry_at: float | None = None) -> None:
        later = retry_at is not None and retry_at > now
        params = self.params(id=job_id, token=token, state=SCHEDULED if later else PENDING,
                             ready=micros(retry_at) if later and retry_at is not None else None)  # fmt: skip
        if self.one(job_sql.RELEASE, params)[0] is None:
            raise self._not_held(job_id, token)
        self.hints.local()

    def save_metadata(self, now: float, job_id: int, token: bytes, metadata: bytes | None) -> None:
        text = None if metadata is None else metadata.decode()
        if self.one(job_sql.SAVE_METADATA, (text, text, job_id, token)) is None:
            raise self._not_held(job_id, token)

    def _not_held(self, job_id: int, token: bytes) -> QueueCorrupted:
        """Why ``token`` does not hold ``job_id`` (the LMDB store's words)."""
        row = self.one("SELECT state, token FROM qm_jobs WHERE id = %s", (job_id,))
        if row is None:
            row = self.one("SELECT state, NULL::bytea FROM qm_finished WHERE id = %s", (job_id,))
        if row is None:
            return QueueCorrupted(f"job {job_id} no longer exists (vacuumed, purged or cancelled)")
        if row[0] != RUNNING:
            return QueueCorrupted(
                f"job {job_id} is {STATES[row[0]].value}, not running: it was already completed or released, "
                f"or its lease expired and recovery moved it"
            )
        return QueueCorrupted(
            f"job {job_id} is held by another claim: this record's lease expired and the job was claimed "
            f"again"
        )

    # ------------------------------------------------------------------ management and upkeep

    def requeue(self, now: float, job_id: int) -> bool:
        return upkeep.requeue(self, now, job_id)

    def cancel(self, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
        return cancels.cancel(self, now, job_id, by)

    def cancel_requested(self, job_id: int) -> bool:
        return bool(self.one(cancels.MARKED, (job_id,))[0])

    def delete(self, now: float, job_id: int, states: tuple[State, ...] | None) -> bool:
        return upkeep.delete(self, job_id, states)

    def purge(self, now: float, state: State, cutoff: float | None) -> int:
        return upkeep.purge(self, state, cutoff)

    def recover_expired(self, now: float) -> list[Recovered]:
        return upkeep.recover_expired(self, now)

    def vacuum(self, now: float, cutoff: float, unique_ttl: float) -> int:
        return upkeep.vacuum(self, now, cutoff, unique_ttl)

    # ------------------------------------------------------------------ reads

    def job(self, now: float, job_id: int) -> Job | None:
        return reads.job(self, job_id)

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
        return reads.list_jobs(self, state, queue=queue, name=name, after=after, limit=limit,
                               newest_first=newest_first)  # fmt: skip

    def tagged_jobs(
        self, now: float, tags: tuple[str, ...], *, state: State | None, queue: str | None, name: str | None,
        after: int | None, limit: int,
    ) -> list[Job]:  # fmt: skip
        return tagged.tagged(self, tags, state=state, queue=queue, name=name, after=after, limit=limit)

    def counts(self, shard: int | None = None) -> dict[str, int]:
        return reads.counts(self)

    def pending_count(self) -> int:
        return reads.counts(self)[State.PENDING.value]

    def queue_counts(self, now: float) -> dict[str, dict[str, int]]:
        return reads.queue_counts(self)

    def oldest_pending(self, now: float) -> dict[str, float]:
        return reads.oldest_pending(self)

    def finished_totals(self) -> tuple[int, int]:
        return history.finished_totals(self)

    def cancel_counts(self) -> tuple[int, int]:
        return history.cancel_counts(self)

    def unique_counts(self) -> tuple[int, int]:
        skipped, replaced = self.one(uniqueness.COUNTS, None)
        return int(skipped), int(replaced)

    def enqueued_totals(self) -> dict[str, int]:
        return history.enqueued_totals(self)

    def save_sample(self, sample: Sample, keep: int) -> bool:
        return history.save_sample(self, sample, keep)

    def samples(self, since: int) -> list[Sample]:
        return history.samples(self, since)

    def verify(self) -> list[str]:
        return reads.verify(self) + self.control.verify() + self.locks.verify()
