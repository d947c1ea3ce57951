"""The PostgreSQL store's workflows (``engine/workflows.py`` has the model; the tables and the triggers that
settle a node in the statement that ends its job are in ``workflow_schema.py``).

A workflow's id is a job id (``qm_job_ids``), so it is unique and its low byte names the store's one shard.
``put`` writes the workflow, its nodes and its roots' jobs in one transaction (the caller's, on
``connection``, as ``enqueue``); ``cancel`` and ``retry_failed`` each run in one transaction and call the
same ``qm_wf_settle`` the triggers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import workflows as wf
from ...job import CANCEL_KEY, CORRUPTED
from ..contract.workflows import NodeData, NodeRef, check_changes
from . import workflow_rewrite
from .rows import micros, pack_key
from .schema import FAILED, PENDING, RUNNING, SCHEDULED
from .sql import tally
from .workflow_reopen import locked_nodes, node_of_row, save_reopened

_NODES = """
INSERT INTO qm_workflow_nodes (workflow_id, idx, name, parents, children, always, waiting, state, payload,
    queue, job_name, priority, max_retries, timeout, partition_key, metadata)
SELECT %(wf)s, t.idx - 1, t.name, t.parents::integer[], t.children::integer[], t.always, t.waiting, 'waiting',
    t.payload, t.queue, t.job_name, t.priority, t.max_retries, t.timeout, t.partition_key, t.metadata::jsonb
FROM unnest(%(names)s::text[], %(parents)s::text[], %(children)s::text[], %(always)s::boolean[],
            %(waiting)s::integer[], %(payloads)s::bytea[], %(queues)s::text[], %(job_names)s::text[],
            %(priorities)s::smallint[], %(max_retries)s::integer[], %(timeouts)s::float8[],
            %(keys)s::bytea[], %(metadata)s::text[])
     WITH ORDINALITY AS t(name, parents, children, always, waiting, payload, queue, job_name, priority,
                          max_retries, timeout, partition_key, metadata, idx)
"""

_ROOTS = f"""
WITH roots AS (SELECT idx, nextval('qm_job_ids') AS id FROM qm_workflow_nodes
               WHERE workflow_id = %(wf)s AND waiting = 0 ORDER BY idx),
ins AS (
    INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, max_retries, enqueued_us, timeout,
                         partition_key, payload, metadata)
    SELECT r.id, {PENDING}, n.queue, n.job_name, n.priority, %(now)s, n.max_retries, %(now)s, n.timeout,
           n.partition_key, n.payload, n.metadata
    FROM roots r JOIN qm_workflow_nodes n ON n.workflow_id = %(wf)s AND n.idx = r.idx
    ORDER BY r.id
    RETURNING id, queue),
upd AS (UPDATE qm_workflow_nodes n SET state = 'queued', job_id = r.id, payload = NULL, metadata = NULL
        FROM roots r WHERE n.workflow_id = %(wf)s AND n.idx = r.idx),
{tally(("ins", str(PENDING), 1), ("ins", "-1", 1), journal=True)}
SELECT count(*), pg_notify(%(channel)s, '') FROM ins
"""

_GET_HEAD = "SELECT created_us, cancelled FROM qm_workflows WHERE id = %s"
_GET_NODES = """
SELECT name, parents, children, always, waiting, state, job_id, doomed, error
FROM qm_workflow_nodes WHERE workflow_id = %s ORDER BY idx"""
_STATUS_OF = """CASE WHEN EXISTS (SELECT 1 FROM qm_workflow_nodes n WHERE n.workflow_id = w.id
                         AND n.state IN ('waiting', 'queued')) THEN 'running'
            WHEN w.cancelled THEN 'cancelled'
            WHEN EXISTS (SELECT 1 FROM qm_workflow_nodes n WHERE n.workflow_id = w.id
                         AND n.state IN ('failed', 'cancelled')) THEN 'failed'
            ELSE 'succeeded' END"""
_STATUS = f"SELECT {_STATUS_OF} FROM qm_workflows w"
_COUNTS = f"SELECT s, count(*) FROM (SELECT {_STATUS_OF} AS s FROM qm_workflows w) t GROUP BY s"
# A chord's callback asks for every member's result: ``idx = ANY(array)`` would test each row against the
# whole array, 10,000 by 10,000 for a chord of 10,000 (0.2 to 0.4 s on the server). The indexes asked for
# are read as a range along the primary key when they fill half of it or more (a chord's: 22 ms for 10,000),
# else joined as a set.
_RESULTS_RANGE = """
SELECT idx, result FROM qm_workflow_nodes
WHERE workflow_id = %s AND idx BETWEEN %s AND %s AND result IS NOT NULL"""
_RESULTS_SET = """
SELECT n.idx, n.result FROM (SELECT DISTINCT unnest(%s::integer[]) AS idx) want
JOIN qm_workflow_nodes n ON n.workflow_id = %s AND n.idx = want.idx"""
_SETTLE = "SELECT qm_wf_settle(%s, %s, 'cancelled', NULL, %s, %s)"

_CANCEL_JOB = f"""
WITH gone AS (DELETE FROM qm_jobs WHERE id = %(id)s AND state IN ({PENDING}, {SCHEDULED})
              RETURNING id, queue, state),
unmark AS (DELETE FROM qm_cancels c USING gone WHERE c.job_id = gone.id),
{tally(("gone", "state", -1))},
mark AS (INSERT INTO qm_cancels (job_id, requested_us)
         SELECT id, %(now)s FROM qm_jobs WHERE id = %(id)s AND state = {RUNNING}
         ON CONFLICT (job_id) DO UPDATE SET requested_us = EXCLUDED.requested_us RETURNING job_id),
note AS (UPDATE qm_jobs SET metadata = coalesce(metadata, '{{}}'::jsonb) || jsonb_build_object(
             '{CANCEL_KEY}', jsonb_build_object('by', %(by)s::text, 'at', %(now)s::float8 / 1000000))
         WHERE id = %(id)s AND state = {RUNNING} AND coalesce(jsonb_typeof(metadata), 'object') = 'object')
SELECT (SELECT count(*) FROM mark)
"""
_LIVE = "SELECT count(*) FROM qm_workflow_nodes WHERE workflow_id = %s AND state IN ('waiting', 'queued')"

_FORGET = """
DELETE FROM qm_workflows w WHERE w.id IN (
    SELECT id FROM qm_workflows w2 WHERE w2.created_us <= %s AND NOT EXISTS (
        SELECT 1 FROM qm_workflow_nodes n WHERE n.workflow_id = w2.id AND n.state IN ('waiting', 'queued'))
    LIMIT %s)"""


def _array(values: Sequence[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


class PgWorkflows:
    """``WorkflowOps`` of the PostgreSQL store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def put(self, now: float, shard: int, nodes: Sequence[wf.NewNode], connection: Any = None) -> int:
        stored = wf.new_nodes(nodes)
        db = self.store.db
        if connection is not None:
            from .connection import savepoint

            with db.guard(connection, drop=False), savepoint(connection):
                return self._put_on(connection, now, nodes, stored)
        with db.transaction() as conn:
            return self._put_on(conn, now, nodes, stored)

    def _put_on(self, conn: Any, now: float, nodes: Sequence[wf.NewNode], stored: list[wf.Node]) -> int:
        now_us = micros(now)
        workflow_id = int(conn.execute("SELECT nextval('qm_job_ids')").fetchone()[0])
        conn.execute(
            "INSERT INTO qm_workflows (id, created_us, nodes) VALUES (%s, %s, %s)",
            (workflow_id, now_us, len(stored)),
        )
        specs = [node.spec for node in nodes]
        conn.execute(
            _NODES,
            {
                "wf": workflow_id,
                "names": [n.name for n in stored],
                "parents": [_array(n.parents) for n in stored],
                "children": [_array(n.children) for n in stored],
                "always": [n.always for n in stored],
                "waiting": [n.waiting for n in stored],
                "payloads": [n.payload for n in stored],
                "queues": [s.queue for s in specs],
                "job_names": [s.name for s in specs],
                "priorities": [s.priority for s in specs],
                "max_retries": [s.max_retries for s in specs],
                "timeouts": [s.timeout for s in specs],
                "keys": [pack_key(s.partition_key) for s in specs],
                "metadata": [wf.node_metadata(s, workflow_id, at).decode() for at, s in enumerate(specs)],
            },
        )
        conn.execute(_ROOTS, self.store.params(wf=workflow_id, now=now_us))
        return workflow_id

    def get(self, now: float, workflow_id: int) -> wf.WorkflowInfo | None:
        with self.store.db.transaction() as conn:
            head = conn.execute(_GET_HEAD, (workflow_id,)).fetchone()
            if head is None:
                return None
            rows = conn.execute(_GET_NODES, (workflow_id,)).fetchall()
        nodes = [node_of_row(row) for row in rows]
        return wf.info(workflow_id, head[0] / 1_000_000, head[1], nodes)

    def status(self, workflow_id: int) -> wf.Status | None:
        row = self.store.one(_STATUS + " WHERE w.id = %s", (workflow_id,))
        return None if row is None else wf.Status(row[0])

    def counts(self) -> dict[str, int]:
        conn = self.store.db.connection()
        with self.store.db.guard(conn):
            found = dict(conn.execute(_COUNTS).fetchall())
        return {status.value: int(found.get(status.value, 0)) for status in wf.Status}

    def results(self, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
        conn = self.store.db.connection()
        with self.store.db.guard(conn):
            if not indexes:
                return []
            low, high = min(indexes), max(indexes)
            if 2 * len(set(indexes)) >= high - low + 1:
                rows = conn.execute(_RESULTS_RANGE, (workflow_id, low, high)).fetchall()
            else:
                rows = conn.execute(_RESULTS_SET, (list(indexes), workflow_id)).fetchall()
            found = dict(rows)
        return [None if found.get(at) is None else bytes(found[at]) for at in indexes]

    def cancel(self, now: float, workflow_id: int, by: str | None = None) -> int:
        now_us = micros(now)
        with self.store.db.transaction() as conn:
            if (
                conn.execute(
                    "UPDATE qm_workflows SET cancelled = true WHERE id = %s RETURNING 1", (workflow_id,)
                ).fetchone()
                is None
            ):
                return 0
            rows = conn.execute(
                "SELECT idx, state, job_id FROM qm_workflow_nodes WHERE workflow_id = %s "
                "ORDER BY idx FOR UPDATE",
                (workflow_id,),
            ).fetchall()
            live = _LIVE
            before = conn.execute(live, (workflow_id,)).fetchone()[0]
            requested = 0
            for idx, state, job_id in rows:
                if state == wf.NodeState.WAITING:
                    conn.execute(_SETTLE, (workflow_id, idx, "cancelled: the workflow was cancelled", now_us))
                elif state == wf.NodeState.QUEUED and job_id is not None:
                    params = self.store.params(id=job_id, now=now_us, by=by)
                    requested += int(conn.execute(_CANCEL_JOB, params).fetchone()[0])
            return int(before - conn.execute(live, (workflow_id,)).fetchone()[0] + requested)

    def retry_failed(self, now: float, workflow_id: int) -> int:
        from .upkeep import _REQUEUE

        now_us = micros(now)
        with self.store.db.transaction() as conn:
            if (
                conn.execute("SELECT 1 FROM qm_workflows WHERE id = %s FOR UPDATE", (workflow_id,)).fetchone()
                is None
            ):
                return 0
            nodes = locked_nodes(conn, workflow_id)

            def requeue(at: int, node: wf.Node) -> bool:
                found = conn.execute(
                    f"SELECT 1 FROM qm_finished WHERE id = %s AND state = {FAILED} "
                    f"AND error_type IS DISTINCT FROM '{CORRUPTED}'",
                    (node.job_id,),
                ).fetchone()
                if found is None:
                    return False
                return (
                    conn.execute(_REQUEUE, self.store.params(id=node.job_id, now=now_us)).fetchone()[0]
                    is not None
                )

            changed, recounted = wf.reopen(nodes, requeue)
            save_reopened(conn, workflow_id, nodes, [*changed, *recounted])
        if changed:
            self.store.hints.local()
        return len(changed)

    def forget(self, now: float, cutoff: float, batch: int = 1000) -> int:
        gone = 0
        while True:
            conn = self.store.db.connection()
            with self.store.db.guard(conn):
                count = int(conn.execute(_FORGET, (micros(cutoff), batch)).rowcount)
            gone += count
            if count < batch:
                return gone

    def export_nodes(self, shard: int, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
        return workflow_rewrite.export_nodes(self.store, after, limit) if shard == 0 else []

    def rewrite(self, shard: int, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
        check_changes(changes)
        if shard != 0 or not changes:
            return []
        return workflow_rewrite.rewrite(self.store, changes)
