"""``Store.transfer`` of the PostgreSQL store (``stores/contract/transfer.py``): its jobs as ``MovedJob``
values and back. An insert is one transaction: the rows (``qm_jobs`` for waiting jobs, ``qm_finished`` for
done jobs and dead letters), a limited job's group and turn (as ``concurrency.limit_new`` writes them), the
cancel marks, the counters (as a put counts), the ids in ``qm_moved`` (schema version 7), and the job id
sequence raised past every id it wrote: later puts get larger ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...concurrency import group_of
from ...errors import InvalidJob
from ...job import CANCELLED, SHARD_BITS, STATE_CODE, STATES, State
from ..contract.transfer import MovedJob, SealedFields, TransferConflict, UniqueEntry
from .rows import CLAIM_ALONE_NEXT
from .schema import CANCELLED as CANCELLED_COUNT
from .schema import CANCELLED_LEFT, DONE, DONE_LEFT, FAILED, FAILED_LEFT, PENDING, SCHEDULED, TOTAL
from .sql import Statements, slot

_LEFT = {DONE: DONE_LEFT, FAILED: FAILED_LEFT}  # the counter of the jobs that left each finished state

_EXPORT = f"""
SELECT * FROM (
    SELECT id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us, ready_us,
           started_us, NULL::bigint AS finished_us, timeout, partition_key, payload, NULL::bytea AS result,
           error, error_type, traceback, worker_ids, error_types, error_msgs, metadata::text,
           climits, cns, claim
    FROM qm_jobs WHERE state IN ({PENDING}, {SCHEDULED}) AND (%(after)s::bigint IS NULL OR id > %(after)s)
    ORDER BY id LIMIT %(limit)s) live
UNION ALL
SELECT * FROM (
    SELECT id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us, 0, started_us,
           finished_us, timeout, partition_key, payload, result, error, error_type, traceback, worker_ids,
           error_types, error_msgs, metadata::text, climits, cns, NULL::smallint
    FROM qm_finished WHERE %(after)s::bigint IS NULL OR id > %(after)s ORDER BY id LIMIT %(limit)s) ended
ORDER BY id LIMIT %(limit)s
"""

_LIVE = """
INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, retries, max_retries, attempts, enqueued_us,
                     started_us, timeout, partition_key, payload, worker_ids, error_types, error_msgs, error,
                     error_type, traceback, metadata, claim, cgroup, climits, cns)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::text::jsonb, %s,
        %s, %s, %s)
"""

_FINISHED = """
INSERT INTO qm_finished (id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us,
                         started_us, finished_us, timeout, partition_key, payload, result, worker_ids,
                         error_types, error_msgs, error, error_type, traceback, metadata, cgroup, climits,
                         cns)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::text::jsonb,
        %s, %s, %s)
"""

_UNIQUE = """
INSERT INTO qm_unique (key, job_id, used_us, hold, until_us) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (key) DO NOTHING
"""

_COUNT = """
INSERT INTO qm_counts (queue, state, slot, n) VALUES (%s, %s, %s, %s)
ON CONFLICT (queue, state, slot) DO UPDATE SET n = qm_counts.n + EXCLUDED.n
"""

_REMOVE = f"""
WITH a AS (DELETE FROM qm_jobs WHERE id = ANY(%(ids)s) AND state IN ({PENDING}, {SCHEDULED})
           RETURNING id, queue, state, NULL::text AS error_type),
b AS (DELETE FROM qm_finished WHERE id = ANY(%(ids)s) RETURNING id, queue, state, error_type),
gone AS (SELECT * FROM a UNION ALL SELECT * FROM b),
c AS (DELETE FROM qm_cancels WHERE job_id IN (SELECT id FROM gone)),
counts AS (SELECT queue, state, count(*) AS n, count(*) FILTER (WHERE error_type = %(cancelled)s) AS nc
           FROM gone GROUP BY queue, state)
SELECT queue, state, n, nc FROM counts
"""


_REWRITE = """
UPDATE {table} SET payload = %(payload)s, {result} error = %(error)s, traceback = %(traceback)s,
       error_msgs = %(msgs)s, error_types = %(types)s, metadata = %(metadata)s::text::jsonb
WHERE id = %(id)s AND state <> {running} AND payload = %(old_payload)s {old_result}
  AND error IS NOT DISTINCT FROM %(old_error)s AND traceback IS NOT DISTINCT FROM %(old_traceback)s
  AND coalesce(error_msgs, '{{}}') = %(old_msgs)s AND coalesce(error_types, '{{}}') = %(old_types)s
  AND metadata IS NOT DISTINCT FROM %(old_metadata)s::text::jsonb
RETURNING id
"""
_RUNNING = STATE_CODE[State.RUNNING]
_REWRITES = (
    _REWRITE.format(table="qm_jobs", result="", old_result="", running=_RUNNING),
    _REWRITE.format(table="qm_finished", result="result = %(result)s,",
                    old_result="AND result IS NOT DISTINCT FROM %(old_result)s", running=_RUNNING),
)  # fmt: skip


class PgTransfer:
    def __init__(self, store: Statements) -> None:
        self._store = store

    def export(self, shard: int, after: int | None, limit: int) -> list[MovedJob]:
        if shard != 0:
            return []
        with self._store.db.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows = conn.execute(_EXPORT, {"after": after, "limit": limit}).fetchall()
            ids = [row[0] for row in rows]
            marks = dict(conn.execute("SELECT job_id, requested_us FROM qm_cancels WHERE job_id = ANY(%s)",
                                      (ids,)).fetchall())  # fmt: skip
        return [_moved(row, marks.get(row[0])) for row in rows]

    def unique_entries(self, shard: int) -> list[tuple[int, UniqueEntry]]:
        if shard != 0:
            return []
        rows = self._store.rows("SELECT key, job_id, used_us, hold, until_us FROM qm_unique", {})
        return [(job_id, UniqueEntry(bytes(key), used_us, hold, until_us))
                for key, job_id, used_us, hold, until_us in rows]  # fmt: skip

    def insert(self, jobs: Sequence[MovedJob]) -> list[int]:
        for job in jobs:
            if job.state is State.RUNNING:
                raise InvalidJob(f"job {job.job_id}: a running job cannot be moved")
        if not jobs:
            return []
        store = self._store
        with store.db.transaction() as conn:
            ids = [job.job_id for job in jobs]
            conn.execute("LOCK TABLE qm_moved IN SHARE ROW EXCLUSIVE MODE")  # two moves at once: one waits
            marked = {row[0] for row in conn.execute("SELECT id FROM qm_moved WHERE id = ANY(%s)", (ids,))}
            fresh = [job for job in jobs if job.job_id not in marked]
            if not fresh:
                return []
            fresh_ids = [job.job_id for job in fresh]
            taken = conn.execute(
                "SELECT id FROM qm_jobs WHERE id = ANY(%(ids)s) UNION ALL "
                "SELECT id FROM qm_finished WHERE id = ANY(%(ids)s) LIMIT 1",
                {"ids": fresh_ids},
            ).fetchone()
            if taken is not None:
                raise TransferConflict(f"job {taken[0]} is in the target store already, not by a move")
            live = [job for job in fresh if job.state in (State.PENDING, State.SCHEDULED)]
            ended = [job for job in fresh if job.state in (State.DONE, State.FAILED)]
            cur = conn.cursor()
            if live:
                cur.executemany(_LIVE, [_live_row(job) for job in live])
                groups = sorted({group_of(job.queue, job.limits) for job in live
                                 if job.limits is not None and job.state is State.PENDING})  # fmt: skip
                for group in groups:
                    conn.execute("INSERT INTO qm_turns (grp, turn) VALUES (%s, nextval('qm_turn_seq')) "
                                 "ON CONFLICT (grp) DO NOTHING", (group,))  # fmt: skip
            if ended:
                cur.executemany(_FINISHED, [_finished_row(job) for job in ended])
            entries = [(u.key, job.job_id, u.used_us, u.hold, u.until_us)
                       for job in fresh if (u := job.unique) is not None]  # fmt: skip
            if entries:
                cur.executemany(_UNIQUE, entries)
            marks = [(job.job_id, job.cancel_us) for job in fresh if job.cancel_us is not None]
            if marks:
                cur.executemany("INSERT INTO qm_cancels (job_id, requested_us) VALUES (%s, %s)", marks)
            counts: dict[tuple[str, int], int] = {}
            for job in fresh:
                for key in ((job.queue, STATE_CODE[job.state]), (job.queue, TOTAL)):
                    counts[key] = counts.get(key, 0) + 1
                if job.state is State.FAILED and job.error_type == CANCELLED:
                    counts[job.queue, CANCELLED_COUNT] = counts.get((job.queue, CANCELLED_COUNT), 0) + 1
            mine = slot()
            cur.executemany(_COUNT, [(queue, state, mine, n) for (queue, state), n in sorted(counts.items())])
            cur.executemany("INSERT INTO qm_moved (id) VALUES (%s)", [(job_id,) for job_id in fresh_ids])
            # The sequence counts in 256s: from a multiple of 256 its next id is past every id written.
            top = max(fresh_ids) >> SHARD_BITS << SHARD_BITS
            conn.execute("SELECT setval('qm_job_ids', %(top)s) WHERE %(top)s > "
                         "(SELECT last_value FROM qm_job_ids)", {"top": top})  # fmt: skip
            if live:
                conn.execute("SELECT pg_notify(%(channel)s, '') WHERE %(notify)s", store.params())
        store.hints.local()
        return fresh_ids

    def remove(self, shard: int, ids: Sequence[int]) -> int:
        if shard != 0 or not ids:
            return 0
        with self._store.db.transaction() as conn:
            rows = conn.execute(_REMOVE, {"ids": list(ids), "cancelled": CANCELLED}).fetchall()
            counts: dict[tuple[str, int], int] = {}
            for queue, state, n, cancelled in rows:
                counts[queue, state] = counts.get((queue, state), 0) - n
                if state in (DONE, FAILED):
                    left = _LEFT[state]
                    counts[queue, left] = counts.get((queue, left), 0) + n
                if cancelled:
                    counts[queue, CANCELLED_COUNT] = counts.get((queue, CANCELLED_COUNT), 0) - cancelled
                    counts[queue, CANCELLED_LEFT] = counts.get((queue, CANCELLED_LEFT), 0) + cancelled
            mine = slot()
            conn.cursor().executemany(
                _COUNT, [(queue, state, mine, n) for (queue, state), n in sorted(counts.items()) if n]
            )
        return sum(row[2] for row in rows)

    def forget_marks(self) -> int:
        with self._store.db.transaction() as conn:
            return int(conn.execute("WITH d AS (DELETE FROM qm_moved RETURNING 1) SELECT count(*) FROM d")
                       .fetchone()[0])  # fmt: skip

    def marks(self) -> int:
        return int(self._store.one("SELECT count(*) FROM qm_moved", {})[0])

    def rewrite(self, shard: int, changes: Sequence[tuple[int, SealedFields, SealedFields]]) -> list[int]:
        if shard != 0 or not changes:
            return []
        done: list[int] = []
        with self._store.db.transaction() as conn:
            for job_id, old, new in changes:
                params = {
                    "id": job_id, "payload": new.payload, "result": new.result, "error": new.error,
                    "traceback": new.traceback, "msgs": [m for _t, m in new.errors],
                    "types": [t for t, _m in new.errors],
                    "metadata": None if new.metadata is None else new.metadata.decode(),
                    "old_payload": old.payload, "old_result": old.result, "old_error": old.error,
                    "old_traceback": old.traceback, "old_msgs": [m for _t, m in old.errors],
                    "old_types": [t for t, _m in old.errors],
                    "old_metadata": None if old.metadata is None else old.metadata.decode(),
                }  # fmt: skip
                for statement in _REWRITES:
                    if conn.execute(statement, params).fetchone() is not None:
                        done.append(job_id)
                        break
        return done


def _moved(row: tuple[Any, ...], cancel_us: int | None) -> MovedJob:
    (job_id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us, ready_us, started_us,
     finished_us, timeout, partition_key, payload, result, error, error_type, traceback, worker_ids,
     error_types, error_msgs, metadata, climits, cns, claim) = row  # fmt: skip
    return MovedJob(
        job_id, STATES[state], queue, name, priority, retries, max_retries, attempts, enqueued_us,
        ready_us or 0, started_us, finished_us, timeout,
        None if partition_key is None else bytes(partition_key), bytes(payload or b""),
        None if result is None else bytes(result), error, error_type, traceback,
        tuple(worker_ids or ()), tuple(zip(error_types or (), error_msgs or (), strict=False)),
        None if metadata is None else metadata.encode(),
        None if climits is None else tuple(zip(climits, cns, strict=True)), claim == CLAIM_ALONE_NEXT,
        cancel_us,
    )  # fmt: skip


def _live_row(job: MovedJob) -> tuple[Any, ...]:
    limited = job.limits is not None
    return (
        job.job_id, STATE_CODE[job.state], job.queue, job.name, job.priority, job.ready_us, job.retries,
        job.max_retries, job.attempts, job.enqueued_us, job.started_us, job.timeout, job.partition_key,
        job.payload, list(job.worker_ids), [t for t, _m in job.errors], [m for _t, m in job.errors],
        job.error, job.error_type, job.traceback, None if job.metadata is None else job.metadata.decode(),
        CLAIM_ALONE_NEXT if job.alone_next else None,
        group_of(job.queue, job.limits) if limited else None,  # type: ignore[arg-type]
        [key for key, _n in job.limits] if limited else None,  # type: ignore[union-attr]
        [n for _key, n in job.limits] if limited else None,  # type: ignore[union-attr]
    )  # fmt: skip


def _finished_row(job: MovedJob) -> tuple[Any, ...]:
    limited = job.limits is not None  # a dead letter keeps its limits for a requeue (schema version 8)
    return (
        job.job_id, STATE_CODE[job.state], job.queue, job.name, job.priority, job.retries, job.max_retries,
        job.attempts, job.enqueued_us, job.started_us, job.finished_us, job.timeout, job.partition_key,
        job.payload, job.result, list(job.worker_ids), [t for t, _m in job.errors],
        [m for _t, m in job.errors], job.error, job.error_type, job.traceback,
        None if job.metadata is None else job.metadata.decode(),
        group_of(job.queue, job.limits) if limited else None,  # type: ignore[arg-type]
        [key for key, _n in job.limits] if limited else None,  # type: ignore[union-attr]
        [n for _key, n in job.limits] if limited else None,  # type: ignore[union-attr]
    )  # fmt: skip
