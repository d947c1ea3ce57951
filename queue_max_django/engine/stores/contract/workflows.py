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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ...workflows import NewNode, Status, WorkflowInfo


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
