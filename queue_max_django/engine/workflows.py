"""Workflows: graphs of jobs whose nodes run after their parents, the store-neutral part.

A workflow is a list of nodes in an order where every parent comes before its children (``plan`` sorts
and checks a graph into that order). A node without parents is a job from the start; a node with parents
is kept by the store as a *waiting* node (its payload and options, and a count of its parents that have not
ended): it is not a job, so no claim, count, listing or purge ever meets it. The transaction that ends a
parent (done, a dead letter, cancelled) runs ``settle``: it records the parent's outcome on its node, takes
one from each child's count, and a child at zero becomes an ordinary pending job there and then (or, when a
parent did not succeed and the child did not ask for ``always``, is cancelled, and its own children are
settled in turn). No poller, no coordinator: whichever transaction ends the last parent releases the
child.

A node's result (the packed result of its job) is kept on its node when it succeeds, and stays there as
long as the workflow does, whatever the job store's ``result_ttl``: a child reads its parents' results
from the workflow (``Store.workflows.results``), never from their jobs.

A job that is a node carries ``WORKFLOW_KEY`` in its metadata: ``[workflow id, node index]``, which is how
a finishing transaction knows, from the record it already holds, that it has a node to settle (a job
without it costs nothing more than a ``bytes`` search of its metadata, when it has any).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import InvalidJob
from .jobspec import JobSpec

WORKFLOW_KEY = "_workflow"  # in a node's job metadata: [workflow id, node index]
WORKFLOW_MARK = b'"_workflow"'  # what a store looks for in the metadata bytes before decoding them
MAX_NODES = 100_000  # nodes in one workflow at most: one transaction writes the whole graph


class InvalidWorkflow(InvalidJob):
    """The graph given is not a workflow the store can run: a cycle, a parent that is not a node of it, two
    nodes of one name, no node, or more than ``MAX_NODES`` nodes. Nothing was stored."""


class NodeState(enum.StrEnum):
    """Where a node is. ``waiting``: its parents have not all ended, no job yet; ``queued``: released, its
    job exists (the job's own state says more: pending, running, a retry...); then how it ended."""

    WAITING = "waiting"
    QUEUED = "queued"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # its job became a dead letter (not a cancel)
    CANCELLED = "cancelled"  # its job was cancelled, or a parent did not succeed, or the workflow was


ENDED = frozenset({NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED})


class Status(enum.StrEnum):
    """A workflow's status: ``running`` while any node waits or is queued; then ``cancelled`` if someone
    cancelled the workflow, ``failed`` if any node failed or was cancelled, else ``succeeded``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class NewNode:
    """A node as the Queue hands it to the store: its name, its job's payload (packed) and options, the
    indexes of its parents (all smaller than its own: ``plan`` orders them), and whether it runs however
    its parents ended (``always``)."""

    name: str
    payload: bytes
    spec: JobSpec
    parents: tuple[int, ...] = ()
    always: bool = False


@dataclass(slots=True)
class Node:
    """A node as a store keeps it (each store encodes it its own way). ``waiting``: parents not ended yet;
    ``doomed``: why it will be cancelled when they have (a parent did not succeed), unless ``always``;
    ``payload``/``spec`` until its job is written; ``result``: its job's packed result once it succeeded."""

    name: str
    parents: list[int]
    children: list[int]
    always: bool
    waiting: int
    state: NodeState
    job_id: int | None = None
    doomed: str | None = None
    payload: bytes | None = None
    spec: list[Any] | None = None  # spec_fields(): queue, name, priority, max_retries, timeout, key, metadata
    result: bytes | None = None
    error: str | None = None

    def packed(self) -> list[Any]:
        return [self.name, self.parents, self.children, self.always, self.waiting, self.state.value,
                self.job_id, self.doomed, self.payload, self.spec, self.result, self.error]  # fmt: skip

    @classmethod
    def unpacked(cls, fields: list[Any]) -> Node:
        name, parents, children, always, waiting, state, job_id, doomed, payload, spec, result, error = fields
        return cls(name, list(parents), list(children), bool(always), int(waiting), NodeState(state), job_id,
                   doomed, payload, spec, result, error)  # fmt: skip


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as a read shows it."""

    index: int
    name: str
    state: NodeState
    job_id: int | None
    parents: tuple[int, ...]
    always: bool
    error: str | None


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """A workflow as a read shows it: its id (the first id the store gave it), when it was put, whether
    someone cancelled it, and its nodes in order."""

    workflow_id: int
    created_at: float
    cancelled: bool
    nodes: tuple[NodeInfo, ...] = field(default=())

    @property
    def status(self) -> Status:
        states = {node.state for node in self.nodes}
        if states - ENDED:
            return Status.RUNNING
        if self.cancelled:
            return Status.CANCELLED
        if NodeState.FAILED in states or NodeState.CANCELLED in states:
            return Status.FAILED
        return Status.SUCCEEDED


def status_of(live: int, bad: int, cancelled: bool) -> Status:
    """A workflow's status from the counts a store keeps of it: its nodes that have not ended (``live``)
    and those that failed or were cancelled (``bad``), and whether someone cancelled it."""
    if live > 0:
        return Status.RUNNING
    if cancelled:
        return Status.CANCELLED
    return Status.FAILED if bad > 0 else Status.SUCCEEDED


def plan(names: Sequence[str], parents: Sequence[Sequence[str]]) -> list[int]:
    """Check a graph given by node names and, for each, its parents' names, and order it: -> the nodes'
    positions in an order where each parent comes before its children (stable: the given order where it
    can). ``InvalidWorkflow`` for a duplicate name, an unknown parent, a node its own parent, a cycle, no
    node, or more than ``MAX_NODES``."""
    if not names:
        raise InvalidWorkflow("a workflow needs at least one node")
    if len(names) > MAX_NODES:
        raise InvalidWorkflow(f"a workflow has {len(names):,} nodes, over the limit of {MAX_NODES:,}")
    position: dict[str, int] = {}
    for at, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise InvalidWorkflow(f"a node's name must be a non-empty str, not {name!r}")
        if name in position:
            raise InvalidWorkflow(f"two nodes are named {name!r}: node names must be unique")
        position[name] = at
    children: list[list[int]] = [[] for _ in names]
    waiting = [0] * len(names)
    for at, of in enumerate(parents):
        if len(set(of)) != len(of):
            raise InvalidWorkflow(f"node {names[at]!r} names a parent twice")
        for parent in of:
            if parent not in position:
                raise InvalidWorkflow(f"node {names[at]!r} runs after {parent!r}, which is not a node of it")
            if parent == names[at]:
                raise InvalidWorkflow(f"node {parent!r} cannot run after itself")
            children[position[parent]].append(at)
            waiting[at] += 1
    order: list[int] = []
    ready = [at for at in range(len(names)) if not waiting[at]]
    ready.reverse()
    while ready:
        at = ready.pop()
        order.append(at)
        for child in reversed(children[at]):
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    if len(order) != len(names):
        stuck = [names[at] for at in range(len(names)) if waiting[at]]
        raise InvalidWorkflow(f"the workflow has a cycle through {', '.join(map(repr, stuck[:5]))}")
    return order


def spec_fields(spec: JobSpec) -> list[Any]:
    """What a waiting node keeps of its job's options (plain values a store can encode)."""
    return [spec.queue, spec.name, spec.priority, spec.max_retries, spec.timeout, spec.partition_key,
            spec.metadata]  # fmt: skip


def spec_of(fields: list[Any]) -> JobSpec:
    queue, name, priority, max_retries, timeout, partition_key, metadata = fields
    return JobSpec(queue, name, priority, None, max_retries, timeout, partition_key, metadata)


def node_metadata(spec: JobSpec, workflow_id: int, index: int) -> bytes:
    """The metadata of a node's job: its own (if any) with ``WORKFLOW_KEY``."""
    own = json.loads(spec.metadata) if spec.metadata is not None else {}
    own[WORKFLOW_KEY] = [workflow_id, index]
    return json.dumps(own, separators=(",", ":"), ensure_ascii=False).encode()


_LINK = re.compile(rb'"_workflow":\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]')


def node_of(metadata: bytes | str | None) -> tuple[int, int] | None:
    """(workflow id, node index) of a job whose stored metadata says it is a node, else None: cheap for a
    job without (a search of its bytes), and without decoding the JSON for one with (a finishing transaction
    asks it: a pattern of the key and its two ints; a JSON string value holds no bare quote, so a user's
    value that mentions the key never matches)."""
    if metadata is None:
        return None
    raw = metadata.encode() if isinstance(metadata, str) else metadata
    if raw.startswith(b'{"_workflow":[') and raw.endswith(b"]}"):  # what node_metadata writes alone
        workflow, _, index = raw[14:-2].partition(b",")  # (a third of the pattern's time: each member's end)
        if workflow.isdigit() and index.isdigit():
            return int(workflow), int(index)
    if WORKFLOW_MARK not in raw:
        return None
    found = _LINK.search(raw)
    return None if found is None else (int(found[1]), int(found[2]))


def new_nodes(nodes: Sequence[NewNode]) -> list[Node]:
    """The stored form of ``nodes`` (ordered by ``plan``): children and counts filled in, every node
    waiting (the store then writes the roots' jobs)."""
    out = [
        Node(
            node.name,
            list(node.parents),
            [],
            node.always,
            len(node.parents),
            NodeState.WAITING,
            payload=node.payload,
            spec=spec_fields(node.spec),
        )
        for node in nodes
    ]
    for at, node in enumerate(nodes):
        for parent in node.parents:
            if parent >= at:
                raise InvalidWorkflow(f"node {node.name!r} comes before its parent {nodes[parent].name!r}")
            out[parent].children.append(at)
    return out


class Graph(Protocol):
    """What ``settle`` needs of a store's open transaction over one workflow's nodes."""

    def node(self, index: int) -> Node: ...

    def save(self, index: int, node: Node) -> None: ...

    def release(self, index: int, node: Node) -> int:
        """Write the node's job, pending now, in this transaction (its metadata: ``node_metadata``). -> its
        id."""
        ...

    def ended(self, state: NodeState) -> None:
        """One more node of the workflow ended, in ``state`` (the store keeps count: ``status_of``)."""
        ...


def settle(graph: Graph, index: int, state: NodeState, result: bytes | None, error: str | None) -> int:
    """In the transaction that ended node ``index`` (``state``: how), record it and release or cancel the
    children whose last parent it was, and theirs in turn. -> how many jobs it released (for the hints)."""
    released = 0
    work: list[tuple[int, NodeState, bytes | None, str | None]] = [(index, state, result, error)]
    while work:
        at, state, result, error = work.pop()
        node = graph.node(at)
        if node.state in ENDED:
            continue  # ended before (a job removed after the workflow's cancel): settled once only
        node.state, node.result, node.error = state, result, error
        graph.ended(state)
        if node.job_id is not None:
            node.payload = node.spec = (
                None  # kept by a node cancelled before it had a job: a retry needs them
            )
        graph.save(at, node)
        for child_at in node.children:
            child = graph.node(child_at)
            if child.state is not NodeState.WAITING:
                continue
            child.waiting -= 1
            if state is not NodeState.SUCCEEDED and child.doomed is None:
                child.doomed = f"parent {node.name!r} {state.value}"
            if child.waiting > 0:
                graph.save(child_at, child)
            elif child.doomed is not None and not child.always:
                graph.save(child_at, child)
                work.append((child_at, NodeState.CANCELLED, None, f"cancelled: {child.doomed}"))
            else:
                child.job_id = graph.release(child_at, child)
                child.state = NodeState.QUEUED
                child.payload = child.spec = None
                graph.save(child_at, child)
                released += 1
    return released


def ending(state_failed: bool, error_type: str | None) -> NodeState:
    """How a node ended, from its job's end: done, a cancel, or a dead letter."""
    from .job import CANCELLED

    if not state_failed:
        return NodeState.SUCCEEDED
    return NodeState.CANCELLED if error_type == CANCELLED else NodeState.FAILED


def info(workflow_id: int, created_at: float, cancelled: bool, nodes: Sequence[Node]) -> WorkflowInfo:
    shown = tuple(
        NodeInfo(at, node.name, node.state, node.job_id, tuple(node.parents), node.always, node.error)
        for at, node in enumerate(nodes)
    )
    return WorkflowInfo(workflow_id, created_at, cancelled, shown)


def reopen(
    nodes: list[Node], requeue: Callable[[int, Node], bool], only: int | None = None
) -> tuple[list[int], list[int]]:
    """``retry_failed`` on a workflow's nodes (changed in place, in order): each failed node whose job
    ``requeue`` puts back (a dead letter to pending) is queued again, and each node cancelled because a
    parent did not succeed (it never had a job) waits again for its parents that have not ended now. A node
    that still waits (its other parents had not all ended) counts the reopened parents as unended again and
    drops the doom they gave it. -> (the indexes of the nodes started again, each one more node not ended;
    those of the waiting nodes whose count or doom changed).

    ``only``: the node whose job was requeued by itself (``Store.requeue`` of a node's dead letter, failed
    or cancelled): that node alone is queued again (``requeue`` is not called), and the nodes cancelled
    because of it wait again, so that they run after it succeeds."""
    changed: list[int] = []
    recounted: list[int] = []
    reopened: set[int] = set()
    for at, node in enumerate(nodes):
        again = node.state in (NodeState.FAILED, NodeState.CANCELLED) and node.job_id is not None
        if at == only and again:
            node.state, node.error = NodeState.QUEUED, None
            changed.append(at)
            reopened.add(at)
            continue
        if node.state is NodeState.FAILED:
            if only is None and node.job_id is not None and requeue(at, node):
                node.state, node.error = NodeState.QUEUED, None
                changed.append(at)
                reopened.add(at)
            continue
        cancelled = node.state is NodeState.CANCELLED and node.job_id is None and node.doomed is not None
        waits = node.state is NodeState.WAITING and any(parent in reopened for parent in node.parents)
        if not (cancelled or waits):
            continue
        unended = [parent for parent in node.parents if nodes[parent].state not in ENDED]
        if not unended:
            continue
        bad = [nodes[p] for p in node.parents if nodes[p].state in (NodeState.FAILED, NodeState.CANCELLED)]
        node.waiting, node.error = len(unended), None
        node.doomed = f"parent {bad[0].name!r} {bad[0].state.value}" if bad else None
        reopened.add(at)
        if cancelled:
            node.state = NodeState.WAITING
            changed.append(at)
        else:
            recounted.append(at)
    return changed, recounted
