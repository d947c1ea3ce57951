"""``verify`` of a shard's ``workflows`` database (``workflows.py`` has its layout): every workflow's head and
nodes decode, each node's parts are all there, its parents and children agree, a waiting node's count is
its parents that have not ended, a queued node's job is a job of this shard that names the node and has
not ended (an ended node's job may be gone: vacuumed or purged), and the head's counts are its nodes'.
Entries of no workflow are named too. Reads only, in the caller's read transaction.
"""

from __future__ import annotations

from typing import Any

from ... import workflows as wf
from ...errors import QueueCorrupted
from . import layout
from .keys import id_key
from .layout import DONE, F_METADATA, F_STATE, FAILED
from .workflow_keys import _NODE, _unpack

_PARTS = (b"N", b"S", b"P")  # what a node is: fixed part, state part, parents


def verify_workflows(shard: Any, txn: Any, tag: str) -> list[str]:
    """Every problem of the shard's workflows (``[]``: none)."""
    problems: list[str] = []
    counts: dict[int, int] = {}
    cursor = txn.cursor(db=shard.workflows)
    if cursor.set_range(b"W"):
        for key, raw in cursor:
            key = bytes(key)
            if not key.startswith(b"W"):
                break
            workflow_id = int.from_bytes(key[1:], "big")
            where = f"{tag}: workflow {workflow_id}"
            try:
                head = list(_unpack(raw))
                _created, count, _cancelled, live, bad = head[:5]
            except Exception as exc:  # any shape but ours
                problems.append(f"{where}: its head does not decode ({exc!r})")
                continue
            counts[workflow_id] = count
            if workflow_id & 0xFF != shard.index:
                problems.append(f"{where}: its id names shard {workflow_id & 0xFF}")
            problems.extend(_nodes(shard, txn, where, workflow_id, count, live, bad))
    for part in _PARTS:
        if not cursor.set_range(part):
            continue
        for key in cursor.iternext(values=False):
            key = bytes(key)
            if not key.startswith(part):
                break
            workflow_id, index = _NODE.unpack(key[1:])
            if index >= counts.get(workflow_id, 0):
                problems.append(f"{tag}: a node entry of no workflow (workflow {workflow_id}, node {index})")
    return problems


def _nodes(shard: Any, txn: Any, where: str, workflow_id: int, count: int, live: int, bad: int) -> list[str]:
    problems: list[str] = []
    nodes: list[wf.Node | None] = []
    for at in range(count):
        fields: list[bytes] = []
        for part in _PARTS:
            raw = txn.get(part + _NODE.pack(workflow_id, at), db=shard.workflows)
            if raw is not None:
                fields.append(raw)
        if len(fields) < len(_PARTS):
            problems.append(f"{where}: node {at} lacks a part of its entry")
            nodes.append(None)
            continue
        try:
            name, children, always, payload, spec = _unpack(fields[0])
            waiting, state, job_id, doomed, result, error = _unpack(fields[1])
            parents = _unpack(fields[2])
            nodes.append(wf.Node.unpacked([name, parents, children, always, waiting, state, job_id, doomed,
                                           payload, spec, result, error]))  # fmt: skip
        except Exception as exc:  # any shape but ours
            problems.append(f"{where}: node {at} does not decode ({exc!r})")
            nodes.append(None)
    if len(problems):
        return problems  # the graph cannot be checked further
    known = [node for node in nodes if node is not None]
    for at, node in enumerate(known):
        label = f"{where}: node {at} ({node.name!r})"
        for parent in node.parents:
            if not 0 <= parent < at or at not in known[parent].children:
                problems.append(f"{label}: its parent {parent} does not list it as a child")
        for child in node.children:
            if not at < child < count or at not in known[child].parents:
                problems.append(f"{label}: its child {child} does not list it as a parent")
        if node.state is wf.NodeState.WAITING:
            unended = sum(known[p].state not in wf.ENDED for p in node.parents if 0 <= p < count)
            if node.waiting != unended:
                problems.append(f"{label}: waits on {node.waiting} parents, {unended} have not ended")
            if node.payload is None or node.job_id is not None:
                problems.append(f"{label}: waits, but has a job or no payload")
        elif node.state is wf.NodeState.QUEUED:
            problems.extend(_queued_job(shard, txn, label, workflow_id, at, node.job_id))
    still = sum(node.state not in wf.ENDED for node in known)
    failed = sum(node.state in (wf.NodeState.FAILED, wf.NodeState.CANCELLED) for node in known)
    if (live, bad) != (still, failed):
        problems.append(
            f"{where}: its head counts (not ended, failed or cancelled) = ({live}, {bad}), its nodes are "
            f"({still}, {failed})"
        )
    return problems


def _queued_job(shard: Any, txn: Any, label: str, workflow_id: int, at: int, job_id: int | None) -> list[str]:
    """A queued node's job: there, of this shard, naming the node, not ended (its end would have settled
    the node)."""
    if job_id is None:
        return [f"{label}: is queued but has no job"]
    raw = txn.get(id_key(job_id), db=shard.jobs)
    if raw is None:
        return [f"{label}: its job {job_id} is not stored"]
    try:
        record = layout.unpack_record(raw, job_id)
    except QueueCorrupted:
        return []  # the jobs' own check names the record
    if wf.node_of(record[F_METADATA]) != (workflow_id, at):
        return [f"{label}: its job {job_id} does not name the node"]
    if record[F_STATE] in (DONE, FAILED):
        return [f"{label}: is queued, but its job {job_id} has ended"]
    return []
