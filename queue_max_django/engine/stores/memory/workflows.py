"""The in-memory store's workflows (``engine/workflows.py`` says what a workflow is): the nodes of each
workflow in ``Space.workflows``, settled by ``Space.index``/``Space.remove`` when a node's job ends, under
the lock of the operation that ended it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import workflows as wf
from ...cancels import CancelOutcome
from ...job import State
from ..contract.workflows import NodeData, NodeRef, check_changes, holds
from .space import Row, Space, micros


@dataclass(slots=True)
class Stored:
    created_us: int
    cancelled: bool
    nodes: list[wf.Node]
    live: int = 0  # nodes not ended
    bad: int = 0  # nodes failed or cancelled

    def status(self) -> wf.Status:
        return wf.status_of(self.live, self.bad, self.cancelled)


class MemoryGraph:
    """``workflows.Graph`` over one workflow of a space (its nodes are kept as they are: no encoding)."""

    def __init__(self, space: Space, workflow_id: int, now_us: int) -> None:
        self.space = space
        self.workflow_id = workflow_id
        self.stored = space.workflows[workflow_id]
        self.nodes = self.stored.nodes
        self.now_us = now_us

    def ended(self, state: wf.NodeState) -> None:
        self.stored.live -= 1
        self.stored.bad += state is not wf.NodeState.SUCCEEDED

    def node(self, index: int) -> wf.Node:
        found: wf.Node = self.nodes[index]
        return found

    def save(self, index: int, node: wf.Node) -> None:
        self.nodes[index] = node

    def release(self, index: int, node: wf.Node) -> int:
        assert node.payload is not None and node.spec is not None
        return write_job(self.space, self.now_us, self.workflow_id, index, node.payload, node.spec)


def write_job(
    space: Space, now_us: int, workflow_id: int, index: int, payload: bytes, fields: list[Any]
) -> int:
    """A node's job, pending now (behind the jobs already waiting), counted as a put."""
    spec = wf.spec_of(fields)
    ready_us = space.floor_us = max(now_us, space.floor_us)
    row = Row(space.next_id(now_us), State.PENDING, spec.queue, spec.name, spec.priority, ready_us,
              spec.max_retries, now_us, spec.timeout, spec.partition_key, bytes(payload),
              wf.node_metadata(spec, workflow_id, index))  # fmt: skip
    space.add(row)
    space.enqueued[spec.queue] += 1
    space.hint()
    return row.job_id


def ended(space: Space, row: Row) -> None:
    """``row`` (a job) just entered a state that ends it, or is being removed while it waited: if it is a
    node, settle it (``Space.index`` and ``Space.remove`` call this)."""
    found = wf.node_of(row.metadata)
    if found is None or found[0] not in space.workflows:
        return
    workflow_id, index = found
    if row.state is State.DONE:
        state, result, error = wf.NodeState.SUCCEEDED, row.result, None
    elif row.state is State.FAILED:
        state, result, error = wf.ending(True, row.error_type), None, row.error
    else:  # removed while pending or scheduled: cancelled
        state, result, error = wf.NodeState.CANCELLED, None, "cancelled: its job was removed"
    # a removal is given no time: the store's latest (the ready time of its last put), never the wall clock
    now_us = row.finished_us if row.finished_us is not None else max(space.floor_us, row.enqueued_us)
    wf.settle(MemoryGraph(space, workflow_id, now_us), index, state, result, error)


def put(space: Space, now: float, nodes: Sequence[wf.NewNode]) -> int:
    """Store the workflow, its roots as pending jobs. -> its id."""
    now_us = micros(now)
    stored = wf.new_nodes(nodes)
    workflow_id = space.next_id(now_us)
    space.workflows[workflow_id] = Stored(now_us, False, stored, live=len(stored))
    graph = MemoryGraph(space, workflow_id, now_us)
    for at, node in enumerate(stored):
        if not node.parents:
            node.job_id = graph.release(at, node)
            node.state, node.payload, node.spec = wf.NodeState.QUEUED, None, None
    return workflow_id


def get(space: Space, workflow_id: int) -> wf.WorkflowInfo | None:
    stored = space.workflows.get(workflow_id)
    if stored is None:
        return None
    return wf.info(workflow_id, stored.created_us / 1_000_000, stored.cancelled, stored.nodes)


def results(space: Space, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
    stored = space.workflows.get(workflow_id)
    if stored is None:
        return [None] * len(indexes)
    return [stored.nodes[at].result if 0 <= at < len(stored.nodes) else None for at in indexes]


def cancel(space: Space, now: float, workflow_id: int, by: str | None) -> int:
    """Cancel what has not ended: waiting nodes (settled as cancelled), jobs that wait (removed: settled by
    ``remove``), running jobs (a cancel request). -> how many nodes it reached."""
    from .upkeep import cancel as cancel_job

    stored = space.workflows.get(workflow_id)
    if stored is None:
        return 0
    stored.cancelled = True
    graph = MemoryGraph(space, workflow_id, micros(now))
    live = sum(node.state not in wf.ENDED for node in stored.nodes)
    requested = 0
    for at, node in enumerate(stored.nodes):
        if node.state is wf.NodeState.WAITING:
            wf.settle(graph, at, wf.NodeState.CANCELLED, None, "cancelled: the workflow was cancelled")
        elif node.state is wf.NodeState.QUEUED and node.job_id is not None:
            requested += cancel_job(space, now, node.job_id, by) is CancelOutcome.REQUESTED
    return live - sum(node.state not in wf.ENDED for node in stored.nodes) + requested


def retry_failed(space: Space, now: float, workflow_id: int) -> int:
    """The failed nodes' jobs back to pending, and the nodes cancelled because of them waiting again.
    -> how many nodes started again."""
    from .upkeep import requeue

    stored = space.workflows.get(workflow_id)
    if stored is None:
        return 0

    def again(at: int, node: wf.Node) -> bool:
        return node.job_id is not None and requeue(space, now, node.job_id, node=False)

    changed, _ = wf.reopen(stored.nodes, again)  # (a waiting node recounted is changed in place)
    stored.live += len(changed)
    stored.bad -= len(changed)
    return len(changed)


def requeued(space: Space, row: Row) -> None:
    """``row``'s dead letter was just requeued by itself: if it is a node, queue the node again and let the
    nodes cancelled because of it wait on it (``workflows.reopen``)."""
    found = wf.node_of(row.metadata)
    stored = None if found is None else space.workflows.get(found[0])
    if found is None or stored is None:
        return
    changed, _ = wf.reopen(stored.nodes, lambda at, node: False, only=found[1])
    stored.live += len(changed)
    stored.bad -= len(changed)


def forget(space: Space, cutoff_us: int) -> int:
    """Drop the workflows that ended (every node) and were put at or before ``cutoff_us``. -> how many."""
    gone = [
        workflow_id for workflow_id, stored in space.workflows.items()
        if stored.created_us <= cutoff_us and all(node.state in wf.ENDED for node in stored.nodes)
    ]  # fmt: skip
    for workflow_id in gone:
        del space.workflows[workflow_id]
    return len(gone)


def _data(node: wf.Node) -> NodeData:
    return NodeData(node.payload, None if node.spec is None else node.spec[6], node.result, node.error)


def export_nodes(space: Space, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
    """The nodes that hold user data after ``after``, by (workflow id, index), ``limit`` at most."""
    out: list[tuple[NodeRef, NodeData]] = []
    for workflow_id in sorted(space.workflows):
        if after is not None and workflow_id < after[0]:
            continue
        for at, node in enumerate(space.workflows[workflow_id].nodes):
            ref = (workflow_id, at)
            if after is not None and ref <= after:
                continue
            data = _data(node)
            if data == _EMPTY:
                continue
            if len(out) == limit:
                return out
            out.append((ref, data))
    return out


_EMPTY = NodeData(None, None, None, None)


def rewrite(space: Space, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
    """Each node that holds its change's ``old``: its data replaced by ``new``."""
    done: list[NodeRef] = []
    for (workflow_id, at), old, new in changes:
        stored = space.workflows.get(workflow_id)
        if stored is None or not 0 <= at < len(stored.nodes) or not holds(_data(stored.nodes[at]), old):
            continue
        node = stored.nodes[at]
        node.payload, node.result, node.error = new.payload, new.result, new.error
        if node.spec is not None:
            node.spec = [*node.spec[:6], new.metadata]
        done.append((workflow_id, at))
    return done


class MemoryWorkflows:
    """``WorkflowOps`` of a memory store: each call under the space's lock."""

    def __init__(self, space: Space) -> None:
        self.space = space
        space.node_ended = ended
        space.node_requeued = requeued

    def put(self, now: float, shard: int, nodes: Sequence[wf.NewNode], connection: Any = None) -> int:
        assert connection is None, "the memory store cannot write in a database transaction"
        with self.space.lock:
            return put(self.space, now, nodes)

    def get(self, now: float, workflow_id: int) -> wf.WorkflowInfo | None:
        with self.space.lock:
            return get(self.space, workflow_id)

    def status(self, workflow_id: int) -> wf.Status | None:
        with self.space.lock:
            stored = self.space.workflows.get(workflow_id)
            return None if stored is None else stored.status()

    def counts(self) -> dict[str, int]:
        with self.space.lock:
            out = dict.fromkeys(wf.Status, 0)
            for stored in self.space.workflows.values():
                out[stored.status()] += 1
            return {status.value: count for status, count in out.items()}

    def results(self, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
        with self.space.lock:
            return results(self.space, workflow_id, indexes)

    def cancel(self, now: float, workflow_id: int, by: str | None = None) -> int:
        with self.space.lock:
            return cancel(self.space, now, workflow_id, by)

    def retry_failed(self, now: float, workflow_id: int) -> int:
        with self.space.lock:
            return retry_failed(self.space, now, workflow_id)

    def forget(self, now: float, cutoff: float) -> int:
        with self.space.lock:
            return forget(self.space, micros(cutoff))

    def export_nodes(self, shard: int, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
        with self.space.lock:
            return export_nodes(self.space, after, limit) if shard == 0 else []

    def rewrite(self, shard: int, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
        check_changes(changes)
        with self.space.lock:
            return rewrite(self.space, changes) if shard == 0 else []
