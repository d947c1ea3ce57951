"""``Queue.workflows``: a Queue's operations on workflows (``workflows.py`` has the model; the store does the
work, ``stores/contract/workflows.py``). Steps are checked as ``put`` checks a job's options and payload,
before anything is written; a workflow goes to one shard (its partition key's, or the next in turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import codec
from .options import PutOptions
from .putting import Putter, joined
from .stores.base import Store
from .workflows import MAX_NODES, InvalidWorkflow, NewNode, Status, WorkflowInfo


class WorkflowOwner(Protocol):
    """What ``QueueWorkflows`` reads of its Queue."""

    max_payload_bytes: int
    _put_options: PutOptions
    _putter: Putter

    def _clock(self) -> float: ...

    def _live(self) -> Store: ...


@dataclass(slots=True)
class Step:
    """A node as a Queue takes it: its name, payload, ``put`` options (``priority``, ``queue``, ``name``,
    ``max_retries``, ``timeout``, ``metadata``; no ``delay`` or ``eta``: a node runs when its parents
    have), the indexes of its parents among the steps (each smaller than its own: ``workflows.plan``
    orders them), and ``always``."""

    name: str
    payload: Any
    options: dict[str, Any] = field(default_factory=dict)
    parents: tuple[int, ...] = ()
    always: bool = False


class QueueWorkflows:
    """The workflow operations of one ``Queue``."""

    def __init__(self, queue: WorkflowOwner) -> None:
        self._queue = queue

    def put(self, steps: Sequence[Step], *, partition_key: Any = None, connection: Any = None) -> int:
        """Store a workflow (``steps`` in an order where parents come first), all or nothing: its steps
        without parents become pending jobs, the others wait for their parents. -> its id.
        ``InvalidWorkflow`` (nothing written) for no step, too many, a parent that does not come before
        its child, or a name used twice; ``InvalidJob`` for a step's options or payload, as ``put``.
        ``connection``: the caller's transaction, as ``put``'s (PostgreSQL)."""
        queue = self._queue
        if not steps:
            raise InvalidWorkflow("a workflow needs at least one node")
        if len(steps) > MAX_NODES:
            raise InvalidWorkflow(f"a workflow has {len(steps):,} nodes, over the limit of {MAX_NODES:,}")
        now = queue._clock()
        seen: set[str] = set()
        nodes: list[NewNode] = []
        for at, step in enumerate(steps):
            if step.name in seen:
                raise InvalidWorkflow(f"two nodes are named {step.name!r}: node names must be unique")
            seen.add(step.name)
            if any(type(parent) is not int or not 0 <= parent < at for parent in step.parents):
                raise InvalidWorkflow(f"node {step.name!r}: each parent must be a node before it")
            options = {key: value for key, value in step.options.items() if key not in ("delay", "eta")}
            spec = queue._put_options.check(
                now=now, delay=None, eta=None, partition_key=partition_key,
                **{"priority": 0, "queue": "default", "name": None, "max_retries": None, "timeout": None,
                   "metadata": None, **options},
            )  # fmt: skip
            payload = codec.pack_value(step.payload, what=f"payload of node {step.name!r}",
                                       limit=queue.max_payload_bytes)  # fmt: skip
            nodes.append(NewNode(step.name, payload, spec, tuple(step.parents), step.always))
        store = queue._live()
        shard = queue._putter.route(partition_key)
        if connection is not None:
            return joined(store).workflows.put(now, shard, nodes, connection)
        return store.workflows.put(now, shard, nodes)

    def get(self, workflow_id: int) -> WorkflowInfo | None:
        """The workflow and its nodes, or None."""
        return self._queue._live().workflows.get(self._queue._clock(), workflow_id)

    def status(self, workflow_id: int) -> Status | None:
        """The workflow's status, from the counts the store keeps with it (no walk of its nodes)."""
        return self._queue._live().workflows.status(workflow_id)

    def counts(self) -> dict[str, int]:
        """Workflows stored per status (``running``, ``succeeded``, ``failed``, ``cancelled``)."""
        return self._queue._live().workflows.counts()

    def results(self, workflow_id: int, indexes: Sequence[int]) -> list[Any]:
        """The results of the nodes ``indexes`` (None for a node that has not succeeded)."""
        packed = self._queue._live().workflows.results(workflow_id, indexes)
        return [None if raw is None else codec.unpack_value(raw) for raw in packed]

    def cancel(self, workflow_id: int, *, by: str | None = None) -> int:
        """Cancel what has not ended (``WorkflowOps.cancel``). -> how many nodes it reached."""
        return self._queue._live().workflows.cancel(self._queue._clock(), workflow_id, by)

    def retry_failed(self, workflow_id: int) -> int:
        """Start the failed nodes and what waits on them again. -> how many nodes."""
        return self._queue._live().workflows.retry_failed(self._queue._clock(), workflow_id)

    def forget(self, older_than: float) -> int:
        """Drop the ended workflows put more than ``older_than`` seconds ago. -> how many."""
        now = self._queue._clock()
        return self._queue._live().workflows.forget(now, now - older_than)
