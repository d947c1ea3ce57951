"""Workflows in the store: a graph put in one transaction, waiting nodes that are not jobs, and the release
of a child inside the transaction that ends its last parent (``engine/stores/contract/workflows.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from queue_max_django.engine import codec
from queue_max_django.engine.cancels import CancelOutcome
from queue_max_django.engine.job import CANCELLED, State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import Claimed
from queue_max_django.engine.tokens import new_token
from queue_max_django.engine.workflows import (
    WORKFLOW_KEY,
    NewNode,
    NodeState,
    Status,
    WorkflowInfo,
    plan,
)
from tests.store_contract.conftest import LEASE, T0, claim, job, pack, put, spec

FAILURE = ("boom", "ValueError", None)


def graph(
    store: Store, edges: dict[str, Sequence[str]], *, always: Sequence[str] = (), shard: int = 0
) -> int:
    """Put the workflow whose nodes are ``edges``' keys (each with its parents). -> its id."""
    names = list(edges)
    order = plan(names, [edges[name] for name in names])
    where = {names[at]: new for new, at in enumerate(order)}
    nodes = [
        NewNode(
            names[at],
            pack(names[at]),
            spec(name=names[at]),
            tuple(where[p] for p in edges[names[at]]),
            names[at] in always,
        )
        for at in order
    ]
    return store.workflows.put(T0, shard, nodes)


def states(store: Store, workflow_id: int) -> dict[str, str]:
    info = store.workflows.get(T0, workflow_id)
    assert info is not None
    return {node.name: node.state.value for node in info.nodes}


def node(store: Store, workflow_id: int, name: str) -> int | None:
    info = store.workflows.get(T0, workflow_id)
    assert info is not None
    return {n.name: n.job_id for n in info.nodes}[name]


def run(store: Store, now: float, name: str, result: object = None, *, shard: int = 0) -> Claimed:
    """Claim the next job, check it is node ``name``, complete it with ``result``."""
    [held] = claim(store, now, shard=shard)
    assert held.payload == name
    store.complete(
        now, held.job_id, held.token, codec.pack_value(result, what="result", limit=1 << 20), False
    )
    return held


def failing(store: Store, now: float, name: str) -> Claimed:
    [held] = claim(store, now)
    assert held.payload == name
    assert store.fail(now, held.job_id, held.token, FAILURE, None, False) is State.FAILED
    return held


def info(store: Store, workflow_id: int) -> WorkflowInfo:
    found = store.workflows.get(T0, workflow_id)
    assert found is not None
    return found


@pytest.mark.sc_workflow_put
def test_a_workflows_roots_are_jobs_and_its_other_nodes_wait_apart_from_the_jobs(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": []})
    assert states(store, workflow_id) == {
        "a": "queued",
        "e": "queued",
        "b": "waiting",
        "c": "waiting",
        "d": "waiting",
    }
    counts = store.counts()
    assert counts["pending"] == 2 and counts["total"] == 2  # waiting nodes are not jobs
    roots = store.list_jobs(
        T0, State.PENDING, queue=None, name=None, after=None, limit=10, newest_first=False, shard=None
    )
    assert sorted(j.payload for j in roots) == ["a", "e"]
    assert all(j.metadata[WORKFLOW_KEY][0] == workflow_id for j in roots)
    assert info(store, workflow_id).status is Status.RUNNING
    assert store.verify() == []


@pytest.mark.sc_workflow_release
def test_a_child_becomes_a_job_in_the_transaction_that_ends_its_last_parent(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    run(store, T0 + 1, "a", 1)
    assert states(store, workflow_id) == {"a": "succeeded", "b": "queued", "c": "queued", "d": "waiting"}
    b_id = node(store, workflow_id, "b")
    assert b_id is not None and job(store, T0, b_id).state is State.PENDING
    assert job(store, T0, b_id).metadata == {WORKFLOW_KEY: [workflow_id, 1]}
    assert store.counts()["total"] == 3
    first, second = claim(store, T0 + 2, limit=2)
    store.complete_many(T0 + 3, [(first.job_id, first.token, None)], False)
    assert states(store, workflow_id)["d"] == "waiting"  # one parent of two ended
    assert store.complete_many(T0 + 3, [(second.job_id, second.token, None)], False) == {}
    assert states(store, workflow_id)["d"] == "queued"
    run(store, T0 + 4, "d")
    assert info(store, workflow_id).status is Status.SUCCEEDED
    assert store.verify() == []


@pytest.mark.sc_workflow_cancel_children
def test_children_of_a_failed_parent_are_cancelled_with_the_reason_unless_always(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["b"], "cleanup": ["a"]}, always=["cleanup"])
    failing(store, T0 + 1, "a")
    found = info(store, workflow_id)
    by_name = {n.name: n for n in found.nodes}
    assert by_name["a"].state is NodeState.FAILED and by_name["a"].error == "boom"
    assert by_name["b"].state is NodeState.CANCELLED and by_name["b"].job_id is None
    assert by_name["b"].error == "cancelled: parent 'a' failed"
    assert by_name["c"].error == "cancelled: parent 'b' cancelled"
    assert by_name["cleanup"].state is NodeState.QUEUED  # always: released however its parent ended
    run(store, T0 + 2, "cleanup")
    assert info(store, workflow_id).status is Status.FAILED
    assert store.counts()["pending"] == 0


@pytest.mark.sc_workflow_release
def test_a_last_try_lost_to_an_expired_lease_ends_the_node_as_failed(store: Store) -> None:
    names = ["a", "b"]
    nodes = [NewNode("a", pack("a"), spec(max_retries=0)), NewNode("b", pack("b"), spec(), (0,))]
    assert plan(names, [[], ["a"]]) == [0, 1]
    workflow_id = store.workflows.put(T0, 0, nodes)
    claim(store, T0)
    store.recover_expired(T0 + LEASE + 1)
    assert states(store, workflow_id) == {"a": "failed", "b": "cancelled"}


@pytest.mark.sc_workflow_release
def test_a_waiting_job_cancelled_or_deleted_ends_its_node_as_cancelled(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "x": [], "y": ["x"]})
    a_id, x_id = node(store, workflow_id, "a"), node(store, workflow_id, "x")
    assert a_id is not None and x_id is not None
    assert store.cancel(T0 + 1, a_id) is CancelOutcome.REMOVED
    assert store.delete(T0 + 1, x_id, None)
    assert states(store, workflow_id) == {
        "a": "cancelled",
        "b": "cancelled",
        "x": "cancelled",
        "y": "cancelled",
    }
    assert store.verify() == []


@pytest.mark.sc_workflow_result
def test_a_parents_result_stays_on_its_node_after_its_job_is_vacuumed(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": [], "c": ["a", "b"]})
    run(store, T0 + 1, "a", {"x": 1})
    held = run(store, T0 + 1, "b", [2])
    assert store.vacuum(T0 + 100, T0 + 50, 0) == 2
    assert store.job(T0, held.job_id) is None
    packed = store.workflows.results(workflow_id, [0, 1, 2])
    assert [None if p is None else codec.unpack_value(p) for p in packed] == [{"x": 1}, [2], None]
    assert store.workflows.results(workflow_id + 1_000_000, [0]) == [None]


@pytest.mark.sc_workflow_get
def test_reading_a_workflow(store: Store) -> None:
    assert store.workflows.get(T0, 12345) is None
    workflow_id = graph(store, {"a": [], "b": ["a"]}, always=["b"])
    found = info(store, workflow_id)
    assert found.workflow_id == workflow_id and found.created_at == pytest.approx(T0)
    assert not found.cancelled
    assert [(n.index, n.name, n.parents, n.always) for n in found.nodes] == [
        (0, "a", (), False),
        (1, "b", (0,), True),
    ]
    assert found.nodes[0].job_id is not None and found.nodes[1].job_id is None


@pytest.mark.sc_workflow_cancel
def test_cancelling_a_workflow(store: Store) -> None:
    workflow_id = graph(store, {"run": [], "wait": [], "later": ["run"]})
    [held] = claim(store, T0)
    assert held.payload == "run"
    assert store.workflows.cancel(T0 + 1, workflow_id, by="alice") == 3
    assert states(store, workflow_id) == {"run": "queued", "wait": "cancelled", "later": "cancelled"}
    assert store.cancel_requested(held.job_id)
    assert info(store, workflow_id).status is Status.RUNNING  # until its running job ends
    store.fail(T0 + 2, held.job_id, held.token, ("cancelled", CANCELLED, None), None, False)
    assert info(store, workflow_id).status is Status.CANCELLED
    assert store.counts()["pending"] == 0
    assert store.workflows.cancel(T0 + 3, workflow_id + 1_000_000) == 0


@pytest.mark.sc_workflow_retry
def test_retry_failed_starts_the_failed_nodes_and_what_waits_on_them_again(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["b"], "ok": []})
    run(store, T0, "a")
    run(store, T0 + 1, "ok")
    failing(store, T0 + 1, "b")
    assert states(store, workflow_id) == {
        "a": "succeeded",
        "b": "failed",
        "c": "cancelled",
        "ok": "succeeded",
    }
    assert store.workflows.retry_failed(T0 + 2, workflow_id) == 2
    assert states(store, workflow_id) == {"a": "succeeded", "b": "queued", "c": "waiting", "ok": "succeeded"}
    run(store, T0 + 3, "b")
    run(store, T0 + 4, "c")
    assert info(store, workflow_id).status is Status.SUCCEEDED
    assert store.workflows.retry_failed(T0 + 5, workflow_id) == 0


@pytest.mark.sc_workflow_retry
def test_retry_failed_brings_back_every_descendant_the_failure_cancelled(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["b"], "d": ["c", "ok"], "ok": []})
    run(store, T0, "a")
    run(store, T0 + 1, "ok")
    failing(store, T0 + 1, "b")
    assert states(store, workflow_id)["d"] == "cancelled"
    assert store.workflows.retry_failed(T0 + 2, workflow_id) == 3
    assert states(store, workflow_id) == {
        "a": "succeeded", "b": "queued", "c": "waiting", "d": "waiting", "ok": "succeeded",
    }  # fmt: skip
    run(store, T0 + 3, "b")
    run(store, T0 + 4, "c")
    run(store, T0 + 5, "d")
    assert info(store, workflow_id).status is Status.SUCCEEDED
    assert store.workflows.status(workflow_id) is Status.SUCCEEDED


@pytest.mark.sc_workflow_retry
def test_requeueing_a_nodes_dead_letter_brings_back_what_it_cancelled(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": ["b"]})
    held = failing(store, T0, "a")
    assert states(store, workflow_id) == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    assert store.workflows.status(workflow_id) is Status.FAILED
    assert store.requeue(T0 + 1, held.job_id)
    assert states(store, workflow_id) == {"a": "queued", "b": "waiting", "c": "waiting"}
    assert store.workflows.status(workflow_id) is Status.RUNNING
    run(store, T0 + 2, "a", 1)
    run(store, T0 + 3, "b", 2)
    run(store, T0 + 4, "c", 3)
    assert info(store, workflow_id).status is Status.SUCCEEDED
    assert store.workflows.status(workflow_id) is Status.SUCCEEDED
    assert [codec.unpack_value(raw) for raw in store.workflows.results(workflow_id, [0, 1, 2])] == [1, 2, 3]


@pytest.mark.sc_workflow_retry
def test_requeueing_a_cancelled_nodes_job_runs_it_and_what_waited_on_it(store: Store) -> None:
    workflow_id = graph(store, {"a": [], "b": ["a"]})
    [held] = claim(store, T0)
    assert store.fail(T0, held.job_id, held.token, ("stop", CANCELLED, None), None, False) is State.FAILED
    assert states(store, workflow_id) == {"a": "cancelled", "b": "cancelled"}
    assert store.requeue(T0 + 1, held.job_id)
    assert states(store, workflow_id) == {"a": "queued", "b": "waiting"}
    run(store, T0 + 2, "a")
    run(store, T0 + 3, "b")
    assert store.workflows.status(workflow_id) is Status.SUCCEEDED


@pytest.mark.sc_workflow_get
@pytest.mark.sc_workflow_counts
def test_status_and_counts_follow_the_nodes_as_they_end(store: Store) -> None:
    assert store.workflows.status(999) is None
    assert store.workflows.counts() == {"running": 0, "succeeded": 0, "failed": 0, "cancelled": 0}
    ok = graph(store, {"a": [], "b": ["a"]})
    bad = graph(store, {"c": [], "d": ["c"]})
    gone = graph(store, {"e": ["f"], "f": []})
    assert store.workflows.counts() == {"running": 3, "succeeded": 0, "failed": 0, "cancelled": 0}
    run(store, T0, "a")
    failing(store, T0, "c")
    assert store.workflows.status(bad) is Status.FAILED
    assert store.workflows.status(ok) is Status.RUNNING
    store.workflows.cancel(T0, gone)
    run(store, T0, "b")
    assert store.workflows.status(ok) is Status.SUCCEEDED
    assert store.workflows.counts() == {"running": 0, "succeeded": 1, "failed": 1, "cancelled": 1}
    assert store.workflows.retry_failed(T0, bad) == 2
    assert store.workflows.status(bad) is Status.RUNNING
    for workflow_id in (ok, bad, gone):
        assert store.workflows.status(workflow_id) is info(store, workflow_id).status


@pytest.mark.sc_workflow_forget
def test_forget_drops_ended_workflows_only(store: Store) -> None:
    done = graph(store, {"a": []})
    running = graph(store, {"b": [], "c": ["b"]})
    run(store, T0, "a")
    assert store.workflows.forget(T0 + 10, T0 + 5) == 1
    assert store.workflows.get(T0, done) is None
    assert store.workflows.get(T0, running) is not None


@pytest.mark.sc_workflow_one_shard
def test_every_job_of_a_workflow_is_in_the_shard_it_was_put_in(store: Store) -> None:
    shard = store.shards - 1
    workflow_id = graph(store, {"a": [], "b": ["a"], "c": []}, shard=shard)
    [held] = store.claim(shard, T0, None, LEASE, new_token(), None, None, 1).claimed
    store.complete(T0, held.job_id, held.token, None, False)
    ids = [n.job_id for n in info(store, workflow_id).nodes if n.job_id is not None]
    assert len(ids) == 3 and {i & 0xFF for i in ids} == {shard}
    assert put(store, T0, "plain", shard=shard)


@pytest.mark.sc_workflow_result
def test_results_of_many_nodes_or_of_a_few_far_apart(store: Store) -> None:
    """A chord's callback asks for every member's result at once; a node may ask for two far apart; an
    index that is no node's, or a node that has not succeeded, reads as None."""
    edges: dict[str, list[str]] = {f"m{i}": [] for i in range(40)}
    workflow_id = graph(store, edges)
    for _ in range(40):
        [held] = claim(store, T0)
        if held.payload != "m5":
            store.complete(
                T0, held.job_id, held.token, codec.pack_value(held.payload, what="r", limit=99), False
            )
    every = store.workflows.results(workflow_id, list(range(40)))
    assert [None if raw is None else codec.unpack_value(raw) for raw in every] == [
        None if i == 5 else f"m{i}" for i in range(40)
    ]
    few = store.workflows.results(workflow_id, [39, 0, 5, 77, -1, 0])
    assert [None if raw is None else codec.unpack_value(raw) for raw in few] == [
        "m39",
        "m0",
        None,
        None,
        None,
        "m0",
    ]
    assert store.workflows.results(workflow_id, []) == []
    assert store.workflows.results(workflow_id + 1_000_000, [0, 1]) == [None, None]


@pytest.mark.sc_workflow_retry
@pytest.mark.parametrize("how", ["requeue", "retry_failed"])
def test_a_node_still_waiting_on_another_parent_counts_the_retried_one_again(store: Store, how: str) -> None:
    """A chord's callback after one member failed while another still runs: it waits, doomed. Retrying the
    failed member makes it wait on both again, undoomed, so it runs once both succeed."""
    workflow_id = graph(store, {"a": [], "b": [], "c": ["a", "b"]})
    held_a = failing(store, T0, "a")
    assert states(store, workflow_id) == {"a": "failed", "b": "queued", "c": "waiting"}
    if how == "requeue":
        assert store.requeue(T0 + 1, held_a.job_id)
    else:
        assert store.workflows.retry_failed(T0 + 1, workflow_id) == 1
    assert states(store, workflow_id) == {"a": "queued", "b": "queued", "c": "waiting"}
    assert store.workflows.status(workflow_id) is Status.RUNNING
    run(store, T0 + 2, "b", 2)
    assert states(store, workflow_id)["c"] == "waiting"  # still waits on a
    run(store, T0 + 3, "a", 1)
    run(store, T0 + 4, "c", 3)
    assert info(store, workflow_id).status is Status.SUCCEEDED
    assert store.workflows.status(workflow_id) is Status.SUCCEEDED
