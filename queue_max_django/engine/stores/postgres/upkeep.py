"""The PostgreSQL store's upkeep and management writes: recover expired leases, promote due jobs, vacuum
old results and unique keys, purge a state, requeue a dead letter, delete a job, and move a job whose
payload does not decode to the dead letters. Each is one statement, or one transaction, of at most
``BATCH`` jobs, repeated until less than a batch is left: vacuum and purge never hold many rows at once.
And ``VACUUM`` of the tables that churn, when the server's autovacuum has left them bloated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...job import CORRUPTED, STATE_CODE, State
from ...retry import decide
from ..types import UNIQUE_KEY_MIN_TTL, Recovered
from . import cancels, limitslots, uniqueness
from .rows import CLAIM_ALONE_NEXT, CLAIM_BATCH, micros
from .schema import (
    CANCELLED,
    CANCELLED_LEFT,
    DONE,
    DONE_LEFT,
    FAILED,
    FAILED_LEFT,
    IS_CANCEL,
    PENDING,
    RUNNING,
    SCHEDULED,
)
from .sql import appended, notify_if, tally

if TYPE_CHECKING:
    from .sql import Statements

BATCH = 1000
LEASE_EXPIRED = "LeaseExpired"
_LEASE_ERROR = "lease expired: the worker holding the job died or stalled"

# A live job's columns copied into qm_finished as a dead letter (the error fields given as parameters).
_TO_FINISHED = """
    INSERT INTO qm_finished (id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us,
        started_us, finished_us, timeout, partition_key, payload, result, worker_ids, error_types,
        error_msgs, error, error_type, traceback, metadata, cgroup, climits, cns)
    SELECT id, {state}, queue, name, priority, retries + {charge}, max_retries, attempts, enqueued_us,
        started_us, %(now)s, timeout, partition_key, payload, NULL, worker_ids,
        {types}, {msgs},
        %(error)s, %(error_type)s, %(traceback)s, metadata, cgroup, climits, cns
    FROM gone RETURNING id, queue, name"""


def _dead(charge: int) -> str:
    types, msgs = appended("error_types", "%(error_type)s"), appended("error_msgs", "%(error)s")
    return _TO_FINISHED.format(state=FAILED, charge=charge, types=types, msgs=msgs)


PROMOTE = f"""
WITH due AS (SELECT id FROM qm_jobs WHERE state = {SCHEDULED} AND ready_us <= %(now)s
             ORDER BY ready_us, id LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
upd AS (UPDATE qm_jobs j SET state = {PENDING} FROM due WHERE j.id = due.id RETURNING j.id, j.queue),
{tally(("upd", str(SCHEDULED), -1), ("upd", str(PENDING), 1))}
SELECT (SELECT count(*) FROM upd), {notify_if("EXISTS (SELECT 1 FROM upd)")}
"""


def promote_due(store: Statements, now: float) -> int:
    """Scheduled jobs whose ETA passed become pending, FIFO by the time they became due (their ready time
    is their ETA). -> how many."""
    total = 0
    while True:
        moved: int = store.one(PROMOTE, store.params(now=micros(now), batch=BATCH))[0]
        total += moved
        if moved:
            store.hints.local()
        if moved < BATCH:
            return total


_EXPIRED = f"""
SELECT id, queue, name, claim, retries, max_retries, worker_ids[cardinality(worker_ids)] FROM qm_jobs
WHERE state = {RUNNING} AND lease_us <= %(now)s ORDER BY lease_us, id LIMIT %(batch)s FOR UPDATE SKIP LOCKED
"""
_BACK = f"""
WITH upd AS (
    UPDATE qm_jobs j SET state = {PENDING}, token = NULL, lease_us = NULL, started_us = NULL,
        claim = {CLAIM_ALONE_NEXT},
        ready_us = CASE WHEN j.id = ANY(%(charged)s) THEN %(now)s ELSE j.ready_us END,
        retries = CASE WHEN j.id = ANY(%(charged)s) THEN j.retries + 1 ELSE j.retries END,
        error = CASE WHEN j.id = ANY(%(charged)s) THEN %(error)s ELSE j.error END,
        error_type = CASE WHEN j.id = ANY(%(charged)s) THEN %(error_type)s ELSE j.error_type END,
        traceback = CASE WHEN j.id = ANY(%(charged)s) THEN NULL ELSE j.traceback END,
        error_types = CASE WHEN j.id = ANY(%(charged)s)
            THEN {appended("j.error_types", "%(error_type)s")} ELSE j.error_types END,
        error_msgs = CASE WHEN j.id = ANY(%(charged)s)
            THEN {appended("j.error_msgs", "%(error)s")} ELSE j.error_msgs END
    WHERE j.id = ANY(%(ids)s) RETURNING j.id, j.queue),
{tally(("upd", str(RUNNING), -1), ("upd", str(PENDING), 1))}
SELECT count(*) FROM upd
"""
_RECOVER_DEAD = f"""
WITH gone AS (DELETE FROM qm_jobs WHERE id = ANY(%(ids)s) RETURNING *),
ins AS ({_dead(1)}),
{tally(("ins", str(RUNNING), -1), ("ins", str(FAILED), 1))}
SELECT count(*) FROM ins
"""


def recover_expired(store: Statements, now: float) -> list[Recovered]:
    """Running jobs whose lease expired at or before ``now`` count a failed attempt and go back to pending
    at once, or to the dead letters once out of retries; a job claimed in a batch goes back uncharged, at
    its place. Every one is claimed alone next time. One transaction per batch."""
    now_us = micros(now)
    recovered: list[Recovered] = []
    while True:
        with store.db.transaction() as conn:
            rows = conn.execute(_EXPIRED, {"now": now_us, "batch": BATCH}).fetchall()
            back, charged, dead = [], [], []
            for job_id, queue, name, claim, retries, max_retries, worker in rows:
                held = (retries + 1, max_retries + 1, worker)  # the attempt lost, of how many, held by whom
                if claim == CLAIM_BATCH:
                    back.append(job_id)
                    recovered.append(Recovered(job_id, queue, name, State.PENDING, False, *held))
                elif decide(retries + 1, max_retries, now) is None:
                    dead.append(job_id)
                    recovered.append(Recovered(job_id, queue, name, State.FAILED, True, *held))
                else:
                    back.append(job_id)
                    charged.append(job_id)
                    recovered.append(Recovered(job_id, queue, name, State.PENDING, True, *held))
            params = store.params(now=now_us, error=_LEASE_ERROR, error_type=LEASE_EXPIRED, traceback=None)
            if dead:
                conn.execute(_RECOVER_DEAD, params | {"ids": dead})
            if back:
                conn.execute(_BACK, params | {"ids": back, "charged": charged})
            if back or dead:
                conn.execute(f"SELECT {notify_if('true')}", params)
        if back or dead:
            store.hints.local()
        if len(rows) < BATCH:
            return recovered


_VACUUM = f"""
WITH old AS (SELECT id FROM qm_finished WHERE state = {DONE} AND finished_us <= %(cutoff)s
             ORDER BY finished_us, id LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
gone AS (DELETE FROM qm_finished f USING old WHERE f.id = old.id RETURNING f.id, f.queue),
{cancels.UNMARK_GONE},
{tally(("gone", str(DONE), -1), ("gone", str(DONE_LEFT), 1))}
SELECT count(*) FROM gone
"""


def vacuum(store: Statements, now: float, cutoff: float, unique_ttl: float) -> int:
    """Delete done jobs finished at or before ``cutoff`` (their cancel marks with them), unique keys used
    more than ``max(unique_ttl, UNIQUE_KEY_MIN_TTL)`` ago, and the free slots of limits not taken since
    ``cutoff`` (``limitslots.FORGET``), a batch per statement. -> how many jobs."""
    forget = {"cutoff": micros(now - max(unique_ttl, UNIQUE_KEY_MIN_TTL)), "now": micros(now), "batch": BATCH}
    while True:
        conn = store.db.connection()
        with store.db.guard(conn):
            if conn.execute(uniqueness.VACUUM, forget).rowcount < BATCH:
                break
    cancels.forget_orphans(store)
    slots = {"cutoff": micros(cutoff), "batch": BATCH}
    while True:
        conn = store.db.connection()
        with store.db.guard(conn):
            if conn.execute(limitslots.FORGET, slots).rowcount < BATCH:
                break
    total = 0
    while True:
        removed: int = store.one(_VACUUM, store.params(cutoff=micros(cutoff), batch=BATCH))[0]
        total += removed
        if removed < BATCH:
            return total


def _purge_sql(state: State) -> str:
    code = STATE_CODE[state]
    table = "qm_finished" if code in (DONE, FAILED) else "qm_jobs"
    stamp = "finished_us" if code in (DONE, FAILED) else "enqueued_us"
    left: list[tuple[str, str, int | str]] = []
    if code == DONE:
        left = [("gone", str(DONE_LEFT), 1)]
    elif code == FAILED:
        left = [("gone", str(FAILED_LEFT), 1), ("gone", str(CANCELLED), f"-{IS_CANCEL}"),
                ("gone", str(CANCELLED_LEFT), IS_CANCEL)]  # fmt: skip
    error_type = "t.error_type" if code == FAILED else "NULL::text AS error_type"
    return f"""
WITH old AS (SELECT id FROM {table}
             WHERE state = {code} AND (%(cutoff)s::bigint IS NULL OR {stamp} <= %(cutoff)s)
             ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
gone AS (DELETE FROM {table} t USING old WHERE t.id = old.id RETURNING t.id, t.queue, {error_type}),
{cancels.UNMARK_GONE},
{tally(("gone", str(code), -1), *left)}
SELECT count(*) FROM gone
"""


def purge(store: Statements, state: State, cutoff: float | None) -> int:
    """Delete the jobs in ``state`` (only those older than ``cutoff`` if given: by finish time for done and
    failed, by enqueue time otherwise), a batch per statement. -> how many. Running jobs are skipped while
    a holder's statement has them locked."""
    sql = _purge_sql(state)
    total = 0
    while True:
        params = store.params(cutoff=None if cutoff is None else micros(cutoff), batch=BATCH)
        removed: int = store.one(sql, params)[0]
        total += removed
        if removed < BATCH:
            return total


_REQUEUE = f"""
WITH gone AS (DELETE FROM qm_finished WHERE id = %(id)s AND state = {FAILED} AND payload IS NOT NULL
              AND error_type IS DISTINCT FROM '{CORRUPTED}' RETURNING *),
ins AS (
    INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, retries, max_retries, attempts,
        enqueued_us, timeout, partition_key, payload, worker_ids, error_types, error_msgs, metadata, cgroup,
        climits, cns)
    SELECT id, {PENDING}, queue, name, priority, %(now)s, 0, max_retries, attempts, enqueued_us, timeout,
        partition_key, payload, worker_ids, error_types, error_msgs, metadata, cgroup, climits, cns
    FROM gone RETURNING id, queue, cgroup),
turn AS (INSERT INTO qm_turns (grp, turn) SELECT cgroup, nextval('qm_turn_seq') FROM ins
         WHERE cgroup IS NOT NULL ON CONFLICT (grp) DO NOTHING),
unmark AS (DELETE FROM qm_cancels c USING ins WHERE c.job_id = ins.id),
{
    tally(
        ("ins", str(FAILED), -1),
        ("ins", str(FAILED_LEFT), 1),
        ("ins", str(PENDING), 1),
        ("gone", str(CANCELLED), f"-{IS_CANCEL}"),
        ("gone", str(CANCELLED_LEFT), IS_CANCEL),
    )
}
SELECT (SELECT id FROM ins), {notify_if("EXISTS (SELECT 1 FROM ins)")}
"""


def requeue(store: Statements, now: float, job_id: int) -> bool:
    """A dead letter back to pending, its retries reset, at the back of its queue. False if the job is not
    a dead letter (or gone), or is one quarantined as corrupted (error type ``Corrupted``: what it would run
    is not what was put)."""
    from .workflow_reopen import requeued

    with store.db.transaction() as conn:  # a node's requeue reopens what waited on it (workflows.py)
        if conn.execute(_REQUEUE, store.params(id=job_id, now=micros(now))).fetchone()[0] is None:
            return False
        requeued(conn, job_id)
    store.hints.local()
    return True


_LEFT_OF_STATE = f"CASE state WHEN {DONE} THEN {DONE_LEFT} ELSE {FAILED_LEFT} END"  # (counted if done/failed)


def delete(store: Statements, job_id: int, states: tuple[State, ...] | None) -> bool:
    """Delete the job if it is in one of ``states`` (None: any but running). False otherwise (or gone)."""
    codes = [
        STATE_CODE[state] for state in (states or (State.PENDING, State.SCHEDULED, State.DONE, State.FAILED))
    ]
    assert RUNNING not in codes
    sql = f"""
WITH a AS (DELETE FROM qm_jobs WHERE id = %(id)s AND state = ANY(%(states)s)
           RETURNING id, queue, state, NULL::text AS error_type),
b AS (DELETE FROM qm_finished WHERE id = %(id)s AND state = ANY(%(states)s)
      RETURNING id, queue, state, error_type),
gone AS (SELECT * FROM a UNION ALL SELECT * FROM b),
{cancels.UNMARK_GONE},
{
        tally(
            ("gone", "state", -1),
            ("gone", _LEFT_OF_STATE, f"(state IN ({DONE}, {FAILED}))::int"),
            ("gone", str(CANCELLED), f"-(state = {FAILED})::int * {IS_CANCEL}"),
            ("gone", str(CANCELLED_LEFT), f"(state = {FAILED})::int * {IS_CANCEL}"),
        )
    }
SELECT count(*) FROM gone
"""
    return bool(store.one(sql, store.params(id=job_id, states=codes))[0])


_QUARANTINE = f"""
WITH gone AS (DELETE FROM qm_jobs WHERE id = %(id)s RETURNING *),
moved AS (SELECT id, queue, state FROM gone),
ins AS ({_dead(0)}),
{tally(("moved", "state", -1), ("ins", str(FAILED), 1))}
SELECT count(*) FROM ins
"""


def quarantine(store: Statements, now_us: int, job_id: int, reason: str) -> None:
    """A live job whose payload does not decode becomes a dead letter that says why (error type
    ``Corrupted``), whatever its state: nothing is left to run."""
    error = f"corrupted: {reason}"
    store.one(
        _QUARANTINE, store.params(id=job_id, now=now_us, error=error, error_type=CORRUPTED, traceback=None)
    )


CHURNED = ("qm_jobs", "qm_counts", "qm_flow", "qm_finished", "qm_limit_slots")
"""The tables whose rows are updated or deleted all the time: a live job's row goes when the job ends, a
counter row is updated by every operation, a limit's slot row by every limited claim, a done job's row goes
when the vacuum deletes it (``RESULT_TTL`` after it finished: unvacuumed, ``qm_finished`` would grow with
every job ever run)."""
VACUUM_DEAD_MIN = 10_000
"""A churned table is vacuumed by the store when it holds at least this many dead rows, and more dead rows
than live ones: what autovacuum (set for these tables in schema.py) does far earlier when it runs."""

_DEAD_ROWS = """
SELECT relname, n_dead_tup, n_live_tup FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND relname = ANY(%s)"""


def vacuum_churned(conn: Any) -> list[str]:
    """``VACUUM (SKIP_LOCKED, ANALYZE)`` each churned table whose dead rows outnumber its live ones by the
    server's own statistics: where autovacuum is off on the server, or cannot keep up, the hot table does
    not bloat and claims do not slow down. SKIP_LOCKED: another process vacuuming it already is enough.
    On a connection in autocommit (VACUUM runs outside any transaction). -> the tables vacuumed."""
    vacuumed = []
    for name, dead, live in conn.execute(_DEAD_ROWS, (list(CHURNED),)).fetchall():
        if dead >= VACUUM_DEAD_MIN and dead > live:
            conn.execute(f"VACUUM (SKIP_LOCKED, ANALYZE) {name}")  # a name of CHURNED, never input
            vacuumed.append(name)
    return vacuumed
