"""Workflows of tasks: ``chain``, ``group``, ``chord`` and ``Workflow`` (any graph without cycles), made of
steps (``Task.s()``, ``Task.si()``), each stored in one transaction and returning a ``WorkflowResult``.

The store does the ordering (``engine/workflows.py``): a step with parents is not a job until its last parent
ends, and becomes one in the transaction that ends it. A ``.s()`` step gets its parents' results first among
its arguments (``running/workflow_inputs.py``): in a chain, the previous step's result (after a group: the
list of the group's results); in a ``Workflow``, its parent's result, or ``{name: result}`` with several. A
``.si()`` step gets nothing but its own arguments. Bad input is refused before anything is stored: a
cycle, an unknown parent, a duplicate name, arguments that do not bind to the task, more than ``MAX_NODES``
nodes.

Inside ``transaction.atomic()`` a workflow's ``.delay()`` is the transaction's, as a task's: on PostgreSQL in
the store's database it is written in that transaction; otherwise (LMDB, or PostgreSQL in another database),
with ``ENQUEUE_ON_COMMIT`` (the default), inside a transaction of the default database, it is stored when
that transaction commits, and never if it rolls back (its ``WorkflowResult`` has no id until then:
``WorkflowNotCommitted``). Outside a transaction it is written at once. In ``IMMEDIATE`` mode every
step runs here, in order, before ``.delay()`` returns.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .commits import Commit, waits_for_commit, written
from .conf import caller_connection, callers_alias, get_config, get_queue, lent_to
from .encryption.jobs import open_result, seal_put
from .engine import Job, Queue, State
from .engine.workflowing import Step
from .engine.workflows import MAX_NODES, InvalidWorkflow, NodeInfo, NodeState, Status, WorkflowInfo, plan
from .results import JobResult
from .running.runner import run_now
from .running.workflow_ends import announce
from .running.workflow_inputs import AFTER_KEY
from .signals import in_callers_transaction, workflow_finished

__all__ = ["MAX_NODES", "InvalidWorkflow", "Signature", "Workflow", "WorkflowNotCommitted",
           "WorkflowNotFound", "WorkflowResult", "chain", "chord", "group"]  # fmt: skip


class Steppable(Protocol):
    """What a step reads of its task (``tasks.Task``)."""

    name: str
    queue: str
    unique: Any  # its unique key's options, or None
    concurrency: Any  # its concurrency limit (``.limit``: None for none)

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, label: str = "") -> None: ...

    def _payload(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]: ...

    def _check_storable(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, label: str = ""
    ) -> None: ...

    def _put_options(self) -> dict[str, Any]: ...

    def _prepare(self, queue: Queue, joined: Any = None) -> Queue: ...


class WorkflowNotFound(LookupError):
    """No workflow of that id is stored (never put, or forgotten by the vacuum once it ended)."""


class WorkflowNotCommitted(WorkflowNotFound):
    """The workflow was put inside a database transaction that has not committed: on the LMDB store (or
    PostgreSQL in another database) it is stored when that transaction commits (``ENQUEUE_ON_COMMIT``), so
    it has no id yet, and never will if the transaction rolls back."""


class _Graph:
    """The nodes a canvas builds, by name, before they are ordered and stored."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.parents: list[list[str]] = []
        self.steps: list[Signature] = []
        self.shapes: list[str | None] = []
        self.always: list[bool] = []

    def node(self, name: str, step: Signature, parents: Sequence[str], always: bool, several: str) -> str:
        if not isinstance(step, Signature):
            raise TypeError(f"node {name!r}: a step is made with task.s(...) or task.si(...), not {step!r}")
        shape = None if not step.takes_result or not parents else ("one" if len(parents) == 1 else several)
        args = (None, *step.args) if shape else step.args  # the parents' results come first
        step.task._bind(args, step.kwargs, label=f"step {name!r} of a workflow")
        self.names.append(name)
        self.parents.append(list(parents))
        self.steps.append(step)
        self.shapes.append(shape)
        self.always.append(bool(always))
        return name

    def delay(self, positional: bool) -> WorkflowResult:
        if len(self.names) > MAX_NODES:
            raise InvalidWorkflow(
                f"a workflow has {len(self.names):,} nodes, over the limit of {MAX_NODES:,}"
            )
        order = plan(self.names, self.parents)
        where = {self.names[at]: index for index, at in enumerate(order)}
        steps = []
        limited = get_config().queue_concurrency
        for at in order:
            step, name, parents = self.steps[at], self.names[at], self.parents[at]
            task = step.task
            if task.unique is not None or task.concurrency.limit is not None or task.queue in limited:
                raise InvalidWorkflow(
                    f"step {name!r}: the task {task.name!r} has a unique key or a concurrency limit (its own "
                    "or its queue's), which a workflow's step cannot have yet: a workflow's jobs are placed "
                    "together"
                )
            payload = step.task._payload(step.args, step.kwargs)
            bound = (None, *step.args) if self.shapes[at] is not None else step.args
            step.task._check_storable(bound, step.kwargs, label=f"step {name!r} of a workflow")
            if self.shapes[at] is not None:
                payload[AFTER_KEY] = [self.shapes[at], [where[p] for p in parents], parents]
            indexes = tuple(where[p] for p in parents)
            payload, options = seal_put(step.task, payload, step.task._put_options())  # an encrypted task's
            steps.append(Step(name, payload, options, indexes, self.always[at]))
        joined = caller_connection()
        config = get_config()
        if joined is None and not config.immediate and waits_for_commit(None, config.enqueue_on_commit):
            # as a task's .delay(): stored when the transaction of the default database commits
            result = WorkflowResult(None, positional=positional)

            def store() -> None:
                result._id = self._store(steps, None)

            result._commit = Commit(store=store)
            return result
        workflow_id = self._store(steps, joined)
        if config.immediate:
            _run_here(get_queue(), workflow_id)
        result = WorkflowResult(workflow_id, positional=positional)
        result._commit = written(callers_alias(joined), [])  # written in the caller's open transaction
        return result

    def _store(self, steps: list[Step], joined: Any) -> int:
        """Put the workflow now, on the store's connection or in the caller's transaction (``joined``)."""
        queue = get_queue()
        for task in {id(s.task): s.task for s in self.steps}.values():
            task._prepare(queue, joined)
        with in_callers_transaction(callers_alias(joined)), lent_to(queue, joined):
            return queue.workflows.put(steps, connection=joined)


def _run_here(queue: Queue, workflow_id: int) -> None:
    """IMMEDIATE: run every released node here, in order, until none is left to run."""
    while True:
        info = queue.workflows.get(workflow_id)
        ran = False
        for node in info.nodes if info is not None else ():
            if node.state is NodeState.QUEUED and node.job_id is not None:
                job = queue.job(node.job_id)
                if job is not None and job.state in (State.PENDING, State.SCHEDULED):
                    run_now(queue, node.job_id)
                    ran = True
        if not ran:
            return


class Signature:
    """One step: a task and its arguments (``Task.s()``: it gets its parents' results first; ``Task.si()``:
    it does not). ``.delay()`` runs it alone, as a workflow of one node."""

    def __init__(
        self, task: Steppable, args: tuple[Any, ...], kwargs: dict[str, Any], takes_result: bool
    ) -> None:
        self.task, self.args, self.kwargs, self.takes_result = task, tuple(args), dict(kwargs), takes_result

    def __repr__(self) -> str:
        return f"{self.task.name}.{'s' if self.takes_result else 'si'}(*{self.args!r}, **{self.kwargs!r})"

    def _build(self, graph: _Graph, name: str, parents: list[str]) -> list[str]:
        return [graph.node(name or "0", self, parents, False, "list")]

    def delay(self) -> WorkflowResult:
        return chain(self).delay()


def _child(prefix: str, index: int | str) -> str:
    return f"{prefix}.{index}" if prefix else str(index)


def _canvas(step: Any) -> Any:
    if not isinstance(step, (Signature, chain, group, chord)):
        raise TypeError(
            f"a workflow's step is task.s(...), task.si(...), a chain, group or chord; not {step!r}"
        )
    return step


class chain:  # Celery's name, as users write it
    """Steps one after the other: each ``.s()`` step gets the previous step's result (after a group, the
    list of its results). Its nodes are named by position: ``"0"``, ``"1"``, ... (``"1.0"`` inside a
    nested group)."""

    def __init__(self, *steps: Any) -> None:
        if not steps:
            raise InvalidWorkflow("a chain needs at least one step")
        self.steps = [_canvas(step) for step in steps]

    def _build(self, graph: _Graph, prefix: str, parents: list[str]) -> list[str]:
        for index, step in enumerate(self.steps):
            parents = step._build(graph, _child(prefix, index), parents)
        return parents

    def delay(self) -> WorkflowResult:
        graph = _Graph()
        self._build(graph, "", [])
        return graph.delay(positional=True)


class group:
    """Steps at once (each after what comes before the group, if anything). Nodes named by position."""

    def __init__(self, *steps: Any) -> None:
        if len(steps) == 1 and not isinstance(steps[0], (Signature, chain, group, chord)):
            steps = tuple(steps[0])  # group(generator of steps), as Celery's
        if not steps:
            raise InvalidWorkflow("a group needs at least one step")
        self.steps = [_canvas(step) for step in steps]

    def _build(self, graph: _Graph, prefix: str, parents: list[str]) -> list[str]:
        exits: list[str] = []
        for index, step in enumerate(self.steps):
            exits.extend(step._build(graph, _child(prefix, index), parents))
        return exits

    def delay(self) -> WorkflowResult:
        graph = _Graph()
        self._build(graph, "", [])
        return graph.delay(positional=True)


class chord:
    """A group, then ``body`` once every member succeeded: a ``.s()`` body gets the list of the group's
    results, in the group's order. The members are named by position, the body ``"callback"``."""

    def __init__(self, header: group | Iterable[Any], body: Signature) -> None:
        self.header = header if isinstance(header, group) else group(*header)
        if not isinstance(body, Signature):
            raise TypeError(f"a chord's body is task.s(...) or task.si(...), not {body!r}")
        self.body = body

    def _build(self, graph: _Graph, prefix: str, parents: list[str]) -> list[str]:
        exits = self.header._build(graph, prefix, parents)
        return [graph.node(_child(prefix, "callback"), self.body, exits, False, "list")]

    def delay(self) -> WorkflowResult:
        graph = _Graph()
        self._build(graph, "", [])
        return graph.delay(positional=True)


class Workflow:
    """Any graph without cycles: ``add(name, step, after=[names], always=False)`` each node, then
    ``delay()``. A ``.s()`` node gets its parent's result (several parents: ``{name: result}``);
    ``always=True``: it runs once its parents have ended, however they ended."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Signature, list[str], bool]] = {}

    def add(self, name: str, step: Signature, after: Iterable[str] = (), always: bool = False) -> Workflow:
        if not isinstance(name, str) or not name:
            raise InvalidWorkflow(f"a node's name must be a non-empty str, not {name!r}")
        if name in self._nodes:
            raise InvalidWorkflow(f"two nodes are named {name!r}: node names must be unique")
        if isinstance(after, str):
            raise TypeError(f"after= is a list of node names, not the str {after!r}")
        if not isinstance(step, Signature):
            raise TypeError(f"node {name!r}: a step is made with task.s(...) or task.si(...), not {step!r}")
        self._nodes[name] = (step, list(after), always)
        return self

    def delay(self) -> WorkflowResult:
        graph = _Graph()
        for name, (step, after, always) in self._nodes.items():
            graph.node(name, step, after, always, "dict")
        return graph.delay(positional=False)


class Results(dict[str, Any]):
    """Results by node name; a chain's and a group's also by position (``results[0]``)."""

    def __init__(self, values: Mapping[str, Any], positional: bool) -> None:
        super().__init__(values)
        self.positional = positional

    def __getitem__(self, key: Any) -> Any:
        if self.positional and type(key) is int:
            key = str(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(str(key) if self.positional and type(key) is int else key)


class WorkflowResult:
    """A stored workflow, read from the store at each access: ``status`` (``running``, ``succeeded``,
    ``failed``, ``cancelled``), ``results`` (of the nodes that succeeded), ``jobs`` (a ``JobResult`` per
    node that became a job), ``wait()``, ``cancel()``, ``retry_failed()``."""

    def __init__(self, workflow_id: int | str | None, *, positional: bool = False) -> None:
        self._id = None if workflow_id is None else int(workflow_id)
        self.positional = positional
        self._commit: Commit | None = None  # the transaction whose commit stores it (ENQUEUE_ON_COMMIT)

    def __repr__(self) -> str:
        if self._id is None:
            note = "" if self._commit is None else self._commit.note()
            return f"<WorkflowResult ({note or 'not stored'})>"
        return f"<WorkflowResult {self._id}>"

    @property
    def is_committed(self) -> bool:
        """False until the transaction the workflow was put in commits (it is stored then, or was written
        in it: PostgreSQL in the store's database); True for one put outside a transaction."""
        return self._commit is None or self._commit.committed

    @property
    def id(self) -> str:
        return str(self._stored_id())

    def _stored_id(self) -> int:
        if self._id is None:
            why = "it is not stored" if self._commit is None else self._commit.explain("the workflow")
            raise WorkflowNotCommitted(why)
        return self._id

    def info(self) -> WorkflowInfo:
        found = get_queue().workflows.get(self._stored_id())
        if found is None:
            raise WorkflowNotFound(f"no workflow {self._id} is stored")
        return found

    @property
    def status(self) -> str:
        return self.info().status.value

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return self.info().nodes

    @property
    def results(self) -> Results:
        info = self.info()
        done = [node for node in info.nodes if node.state is NodeState.SUCCEEDED]
        values = [
            open_result(v)
            for v in get_queue().workflows.results(self._stored_id(), [node.index for node in done])
        ]
        return Results({node.name: value for node, value in zip(done, values, strict=True)}, self.positional)

    @property
    def jobs(self) -> dict[str, JobResult]:
        queue = get_queue()
        out: dict[str, JobResult] = {}
        for node in self.info().nodes:
            if node.job_id is not None:
                job: Job | None = queue.job(node.job_id)
                out[node.name] = JobResult(node.job_id, job, task_name=None if job is None else job.name)
        return out

    def wait(self, timeout: float | None = None, *, poll_interval: float = 0.05) -> WorkflowResult:
        """Read the workflow until it is no longer running; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = min(poll_interval, 0.01)
        while self.info().status is Status.RUNNING:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self._id} is still running after {timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, poll_interval)
        return self

    def cancel(self, *, by: str | None = None) -> int:
        """Cancel the nodes that wait; a running one gets a cancel request. -> how many nodes. A workflow
        this ends (nothing of it ran) is signalled here (``signals.workflow_finished``)."""
        queue = get_queue()
        workflow_id = self._stored_id()
        reached = queue.workflows.cancel(workflow_id, by=by)
        if workflow_finished.receivers:
            announce(queue.workflows.status(workflow_id), workflow_id)
        return reached

    def retry_failed(self) -> int:
        """The dead-lettered nodes and what waits on them start again. -> how many nodes."""
        return get_queue().workflows.retry_failed(self._stored_id())
