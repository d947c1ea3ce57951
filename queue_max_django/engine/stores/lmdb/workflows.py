"""The LMDB store's workflows (``engine/workflows.py`` says what a workflow is).

A workflow lives in one shard, with its jobs: its id is a job id of that shard (the shard's sequence, so
``job.shard_of`` finds it), and its nodes are entries of the shard's ``workflows`` database, so settling a
node is part of the one write transaction of that shard that ended its job (``ended``, called by
``access.index_job``/``access.delete_job`` and the inlined ``Shard._complete``).

Keys of the ``workflows`` database: ``b"W" + id`` -> its head, [created µs, nodes, cancelled, nodes not
ended, nodes failed or cancelled] (the last two kept by each settling, so its status is one read);
``b"N" + id + index`` -> a node (``Node.packed``). A wide workflow therefore runs on one shard's writer:
its jobs are claimed by every worker, but each completion of one of them waits for that shard's write lock
(docs/architecture.md). A member that succeeds without releasing its child (a chord's, nearly always) is
settled by ``_succeeded`` on the raw entries; inside ``complete_many`` the head and the children's counts
it changes are kept in ``shard.wf_batch`` and written once at the end of the transaction (``flush``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ... import workflows as wf
from ...cancels import CancelOutcome
from ...job import CORRUPTED, shard_of
from ...metadata import with_cancel_note
from ..contract.workflows import NodeData, NodeRef, check_changes
from .access import (
    COUNTERS_KEY,
    PUT_COUNTERS,
    ShardDbs,
    delete_job,
    index_job,
    load_record,
    put_counters,
    store_record,
    tally,
    unindex_job,
)
from .keys import id_key, micros
from .layout import (
    DONE,
    F_ERROR,
    F_ERROR_TYPE,
    F_FINISHED_AT,
    F_METADATA,
    F_READY_AT,
    F_RESULT,
    F_RETRIES,
    F_STARTED_AT,
    F_STATE,
    F_TRACEBACK,
    FAILED,
    PENDING,
    RUNNING,
    SCHEDULED,
)
from .newrecords import NewRecords
from .workflow_keys import _NODE, _node_key, _pack, _state_key, _unpack
from .workflow_rewrite import export_nodes, rewrite

_WHEN = struct.Struct(">Q")


def _head_key(workflow_id: int) -> bytes:
    return b"W" + id_key(workflow_id)


# A node is three entries: what does not change once it is put (its name, children, always, and its payload
# and options until its job is written), its parents (read only to show it, or retry it), and what each
# settling changes (its count of parents, state, job, why it is doomed, result, error). A chord's callback
# has every member as a parent: its settlings then read and rewrite a few bytes each, never that list.
def _parents_key(workflow_id: int, index: int) -> bytes:
    return b"P" + _NODE.pack(workflow_id, index)


def _fixed_of(packed: list[Any]) -> list[Any]:
    name, _parents, children, always, _w, _s, _j, _d, payload, spec, _r, _e = packed
    return [name, children, always, payload, spec]


def _state_of(packed: list[Any]) -> list[Any]:
    _n, _p, _c, _a, waiting, state, job_id, doomed, _pl, _sp, result, error = packed
    return [waiting, state, job_id, doomed, result, error]


def _read_node(txn: Any, db: Any, workflow_id: int, index: int, parents: bool) -> wf.Node:
    name, children, always, payload, spec = _unpack(txn.get(_node_key(workflow_id, index), db=db))
    waiting, state, job_id, doomed, result, error = _unpack(txn.get(_state_key(workflow_id, index), db=db))
    found = _unpack(txn.get(_parents_key(workflow_id, index), db=db)) if parents else []
    return wf.Node.unpacked([name, found, children, always, waiting, state, job_id, doomed, payload, spec,
                             result, error])  # fmt: skip


def _head(shard: Any, txn: Any, workflow_id: int) -> list[Any] | None:
    raw = txn.get(_head_key(workflow_id), db=shard.workflows)
    return None if raw is None else list(_unpack(raw))


def _put_head(shard: Any, txn: Any, workflow_id: int, head: list[Any]) -> None:
    txn.put(_head_key(workflow_id), _pack(head), db=shard.workflows)


class LmdbGraph:
    """``workflows.Graph`` over one workflow's nodes, in an open write transaction of its shard."""

    def __init__(
        self, shard: Any, txn: Any, workflow_id: int, now_us: int, stored: bool = True, parents: bool = False
    ) -> None:
        self.shard, self.txn, self.workflow_id, self.now_us = shard, txn, workflow_id, now_us
        self.db = shard.workflows
        self.with_payload: set[int] = set()  # nodes read with their payload: a save without it rewrites them
        self.new = not stored  # a workflow being put: every save writes every part
        self.parents = parents  # read each node's parents too (a settling needs none: they read as [])
        self.head: list[Any] | None = None  # the workflow's head, once read

    def node(self, index: int) -> wf.Node:
        node = _read_node(self.txn, self.db, self.workflow_id, index, self.parents)
        if node.payload is not None:
            self.with_payload.add(index)
        return node

    def save(self, index: int, node: wf.Node) -> None:
        packed = node.packed()
        if self.new:
            self.txn.put(_parents_key(self.workflow_id, index), _pack(node.parents), db=self.db)
        if self.new or (node.payload is None and index in self.with_payload):
            self.txn.put(_node_key(self.workflow_id, index), _pack(_fixed_of(packed)), db=self.db)
            self.with_payload.discard(index)
        self.txn.put(_state_key(self.workflow_id, index), _pack(_state_of(packed)), db=self.db)

    def ended(self, state: wf.NodeState) -> None:
        head = self.head
        if head is None:
            head = self.head = _head(self.shard, self.txn, self.workflow_id)
            assert head is not None
        head[3] -= 1
        head[4] += state is not wf.NodeState.SUCCEEDED
        _put_head(self.shard, self.txn, self.workflow_id, head)

    def release(self, index: int, node: wf.Node) -> int:
        assert node.payload is not None and node.spec is not None
        self.shard.released = True  # the store hints once the transaction committed
        return write_job(self.shard, self.txn, self.now_us, self.workflow_id, index, node.payload, node.spec)


def write_job(
    shard: Any, txn: Any, now_us: int, workflow_id: int, index: int, payload: bytes, fields: list[Any]
) -> int:
    """A node's job, pending now behind the jobs waiting in its shard, counted as a put (the shard's
    counters written without the put's room check: a finishing transaction is never refused for room)."""
    spec = wf.spec_of(fields)
    spec.metadata = wf.node_metadata(spec, workflow_id, index)
    parts = NewRecords(spec)
    sequence, total, floor = put_counters(txn.get(COUNTERS_KEY, db=shard.jobs))
    ready_us = floor = floor if floor > now_us else now_us
    sequence = sequence + 1 if sequence >= now_us else now_us
    job_id: int = shard._write_one(txn, now_us, sequence, payload, parts, False, ready_us)
    tally(shard, txn, parts.queue_bytes, 0, 1, 1)
    txn.put(COUNTERS_KEY, PUT_COUNTERS.pack(sequence, total + 1, floor), db=shard.jobs)
    return job_id


def ended(shard: Any, txn: Any, record: list[Any]) -> None:
    """The job ``record`` (a node's: its metadata holds the mark) just ended, or is being deleted while it
    waited: settle its node in this transaction. Its time is the job's end, or for a removal (which is
    given none) the shard's latest put time, never the wall clock."""
    found = wf.node_of(record[F_METADATA])
    if found is None:
        return
    workflow_id, index = found
    batch: dict[bytes, list[Any]] | None = shard.wf_batch
    head_key = _head_key(workflow_id)
    head = _read(txn, shard.workflows, head_key, batch)
    if head is None:
        return  # forgotten, or a job whose metadata was copied from a node's
    state = record[F_STATE]
    if state == DONE:
        outcome, result, error = wf.NodeState.SUCCEEDED, record[F_RESULT], None
        if _succeeded(shard.workflows, txn, workflow_id, index, head_key, head, result, batch):
            return
    elif state == FAILED:
        outcome, result, error = wf.ending(True, record[F_ERROR_TYPE]), None, record[F_ERROR]
    else:
        outcome, result, error = wf.NodeState.CANCELLED, None, "cancelled: its job was removed"
    now_us = record[F_FINISHED_AT]
    if now_us is None:
        now_us = put_counters(txn.get(COUNTERS_KEY, db=shard.jobs))[2]
    flush(shard, txn)  # what the quick settlings of this transaction kept back, before a full one reads
    graph = LmdbGraph(shard, txn, workflow_id, now_us)
    graph.head = head
    wf.settle(graph, index, outcome, result, error)


_ENDED = frozenset(state.value for state in wf.ENDED)
_WAITING = wf.NodeState.WAITING.value
_SUCCEEDED = wf.NodeState.SUCCEEDED.value


def _read(txn: Any, db: Any, key: bytes, batch: dict[bytes, list[Any]] | None) -> list[Any] | None:
    """An entry (a head, a node's state part) as the transaction has it, kept back ones first."""
    if batch is not None:
        kept = batch.get(key)
        if kept is not None:
            return kept
    raw = txn.get(key, db=db)
    return None if raw is None else _unpack(raw)  # a new list (msgpack's arrays decode as lists)


def _write(txn: Any, db: Any, key: bytes, value: list[Any], batch: dict[bytes, list[Any]] | None) -> None:
    if batch is None:
        txn.put(key, _pack(value), db=db)
    else:
        batch[key] = value  # written once, by ``flush``, however many members of one chord end here


def flush(shard: Any, txn: Any) -> None:
    """Write what the quick settlings of this transaction kept back (``Shard.complete_many`` calls this
    before it commits; ``ended`` before a full settling)."""
    batch = shard.wf_batch
    if batch:
        for key, value in batch.items():
            txn.put(key, _pack(value), db=shard.workflows)
        batch.clear()


def _succeeded(
    db: Any, txn: Any, workflow_id: int, index: int, head_key: bytes, head: list[Any], result: Any, batch: Any
) -> bool:
    """``wf.settle`` of a node that succeeded and releases no child (each child it has still waits on
    another parent after it): a chord member's end, nearly always. Its state part, each waiting child's
    count and the head are rewritten as they are, with no ``Node`` built; inside ``complete_many`` the
    head and the children's parts are written once for all the transaction's members (``batch``). False,
    with nothing written, when a child would be released (``settle`` does that, and all the rest)."""
    at = _NODE.pack(workflow_id, index)  # the node's keys: b"N"/b"S" + at (workflow_keys)
    key = b"S" + at
    own = _read(txn, db, key, batch)
    assert own is not None
    if own[1] in _ENDED:
        return True  # ended before: settled once only (as ``settle`` skips it)
    fixed = _unpack(txn.get(b"N" + at, db=db))  # [name, children, always, payload, spec]
    if fixed[3] is not None:
        return False  # still holds its payload (``settle`` clears it)
    children: list[tuple[bytes, list[Any]]] = []
    for child_at in fixed[1]:
        child_key = _state_key(workflow_id, child_at)
        child = _read(txn, db, child_key, batch)
        assert child is not None
        if child[1] != _WAITING:
            continue
        if child[0] <= 1:
            return False
        children.append((child_key, child))
    own[1], own[4], own[5] = _SUCCEEDED, result, None
    txn.put(key, _pack(own), db=db)
    for child_key, child in children:
        child[0] -= 1
        _write(txn, db, child_key, child, batch)
    head[3] -= 1
    _write(txn, db, head_key, head, batch)
    return True


def put(shard: Any, now: float, nodes: Sequence[wf.NewNode]) -> int:
    now_us = micros(now)
    stored = wf.new_nodes(nodes)

    def txn_fn(txn: Any) -> int:
        workflow_id: int
        raw = txn.get(COUNTERS_KEY, db=shard.jobs)
        sequence, total, floor = put_counters(raw)
        sequence = sequence + 1 if sequence >= now_us else now_us
        workflow_id = sequence << 8 | shard.index
        shard._count_puts(txn, sequence, total, floor, len(stored))  # the room check, as a put's
        _put_head(shard, txn, workflow_id, [now_us, len(stored), False, len(stored), 0])
        graph = LmdbGraph(shard, txn, workflow_id, now_us, stored=False)
        for at, node in enumerate(stored):
            if not node.parents:
                node.job_id = graph.release(at, node)
                node.state, node.payload, node.spec = wf.NodeState.QUEUED, None, None
            graph.save(at, node)
        return workflow_id

    return int(shard.env.write(txn_fn))


def _nodes(shard: Any, txn: Any, workflow_id: int, count: int) -> list[wf.Node]:
    graph = LmdbGraph(shard, txn, workflow_id, 0, parents=True)
    return [graph.node(at) for at in range(count)]


def get(shard: Any, workflow_id: int) -> wf.WorkflowInfo | None:
    def txn_fn(txn: Any) -> wf.WorkflowInfo | None:
        head = _head(shard, txn, workflow_id)
        if head is None:
            return None
        created_us, count, cancelled = head[:3]
        return wf.info(workflow_id, created_us / 1_000_000, cancelled, _nodes(shard, txn, workflow_id, count))

    return shard.env.read(txn_fn)  # type: ignore[no-any-return]


def results(shard: Any, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
    def txn_fn(txn: Any) -> list[bytes | None]:
        out: list[bytes | None] = []
        for at in indexes:
            raw = txn.get(_state_key(workflow_id, at), db=shard.workflows) if at >= 0 else None
            out.append(None if raw is None else _unpack(raw)[4])  # the state part's result
        return out

    return shard.env.read(txn_fn)  # type: ignore[no-any-return]


def cancel(shard: Any, now: float, workflow_id: int, by: str | None) -> int:
    now_us = micros(now)

    def txn_fn(txn: Any) -> int:
        head = _head(shard, txn, workflow_id)
        if head is None:
            return 0
        count = head[1]
        head[2] = True
        _put_head(shard, txn, workflow_id, head)
        graph = LmdbGraph(shard, txn, workflow_id, now_us)
        live = sum(node.state not in wf.ENDED for node in _nodes(shard, txn, workflow_id, count))
        requested = 0
        for at in range(count):
            node = graph.node(at)
            if node.state is wf.NodeState.WAITING:
                wf.settle(graph, at, wf.NodeState.CANCELLED, None, "cancelled: the workflow was cancelled")
            elif node.state is wf.NodeState.QUEUED and node.job_id is not None:
                requested += _cancel_job(shard, txn, now_us, node.job_id, by) is CancelOutcome.REQUESTED
        still = sum(node.state not in wf.ENDED for node in _nodes(shard, txn, workflow_id, count))
        return live - still + requested

    return int(shard.env.write(txn_fn))


def _cancel_job(shard: ShardDbs, txn: Any, now_us: int, job_id: int, by: str | None) -> CancelOutcome:
    """``manage.cancel`` inside this transaction (a record that does not decode is left to the next
    operation that meets it)."""
    record = load_record(shard, txn, job_id)
    if record is None:
        return CancelOutcome.FINISHED
    if record[F_STATE] in (PENDING, SCHEDULED):
        delete_job(shard, txn, job_id, record)  # settles the node (cancelled)
        return CancelOutcome.REMOVED
    if record[F_STATE] == RUNNING:
        txn.put(id_key(job_id), _WHEN.pack(now_us), db=shard.cancels)
        record[F_METADATA] = with_cancel_note(record[F_METADATA], {"by": by, "at": now_us / 1_000_000})
        store_record(shard, txn, job_id, record)
        return CancelOutcome.REQUESTED
    return CancelOutcome.FINISHED


def retry_failed(shard: Any, now: float, workflow_id: int) -> int:
    now_us = micros(now)

    def txn_fn(txn: Any) -> int:
        head = _head(shard, txn, workflow_id)
        if head is None:
            return 0
        nodes = _nodes(shard, txn, workflow_id, head[1])

        def requeue(at: int, node: wf.Node) -> bool:
            assert node.job_id is not None
            record = load_record(shard, txn, node.job_id)
            if record is None or record[F_STATE] != FAILED or record[F_ERROR_TYPE] == CORRUPTED:
                return False
            unindex_job(shard, txn, node.job_id, record)
            record[F_STATE], record[F_RETRIES], record[F_READY_AT] = PENDING, 0, now_us
            record[F_STARTED_AT] = record[F_FINISHED_AT] = None
            record[F_ERROR] = record[F_ERROR_TYPE] = record[F_TRACEBACK] = None
            index_job(shard, txn, node.job_id, record)
            store_record(shard, txn, node.job_id, record)
            txn.delete(id_key(node.job_id), db=shard.cancels)
            shard.released = True
            return True

        changed, recounted = wf.reopen(nodes, requeue)
        _saved(shard, txn, workflow_id, head, nodes, changed, recounted)
        return len(changed)

    return int(shard.env.write(txn_fn))


def requeued(shard: Any, txn: Any, record: list[Any]) -> None:
    """The job ``record`` (a node's) was just requeued by itself, in ``txn``: its node is queued again and
    the nodes cancelled because of it wait on it again (``workflows.reopen``)."""
    found = wf.node_of(record[F_METADATA])
    head = None if found is None else _head(shard, txn, found[0])
    if found is None or head is None:
        return
    workflow_id, index = found
    nodes = _nodes(shard, txn, workflow_id, head[1])
    changed, recounted = wf.reopen(nodes, lambda at, node: False, only=index)
    _saved(shard, txn, workflow_id, head, nodes, changed, recounted)


def _saved(
    shard: Any,
    txn: Any,
    workflow_id: int,
    head: list[Any],
    nodes: list[wf.Node],
    changed: list[int],
    recounted: list[int],
) -> None:
    """Write the nodes ``wf.reopen`` changed, and the head's counts (each node ``changed`` is live again)."""
    graph = LmdbGraph(shard, txn, workflow_id, 0)
    for at in [*changed, *recounted]:
        graph.save(at, nodes[at])
    if changed:
        head[3] += len(changed)
        head[4] -= len(changed)
        _put_head(shard, txn, workflow_id, head)


def status(shard: Any, workflow_id: int) -> wf.Status | None:
    def txn_fn(txn: Any) -> wf.Status | None:
        head = _head(shard, txn, workflow_id)
        return None if head is None else wf.status_of(head[3], head[4], head[2])

    return shard.env.read(txn_fn)  # type: ignore[no-any-return]


def counts(shard: Any) -> dict[wf.Status, int]:
    def txn_fn(txn: Any) -> dict[wf.Status, int]:
        out = dict.fromkeys(wf.Status, 0)
        cursor = txn.cursor(db=shard.workflows)
        if cursor.set_range(b"W"):
            for key, value in cursor:
                if not bytes(key).startswith(b"W"):
                    break
                head = _unpack(value)
                out[wf.status_of(head[3], head[4], head[2])] += 1
        return out

    return shard.env.read(txn_fn)  # type: ignore[no-any-return]


def forget(shard: Any, now: float, cutoff: float, batch: int = 1000) -> int:
    """Drop ended workflows put at or before ``cutoff``, ``batch`` heads a transaction."""
    cutoff_us = micros(cutoff)
    start = b"W"
    gone = 0
    while True:

        def txn_fn(txn: Any, start: bytes = start) -> tuple[int, bytes | None]:
            cursor = txn.cursor(db=shard.workflows)
            dropped, seen = 0, 0
            if not cursor.set_range(start):
                return 0, None
            while seen < batch:
                key = bytes(cursor.key())
                if not key.startswith(b"W"):
                    return dropped, None
                seen += 1
                workflow_id = int.from_bytes(key[1:], "big")
                created_us, count, _, live = _unpack(cursor.value())[:4]
                if created_us <= cutoff_us and live <= 0:
                    for at in range(count):
                        txn.delete(_node_key(workflow_id, at), db=shard.workflows)
                        txn.delete(_state_key(workflow_id, at), db=shard.workflows)
                        txn.delete(_parents_key(workflow_id, at), db=shard.workflows)
                    txn.delete(key, db=shard.workflows)
                    dropped += 1
                    if not cursor.set_range(key):
                        return dropped, None
                    continue
                if not cursor.next():
                    return dropped, None
            return dropped, bytes(cursor.key())

        dropped, following = shard.env.write(txn_fn)
        gone += int(dropped)
        if following is None:
            return gone
        start = following


class LmdbWorkflows:
    """``WorkflowOps`` of the LMDB store: each workflow on the shard its id names."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _shard(self, workflow_id: int) -> Any | None:
        index = shard_of(workflow_id)
        return self.store._shards[index] if index < self.store.shards else None

    def hint(self, shard: Any) -> None:
        """After a transaction of ``shard`` committed: if it released a node, wake the consumers."""
        if shard.released:
            shard.released = False
            self.store.hints.notify(shard.index)

    def put(self, now: float, shard: int, nodes: Sequence[wf.NewNode], connection: Any = None) -> int:
        one = self.store._shards[shard]
        workflow_id = put(one, now, nodes)
        self.hint(one)
        return workflow_id

    def get(self, now: float, workflow_id: int) -> wf.WorkflowInfo | None:
        one = self._shard(workflow_id)
        return None if one is None else get(one, workflow_id)

    def status(self, workflow_id: int) -> wf.Status | None:
        one = self._shard(workflow_id)
        return None if one is None else status(one, workflow_id)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(wf.Status, 0)
        for one in self.store._shards:
            for key, count in counts(one).items():
                out[key] += count
        return {key.value: count for key, count in out.items()}

    def results(self, workflow_id: int, indexes: Sequence[int]) -> list[bytes | None]:
        one = self._shard(workflow_id)
        return [None] * len(indexes) if one is None else results(one, workflow_id, indexes)

    def cancel(self, now: float, workflow_id: int, by: str | None = None) -> int:
        one = self._shard(workflow_id)
        if one is None:
            return 0
        reached = cancel(one, now, workflow_id, by)
        self.hint(one)
        return reached

    def retry_failed(self, now: float, workflow_id: int) -> int:
        one = self._shard(workflow_id)
        if one is None:
            return 0
        started = retry_failed(one, now, workflow_id)
        self.hint(one)
        return started

    def forget(self, now: float, cutoff: float) -> int:
        return sum(forget(one, now, cutoff) for one in self.store._shards)

    def export_nodes(self, shard: int, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
        return export_nodes(self.store._shards[shard], after, limit)

    def rewrite(self, shard: int, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
        check_changes(changes)
        return rewrite(self.store._shards[shard], changes) if changes else []
