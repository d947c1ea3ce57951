"""The end of a workflow, as this process sees it: when a job that is a node of a workflow ends (the
completer's ``_ended``) and someone listens to ``signals.workflow_finished``, the workflow's status is read
(one read of the counts the store keeps with it); if it is no longer running, the signal is sent.

Which process sends it: the one that ended the workflow's last job. Two processes that end its last two jobs
at the same instant may both see it ended and both send it, so a receiver must be idempotent (at least once,
as every job signal). A workflow that ends without a job ending (``WorkflowResult.cancel()`` of one whose
nodes all waited) is signalled by that call."""

from __future__ import annotations

from typing import Any

from ..engine import Record, State
from ..engine.workflows import WORKFLOW_KEY, Status
from ..signals import send, workflow_finished


def node_ended(record: Record, state: State) -> None:
    """``record``'s job ended in ``state``: if it is a node and its workflow ended, send the signal."""
    if not workflow_finished.receivers or state not in (State.DONE, State.FAILED):
        return
    link = record.metadata.get(WORKFLOW_KEY)
    if not (isinstance(link, list) and len(link) == 2 and type(link[0]) is int):
        return
    owner: Any = record._owner
    while not hasattr(owner, "workflows"):  # the record's owner is its Queue's consumer: up to the Queue
        owner = owner._owner
    announce(owner.workflows.status(link[0]), link[0])


def announce(status: Status | None, workflow_id: int) -> None:
    """Send ``workflow_finished`` if ``status`` is an end."""
    if status is not None and status is not Status.RUNNING:
        send(workflow_finished, None, workflow_id=str(workflow_id), status=status.value)
