"""The PostgreSQL store's reads: a job, listings, counts, queue counts, and ``verify``. Each is one
statement (a snapshot of its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import codec
from ...errors import InvalidJob, QueueCorrupted
from ...job import CORRUPTED, STATE_CODE, Job, State
from .rows import FINISHED, LIVE_AS_FINISHED, as_job
from .schema import CANCELLED, DONE, FAILED, PENDING, RUNNING, SCHEDULED, TOTAL

if TYPE_CHECKING:
    from .sql import Statements

# Each state is listed in the order its index keeps: pending in claim order, scheduled by ETA, done by
# finish time, running and failed by id (as on LMDB). (table, columns, the sort key's columns, ascending
# direction of each: -1 for DESC).
_LISTING: dict[State, tuple[str, str, tuple[str, ...], tuple[int, ...]]] = {
    State.PENDING: ("qm_jobs", LIVE_AS_FINISHED, ("priority", "ready_us", "id"), (-1, 1, 1)),
    State.SCHEDULED: ("qm_jobs", LIVE_AS_FINISHED, ("ready_us", "id"), (1, 1)),
    State.RUNNING: ("qm_jobs", LIVE_AS_FINISHED, ("id",), (1,)),
    State.DONE: ("qm_finished", FINISHED, ("finished_us", "id"), (1, 1)),
    State.FAILED: ("qm_finished", FINISHED, ("id",), (1,)),
}


def job(store: Statements, job_id: int) -> Job | None:
    row = store.one(
        f"SELECT {LIVE_AS_FINISHED} FROM qm_jobs WHERE id = %(id)s "
        f"UNION ALL SELECT {FINISHED} FROM qm_finished WHERE id = %(id)s",
        {"id": job_id},
    )
    return None if row is None else as_job(row)


def list_jobs(
    store: Statements,
    state: State,
    *,
    queue: str | None,
    name: str | None,
    after: int | None,
    limit: int,
    newest_first: bool,
) -> list[Job]:
    """Up to ``limit`` jobs in ``state`` in the order of its listing (reversed: ``newest_first``), from
    after job ``after`` (which must still exist, in any state: ``InvalidJob`` otherwise)."""
    table, columns, keys, directions = _LISTING[state]
    params: dict[str, object] = {"queue": queue, "name": name, "limit": limit}
    where = [f"state = {STATE_CODE[state]}"]  # a literal: the partial index of the state applies
    if queue is not None:
        where.append("queue = %(queue)s")
    if name is not None:
        where.append("name = %(name)s")
    if after is not None:
        position = _position(store, state, after)
        if position is None:
            raise InvalidJob(
                f"after={after}: that job no longer exists, so the listing cannot go on from it; list again "
                f"from the start"
            )
        # Strictly past ``position`` in the listing's order: (k1 past v1) or (k1 = v1 and k2 past v2) ...
        terms = []
        for i, (key, direction) in enumerate(zip(keys, directions, strict=True)):
            past = ">" if (direction > 0) != newest_first else "<"
            equal = [f"{keys[j]} = %(after_{j})s" for j in range(i)]
            terms.append("(" + " AND ".join([*equal, f"{key} {past} %(after_{i})s"]) + ")")
            params[f"after_{i}"] = position[i]
        where.append("(" + " OR ".join(terms) + ")")
    order = ", ".join(
        f"{key} {'ASC' if (direction > 0) != newest_first else 'DESC'}"
        for key, direction in zip(keys, directions, strict=True)
    )
    sql = f"SELECT {columns} FROM {table} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT %(limit)s"
    return [as_job(row) for row in store.rows(sql, params)]


def _position(store: Statements, state: State, job_id: int) -> list[int] | None:
    """Where ``job_id`` sorts in the listing of ``state``, from its row in whatever state it is now (None
    when that cannot be known: the row is gone, or has no such time)."""
    if state in (State.RUNNING, State.FAILED):
        return [job_id]  # listed by id: a job's id is its place, whether or not the job is still there
    if state is State.DONE:
        row = store.one("SELECT finished_us FROM qm_finished WHERE id = %s", (job_id,))
        return None if row is None else [row[0], job_id]
    row = store.one(
        "SELECT priority, ready_us FROM qm_jobs WHERE id = %(id)s "
        "UNION ALL SELECT priority, NULL FROM qm_finished WHERE id = %(id)s",
        {"id": job_id},
    )
    if row is None or row[1] is None:
        return None
    return [row[0], row[1], job_id] if state is State.PENDING else [row[1], job_id]


VERIFY_BATCH = 1000

_COUNTS = "SELECT state, sum(n)::bigint FROM qm_counts GROUP BY state"


def counts(store: Statements) -> dict[str, int]:
    """Jobs per state and ``total`` puts ever, from the counter rows: no scan of a job table."""
    out: dict[str, int] = {state.value: 0 for state in State}
    out["total"] = out["cancelled"] = 0
    for code, count in store.rows(_COUNTS, None):
        if code == TOTAL:
            out["total"] = count
        elif code == CANCELLED:
            out["cancelled"] = count
        elif 0 <= code < len(State):
            out[list(State)[code].value] = count
    return out


def queue_counts(store: Statements) -> dict[str, dict[str, int]]:
    """Per queue with live jobs: pending, scheduled and running, from the counter rows."""
    rows = store.rows(
        f"SELECT queue, state, sum(n)::bigint FROM qm_counts "
        f"WHERE state IN ({PENDING}, {SCHEDULED}, {RUNNING}) GROUP BY queue, state HAVING sum(n) <> 0",
        None,
    )
    out: dict[str, dict[str, int]] = {}
    names = {PENDING: "pending", SCHEDULED: "scheduled", RUNNING: "running"}
    for queue, code, count in rows:
        out.setdefault(queue, {"pending": 0, "scheduled": 0, "running": 0})[names[code]] = count
    return dict(sorted(out.items()))


# Per queue with pending jobs (from the counter rows), the priorities in use by a skip scan of the
# (queue, priority DESC, ready_us, id) index, then each priority's first entry: one index probe per queue and
# priority in use, whatever the number of jobs (a GROUP BY would read every pending job's entry).
_OLDEST = f"""
WITH RECURSIVE waiting AS (
    SELECT queue FROM qm_counts WHERE state = {PENDING} GROUP BY queue HAVING sum(n) > 0),
levels(queue, priority) AS (
    SELECT w.queue, (SELECT j.priority FROM qm_jobs j WHERE j.state = {PENDING} AND j.queue = w.queue
                     ORDER BY j.priority DESC LIMIT 1) FROM waiting w
    UNION ALL
    SELECT l.queue, (SELECT j.priority FROM qm_jobs j WHERE j.state = {PENDING} AND j.queue = l.queue
                     AND j.priority < l.priority ORDER BY j.priority DESC LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT l.queue, min((SELECT j.ready_us FROM qm_jobs j WHERE j.state = {PENDING} AND j.queue = l.queue
                     AND j.priority = l.priority ORDER BY j.ready_us LIMIT 1))
FROM levels l WHERE l.priority IS NOT NULL GROUP BY l.queue ORDER BY l.queue
"""


def oldest_pending(store: Statements) -> dict[str, float]:
    """Per queue with pending jobs: its longest-waiting one's ready time (unix seconds)."""
    rows = store.rows(_OLDEST, None)
    return {queue: ready_us / 1_000_000 for queue, ready_us in rows if ready_us is not None}


_CHECK = """
WITH actual AS (
    SELECT queue, state, count(*) AS n FROM qm_jobs GROUP BY queue, state
    UNION ALL SELECT queue, state, count(*) FROM qm_finished GROUP BY queue, state),
kept AS (SELECT queue, state, sum(n) AS n FROM qm_counts WHERE state >= 0 GROUP BY queue, state)
SELECT coalesce(a.queue, k.queue), coalesce(a.state, k.state), coalesce(a.n, 0), coalesce(k.n, 0)
FROM actual a FULL JOIN kept k ON a.queue = k.queue AND a.state = k.state
WHERE coalesce(a.n, 0) <> coalesce(k.n, 0)
"""


def verify(store: Statements) -> list[str]:
    """Compare the counter rows with the jobs (a scan of both tables: for ``queue_check``, not a hot path),
    and check that every running job has a lease (also a CHECK constraint). -> problems found."""
    problems = []
    for queue, code, actual, kept in store.rows(_CHECK, None):
        state = list(State)[code].value
        problems.append(f"queue {queue!r}: {actual} {state} jobs, but the counters say {kept}")
    leaseless = store.one(f"SELECT count(*) FROM qm_jobs WHERE state = {RUNNING} AND lease_us IS NULL", None)[
        0
    ]
    if leaseless:
        problems.append(f"{leaseless} running jobs have no lease")
    stray = store.one(f"SELECT count(*) FROM qm_finished WHERE state NOT IN ({DONE}, {FAILED})", None)[0]
    if stray:
        problems.append(f"{stray} finished jobs are in a live state")
    problems.extend(_undecodable(store))
    return problems


def _undecodable(store: Statements) -> list[str]:
    """Every payload, result and partition key that does not decode, and metadata that is not a JSON
    object (a scan, in batches of ``VERIFY_BATCH`` rows by id)."""
    problems: list[str] = []
    # A dead letter quarantined for its data (error type "Corrupted") keeps it on purpose: not a problem.
    for table, result, known in (
        ("qm_jobs", "NULL::bytea", ""),
        ("qm_finished", "result", f" AND error_type IS DISTINCT FROM '{CORRUPTED}'"),
    ):
        after = 0
        while True:
            rows = store.rows(
                f"SELECT id, payload, {result}, partition_key, jsonb_typeof(metadata) FROM {table} "
                f"WHERE id > %s{known} ORDER BY id LIMIT {VERIFY_BATCH}",
                (after,),
            )
            for job_id, payload, result_bytes, key, metadata_type in rows:
                for what, raw in (("payload", payload), ("result", result_bytes), ("partition key", key)):
                    if raw is None:
                        continue
                    try:
                        codec.unpack_stored(bytes(raw), job_id, what)
                    except QueueCorrupted as exc:
                        problems.append(str(exc))
                if metadata_type not in (None, "object"):
                    problems.append(
                        f"job {job_id}: the stored metadata is not a JSON object (a JSON {metadata_type})"
                    )
            if len(rows) < VERIFY_BATCH:
                break
            after = rows[-1][0]
    return problems
