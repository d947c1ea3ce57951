"""Workflows: graphs of jobs whose nodes run after their parents (``engine/workflows.py`` has the model),
``Store.workflows``.

A node with parents is not a job until its last parent ends: the store keeps it as a *waiting* node
(``NodeState.WAITING``: "waiting on parents") beside the jobs, so no claim, count, listing, purge or
``verify`` of jobs ever meets it, and a job's state table (``base.py``) has no state for it. The
finishing transactions of ``base.py`` settle a node's job when it ends:

- [sc_workflow_release] The transaction that ends a node's job (``complete``, ``complete_many``, ``fail``
  without a retry, ``recover_expired``'s last try, a quarantine; or ``cancel``, ``delete`` or ``purge``
  removing it while it waits) records how the node ended (``succeeded`` with its job's result; ``failed``;
  ``cancelled`` for a cancel) and takes one from the count of unfinished parents of each of its children:
  a child at zero becomes a pending job in that same transaction (ready now, behind the jobs waiting,
  counted as a put, hinted as a put is), its metadata holding ``workflows.WORKFLOW_KEY``. Nothing else
  releases a node: no poller, no second transaction, so a crash at any instant releases each node once or
  not at all (and then the parent's job is still running, and ends again).
- [sc_workflow_cancel_children] A child one of whose parents did not succeed is not released but
  cancelled (``NodeState.CANCELLED``, never a job, its error ``"cancelled: parent 'name' failed"``) when
  its last parent ends, unless it was put with ``always``: then it is released however they ended. A
  cancelled node ends its own children the same way, in the same transaction.
- [sc_workflow_result] A node that succeeded keeps its job's packed result on the node for as long as the
  workflow is kept, whatever ``vacuum`` does to the job: ``results`` reads it.
- [sc_workflow_one_shard] On a store with shards, every job of a workflow is in one shard (the one its
  ``put`` names), so that each settling is one transaction of that shard.
- [sc_workflow_rewrite] The user's data a store keeps on nodes (``NodeData``: a waiting node's payload and
  job metadata, a node's result and error text) is read and replaced in place by ``export_nodes`` and
  ``rewrite`` (``manage.py queue_rekey`` seals it again under a new key, ``engine/rekey.py``), as
  ``Store.transfer.export``/``rewrite`` do for jobs: nothing else of a node or a workflow changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...workflows import NewNode, Status, WorkflowInfo


@dataclass(frozen=True, slots=True)
class NodeData:
    """The fields of a node that hold its user's data, as a store keeps them (what an encrypted task's node
    keeps sealed, ``engine/sealing.py``): the packed payload and the job metadata (JSON text, as the store
    keeps it: the PostgreSQL store's holds ``WORKFLOW_KEY`` too) of a node that has no job yet (None once
    it has one), its job's packed result once it succeeded, its error text once it failed or was
    cancelled."""

    payload: bytes | None
    metadata: bytes | None
    result: bytes | None
    error: str | None


NodeRef = tuple[int, int]  # (workflow id, node index)


def holds(found: NodeData, old: NodeData) -> bool:
    """Whether a node holding ``found`` holds exactly ``old`` (the metadata compared as JSON)."""
    if (found.payload, found.result, found.error) != (old.payload, old.result, old.error):
        return False
    if found.metadata is None or old.metadata is None:
        return found.metadata is old.metadata
    return bool(found.metadata == old.metadata or json.loads(found.metadata) == json.loads(old.metadata))


def check_changes(changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> None:
    """``ValueError`` for a change whose ``new`` has a field where ``old`` has None (``rewrite``)."""
    for ref, old, new in changes:
        for name in NodeData.__slots__:
            if (getattr(old, name) is None) != (getattr(new, name) is None):
                raise ValueError(f"node {ref}: {name} is None in one of old and new, not both")


class WorkflowOps(Protocol):
    """The operations on whole workflows (``Store.workflows``)."""

    def put(self, now: float, shard: int, nodes: Sequence[NewNode], connection: Any = None) -> int:
        """Store a workflow in one transaction, all or nothing (``connection``: the caller's, where
        ``transactional_enqueue``, as ``enqueue`` takes it). ``nodes`` are ordered by ``workflows.plan``
        (each parent before its children). -> the workflow's id, a positive int unique in the store among
        workflows (it may equal a job's id).

        [sc_workflow_put] Each node without parents is a pending job at once (counted as ``enqueue``
        counts one); each other node waits (``NodeState.WAITING``), its payload and options kept until it
        is released."""

    def get(self, now: float, workflow_id: int) -> WorkflowInfo | None:
        """The workflow and its nodes in order (name, state, job id once it has one, parents, ``always``,
        the error of a failed or cancelled node); None if there is none of that id. [sc_workflow_get]"""

    def status(self, workflow_id: int) -> Status | None:
        """The workflow's status (``WorkflowInfo.status``) from counts the store keeps with it, never a walk
        of its nodes: what a process reads each time one of its nodes ends (the signal of a workflow's end);
        None if there is none of that id. [sc_workflow_get]"""

    def counts(self) -> dict[str, int]:
        """Workflows stored per status (every ``Status`` value a key), for the metrics. A walk of the
        workflows (not of their nodes, where a store keeps counts per workflow). [sc_workflow_counts]"""

    def results(self, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
        """The packed results of the nodes ``indexes`` that succeeded (None for any other, or an unknown
        workflow). [sc_workflow_result]"""

    def cancel(self, now: float, workflow_id: int, by: str | None = None) -> int:
        """In one transaction: mark the workflow cancelled; each waiting node is cancelled (and its children
        settled), each node's job that waits is removed (its node cancelled), each running one is marked
        "cancel requested" (``Store.cancel``). -> how many nodes it reached. [sc_workflow_cancel]"""

    def retry_failed(self, now: float, workflow_id: int) -> int:
        """In one transaction: each failed node's dead letter back to pending (as ``requeue``; its node
        queued again), and each node cancelled because a parent did not succeed waits again for those of
        its parents that have not ended now (a node that still waits counts a retried parent as not ended
        again, and drops the doom it gave). -> how many nodes started again. ``Store.requeue`` of one
        node's dead letter (failed, or a cancelled job) does the same for that node alone, in its own
        transaction: the node is queued again, and the nodes cancelled because of it wait on it again.
        [sc_workflow_retry]"""

    def forget(self, now: float, cutoff: float) -> int:
        """Drop the workflows put at or before ``cutoff`` whose every node has ended (their jobs stay, as
        jobs). -> how many. In bounded batches. [sc_workflow_forget]"""

    def export_nodes(self, shard: int, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
        """Up to ``limit`` nodes of the workflows of ``shard`` that hold any of ``NodeData`` (a field not
        None), by (workflow id, index), all after ``after`` (None: from the first), in one consistent read.
        Changes nothing. [sc_workflow_rewrite]"""

    def rewrite(self, shard: int, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
        """Each change ``(node, old, new)`` replaces, in place, that node's ``NodeData`` by ``new`` if the
        node is there and holds exactly ``old`` (as ``export_nodes`` gave it; the metadata compared as
        JSON); any other node is left as it is. ``new`` has None where ``old`` has (``ValueError`` before
        anything is written otherwise). Its state, counts,
        parents, children, job and options, and its workflow's status, stay. One transaction for all of
        ``changes``. -> the nodes rewritten. (A node that changed between the two, such as one released or
        one that ended, is seen again by the next pass.) [sc_workflow_rewrite]"""
