"""The PostgreSQL store's reopening of a workflow's nodes (``workflows.reopen``): the rows of a workflow's
nodes read and locked, and those reopened written back; for ``retry_failed`` (``workflows.py``) and for the
requeue of one node's dead letter (``upkeep.requeue``), each in its own transaction.
"""

from __future__ import annotations

from typing import Any

from ... import workflows as wf


def locked_nodes(conn: Any, workflow_id: int) -> list[wf.Node]:
    """The workflow's nodes, each row locked (``FOR UPDATE``) until the transaction ends."""
    rows = conn.execute(
        "SELECT name, parents, children, always, waiting, state, job_id, doomed, error "
        "FROM qm_workflow_nodes WHERE workflow_id = %s ORDER BY idx FOR UPDATE",
        (workflow_id,),
    ).fetchall()
    return [node_of_row(row) for row in rows]


def save_reopened(conn: Any, workflow_id: int, nodes: list[wf.Node], changed: list[int]) -> None:
    for at in changed:
        node = nodes[at]
        conn.execute(
            "UPDATE qm_workflow_nodes SET state = %s, waiting = %s, doomed = %s, error = %s "
            "WHERE workflow_id = %s AND idx = %s",
            (node.state.value, node.waiting, node.doomed, node.error, workflow_id, at),
        )


def requeued(conn: Any, job_id: int) -> None:
    """In the transaction that just requeued the dead letter ``job_id`` by itself: if it is a node, the node
    is queued again and the nodes cancelled because of it wait on it again (``workflows.reopen``)."""
    row = conn.execute(
        "SELECT (metadata -> '_workflow' ->> 0)::bigint, (metadata -> '_workflow' ->> 1)::integer "
        "FROM qm_jobs WHERE id = %s AND jsonb_typeof(metadata -> '_workflow') = 'array'",
        (job_id,),
    ).fetchone()
    if row is None:
        return
    workflow_id, index = row
    if conn.execute("SELECT 1 FROM qm_workflows WHERE id = %s FOR UPDATE", (workflow_id,)).fetchone() is None:
        return
    nodes = locked_nodes(conn, workflow_id)
    if 0 <= index < len(nodes):
        changed, recounted = wf.reopen(nodes, lambda at, node: False, only=index)
        save_reopened(conn, workflow_id, nodes, [*changed, *recounted])


def node_of_row(row: tuple[Any, ...]) -> wf.Node:
    """A ``qm_workflow_nodes`` row as read by ``_GET_NODES`` and the retry's read: the node it stores."""
    name, parents, children, always, waiting, state, job_id, doomed, error = row
    return wf.Node(
        name, list(parents), list(children), always, waiting, wf.NodeState(state), job_id, doomed, error=error
    )
