"""Rewriting the user's data that workflows keep on their nodes: ``Store.workflows.export_nodes`` and
``rewrite`` (``[sc_workflow_rewrite]``, ``engine/stores/contract/workflows.py``), which ``manage.py
queue_rekey`` uses to seal a waiting node's payload and metadata, and a node's result and error, again under
a new key. Only a node that still holds what was read is rewritten; nothing else of it changes."""

from __future__ import annotations

import dataclasses
import json

import pytest

from queue_max_django.engine import codec
from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.workflows import NodeData, NodeRef
from queue_max_django.engine.workflows import WORKFLOW_KEY, NewNode, WorkflowInfo
from tests.store_contract.conftest import T0, claim, job, pack, spec
from tests.store_contract.test_workflows import FAILURE, run


def _put(store: Store, shard: int) -> int:
    """a -> b, a -> c, (b, c) -> d (``always``: it runs however c ended), d with metadata of its own."""
    meta = b'{"k":1,"_sealed":"m-old"}'
    nodes = [
        NewNode("a", pack("a"), spec(name="a")),
        NewNode("b", pack("b"), spec(name="b"), (0,)),
        NewNode("c", pack("c"), spec(name="c"), (0,)),
        NewNode("d", pack("d"), spec(name="d", metadata=meta), (1, 2), True),
    ]
    return store.workflows.put(T0, shard, nodes)


def exported(store: Store, limit: int = 2) -> list[tuple[NodeRef, NodeData]]:
    """Every node that holds user data, read ``limit`` a call, shard by shard."""
    out: list[tuple[NodeRef, NodeData]] = []
    for shard in range(store.shards):
        after: NodeRef | None = None
        while found := store.workflows.export_nodes(shard, after, limit):
            assert len(found) <= limit
            out.extend(found)
            after = found[-1][0]
    return out


def _new(data: NodeData, tag: str) -> NodeData:
    return NodeData(
        None if data.payload is None else pack(f"{tag}-payload"),
        None if data.metadata is None else json.dumps({**json.loads(data.metadata), "_sealed": tag}).encode(),
        None if data.result is None else codec.pack_value(f"{tag}-result", what="result", limit=1 << 20),
        None if data.error is None else f"{tag}-error",
    )


def _meta(data: NodeData) -> object:
    return json.loads(data.metadata) if data.metadata is not None else None


def _shown(info: WorkflowInfo) -> list[tuple[object, ...]]:
    return [(n.name, n.state, n.job_id, n.parents, n.always) for n in info.nodes]


@pytest.mark.sc_workflow_rewrite
def test_rewrite_replaces_the_nodes_data_and_nothing_else(store: Store) -> None:
    shard = store.shards - 1
    workflow_id = _put(store, shard)
    run(store, T0 + 1, "a", "a-result", shard=shard)
    assert [ref for ref, _d in exported(store)] == [(workflow_id, 0), (workflow_id, 3)]  # b, c: jobs now
    [held] = claim(store, T0 + 2, shard=shard)  # b fails (a dead letter): its node keeps the error
    assert held.payload == "b"
    assert store.fail(T0 + 2, held.job_id, held.token, FAILURE, None, False) is State.FAILED
    found = dict(exported(store))
    assert sorted(found) == [(workflow_id, 0), (workflow_id, 1), (workflow_id, 3)]
    a, b, d = found[(workflow_id, 0)], found[(workflow_id, 1)], found[(workflow_id, 3)]
    assert a == NodeData(None, None, codec.pack_value("a-result", what="result", limit=1 << 20), None)
    assert (b.payload, b.metadata, b.result, b.error) == (None, None, None, "boom")
    assert d.payload == pack("d") and d.result is None and d.error is None
    assert {k: v for k, v in (_meta(d) or {}).items() if k != WORKFLOW_KEY} == {"k": 1, "_sealed": "m-old"}
    before = store.workflows.get(T0, workflow_id)
    counts, status = store.counts(), store.workflows.status(workflow_id)
    assert before is not None
    changes = [(ref, data, _new(data, f"n{ref[1]}")) for ref, data in found.items()]
    assert sorted(store.workflows.rewrite(shard, changes)) == sorted(found)
    after = dict(exported(store))
    assert sorted(after) == sorted(found)
    for ref, _old, new in changes:
        assert dataclasses.replace(after[ref], metadata=None) == dataclasses.replace(new, metadata=None)
        assert _meta(after[ref]) == _meta(new)
    info = store.workflows.get(T0, workflow_id)
    assert info is not None and _shown(info) == _shown(before)
    assert [n.error for n in info.nodes] == [None, "n1-error", None, None]
    assert store.counts() == counts and store.workflows.status(workflow_id) == status
    assert store.workflows.results(workflow_id, [0]) == [after[(workflow_id, 0)].result]
    run(store, T0 + 3, "c", shard=shard)  # c's end releases d (always): its job is what was rewritten
    released = store.workflows.get(T0, workflow_id)
    d_id = None if released is None else released.nodes[3].job_id
    assert d_id is not None
    d_job = job(store, T0, d_id)
    assert d_job.payload == "n3-payload"
    assert d_job.metadata == {"k": 1, "_sealed": "n3", WORKFLOW_KEY: [workflow_id, 3]}
    assert (workflow_id, 3) not in dict(exported(store))  # a released node keeps no payload


@pytest.mark.sc_workflow_rewrite
def test_rewrite_skips_a_node_that_changed_and_refuses_a_bad_change(store: Store) -> None:
    workflow_id = _put(store, 0)
    ref = (workflow_id, 3)
    before = exported(store)
    assert [at for (_w, at), _d in before] == [1, 2, 3]  # the waiting nodes
    d = dict(before)[ref]
    stale = dataclasses.replace(d, payload=pack("not what is stored"))
    assert store.workflows.rewrite(0, [(ref, stale, _new(stale, "x"))]) == []
    assert store.workflows.rewrite(0, [((workflow_id + 404, 3), d, _new(d, "x"))]) == []
    assert store.workflows.rewrite(0, [((workflow_id, 9), d, _new(d, "x"))]) == []
    with pytest.raises(ValueError, match="result is None in one of old and new"):
        store.workflows.rewrite(0, [(ref, d, dataclasses.replace(_new(d, "x"), result=pack("r")))])
    assert exported(store) == before  # nothing written
    run(store, T0 + 1, "a")
    run(store, T0 + 2, "b")
    run(store, T0 + 3, "c")  # d released between the read and the write: its node holds no payload now
    assert store.workflows.rewrite(0, [(ref, d, _new(d, "x"))]) == []
    released = store.workflows.get(T0, workflow_id)
    d_id = None if released is None else released.nodes[3].job_id
    assert d_id is not None and job(store, T0, d_id).payload == "d"
    assert ref not in dict(exported(store))  # queued: its job holds its data
