"""chain, group, chord and Workflow through the Django layer: what each stores, the results a step gets,
failures, cancel, retry, and the bad input refused before anything is stored (on every store)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import override_settings

import queue_max_django
from queue_max_django import Workflow, WorkflowResult, chain, chord, group
from queue_max_django.conf import get_queue
from queue_max_django.engine import QueueEmpty, State
from queue_max_django.engine.workflows import WORKFLOW_KEY, InvalidWorkflow, NodeState
from queue_max_django.running.runner import run_job
from queue_max_django.workflows import WorkflowNotFound
from tests.testapp import workflow_tasks as w

Configure = Callable[..., override_settings]


@pytest.fixture
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max():
        yield


@pytest.fixture
def immediate(queue_max: Configure) -> Iterator[None]:
    with queue_max(IMMEDIATE=True):
        yield


def drain(wait: float = 0.3) -> int:
    """Run every job there is, here, one at a time, as a worker would. -> how many ran. A job's outcome may
    be written while the next one is claimed (a server's commit: ``Store.server_commits``), so a child
    released by it may show a moment later: each claim waits up to ``wait`` seconds."""
    queue, ran = get_queue(), 0
    while True:
        try:
            record = queue.get(wait)
        except QueueEmpty:
            return ran
        run_job(record)
        ran += 1


def stored_total() -> int:
    return int(get_queue().stats()["total"])


def test_the_package_exports_the_workflow_names() -> None:
    assert queue_max_django.chain is chain and queue_max_django.Workflow is Workflow
    assert queue_max_django.group is group and queue_max_django.chord is chord
    assert queue_max_django.WorkflowResult is WorkflowResult


def test_a_chain_passes_each_result_on_and_si_takes_none(store: None) -> None:
    result = chain(w.wf_add.s(1, 2), w.wf_add.s(10), w.wf_add.si(100, 1)).delay()
    assert result.status == "running"
    queue = get_queue()
    assert queue.stats()["pending"] == 1 and stored_total() == 1  # only the first step is a job yet
    first = queue.job(int(result.nodes[0].job_id or 0))
    assert first is not None and first.metadata[WORKFLOW_KEY] == [int(result.id), 0]
    assert drain() == 3
    assert result.status == "succeeded"
    assert result.results == {"0": 3, "1": 13, "2": 101}
    assert result.results[1] == 13  # by position too
    assert set(result.jobs) == {"0", "1", "2"}
    assert result.jobs["2"].return_value == 101


def test_a_chord_gets_the_groups_results_in_order(store: None) -> None:
    result = chord(group(w.wf_add.s(i, i) for i in range(6)), w.wf_total.s()).delay()
    assert get_queue().stats()["pending"] == 6
    drain()
    assert result.status == "succeeded"
    assert result.results["callback"] == sum(2 * i for i in range(6))
    assert [result.results[i] for i in range(6)] == [0, 2, 4, 6, 8, 10]


def test_a_group_in_a_chain_hands_on_a_list(immediate: None) -> None:
    result = chain(w.wf_add.s(1), group(w.wf_add.s(10), w.wf_add.s(20)), w.wf_total.s()).delay()
    assert result.status == "succeeded"
    assert result.results == {"0": 1, "1.0": 11, "1.1": 21, "2": 32}


def test_a_diamond_graph_hands_a_dict_by_name_to_a_node_of_several_parents(immediate: None) -> None:
    wf = Workflow()
    wf.add("fetch", w.wf_add.s(1, 1))
    wf.add("left", w.wf_add.s(10), after=["fetch"])
    wf.add("right", w.wf_add.s(20), after=["fetch"])
    wf.add("report", w.wf_join.s(), after=["left", "right"])
    result = wf.delay()
    assert result.status == "succeeded"
    assert result.results["report"] == {"left": 12, "right": 22}


def test_a_failed_step_cancels_what_follows_unless_always(store: None) -> None:
    wf = Workflow()
    wf.add("boom", w.wf_boom.si())
    wf.add("next", w.wf_add.s(1), after=["boom"])
    wf.add("cleanup", w.wf_add.si(7), after=["boom"], always=True)
    result = wf.delay()
    drain()
    assert result.status == "failed"
    by_name = {node.name: node for node in result.nodes}
    assert by_name["boom"].state is NodeState.FAILED
    assert by_name["next"].state is NodeState.CANCELLED and by_name["next"].job_id is None
    assert by_name["next"].error == "cancelled: parent 'boom' failed"
    assert result.results == {"cleanup": 7}
    assert get_queue().job(int(by_name["boom"].job_id or 0)).state is State.FAILED  # type: ignore[union-attr]


def test_retry_failed_runs_the_dead_letter_and_what_waited_on_it(store: None, tmp_path: Path) -> None:
    switch = tmp_path / "on"
    result = chain(w.wf_add.s(1, 1), w.wf_switch.s(str(switch)), w.wf_add.s(100)).delay()
    drain()
    assert result.status == "failed"
    assert [node.state.value for node in result.nodes] == ["succeeded", "failed", "cancelled"]
    switch.touch()
    assert result.retry_failed() == 2
    assert result.status == "running"
    drain()
    assert result.status == "succeeded"
    assert result.results == {"0": 2, "1": 2, "2": 102}


def test_cancel_cancels_what_waits(store: None) -> None:
    result = chain(w.wf_add.s(1), w.wf_add.s(2), w.wf_add.s(3)).delay()
    assert result.cancel() == 3
    assert result.status == "cancelled"
    assert get_queue().stats()["pending"] == 0
    assert drain() == 0


def test_wait_returns_once_ended_and_times_out_while_running(store: None) -> None:
    result = chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
    with pytest.raises(TimeoutError):
        result.wait(0.05)
    drain()
    assert result.wait(1).status == "succeeded"
    with pytest.raises(WorkflowNotFound):
        WorkflowResult(int(result.id) + 256 * 1000).status  # noqa: B018


def test_bad_input_is_refused_before_anything_is_stored(store: None, monkeypatch: pytest.MonkeyPatch) -> None:
    cycle = Workflow().add("a", w.wf_add.s(1), after=["b"]).add("b", w.wf_add.s(2), after=["a"])
    with pytest.raises(InvalidWorkflow, match="cycle"):
        cycle.delay()
    with pytest.raises(InvalidWorkflow, match="not a node of it"):
        Workflow().add("a", w.wf_add.s(1), after=["nobody"]).delay()
    with pytest.raises(InvalidWorkflow, match="two nodes are named 'a'"):
        Workflow().add("a", w.wf_add.s(1)).add("a", w.wf_add.s(2))
    with pytest.raises(TypeError, match="cannot be called with these arguments"):
        chain(w.wf_add.s(1), w.wf_add.s(1, 2, None, "x", "too many")).delay()
    with pytest.raises(TypeError, match="cannot be called with these arguments"):
        chain(w.wf_add.si()).delay()  # .si(): no result is passed in, so `a` is missing
    with pytest.raises(TypeError, match="a step is made with"):
        Workflow().add("a", w.wf_add)  # type: ignore[arg-type]
    monkeypatch.setattr("queue_max_django.workflows.MAX_NODES", 3)
    with pytest.raises(InvalidWorkflow, match="over the limit of 3"):
        group(*[w.wf_add.s(i) for i in range(4)]).delay()
    assert stored_total() == 0


def test_a_step_with_a_unique_key_or_a_concurrency_limit_is_refused(queue_max: Configure) -> None:
    """A workflow's jobs are placed together, as a unique key and a concurrency limit each place their job:
    such a step is refused, nothing stored, rather than run without its key or limit."""
    with queue_max():
        with pytest.raises(InvalidWorkflow, match=r"step '0': the task '.*wf_add' has a unique key"):
            chain(w.wf_add.using(unique_key="once").s(1), w.wf_add.s(2)).delay()
        assert stored_total() == 0
    limited = w.wf_add.using(queue="wf-limited")  # a queue of its own, limited below
    with queue_max(QUEUE_CONCURRENCY={"wf-limited": 2}):
        with pytest.raises(InvalidWorkflow, match="or a concurrency limit \\(its own or its queue's\\)"):
            group(limited.s(1), limited.s(2)).delay()
        assert stored_total() == 0


def test_a_step_alone_is_a_workflow_of_one(immediate: None) -> None:
    result = w.wf_add.s(2, 3).delay()
    assert result.status == "succeeded" and result.results[0] == 5


def test_workflow_finished_is_signalled_once_the_last_node_ends(store: None) -> None:
    from queue_max_django.signals import workflow_finished

    seen: list[tuple[str, str]] = []

    def receiver(sender: None, workflow_id: str, status: str, **kwargs: object) -> None:
        seen.append((workflow_id, status))

    workflow_finished.connect(receiver)
    try:
        ok = chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
        bad = chain(w.wf_boom.si(), w.wf_add.s(2)).delay()
        drain()
        waiting = chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
        waiting.cancel()
    finally:
        workflow_finished.disconnect(receiver)
    assert sorted(seen) == sorted([(ok.id, "succeeded"), (bad.id, "failed"), (waiting.id, "cancelled")])


def test_the_metrics_count_workflows_by_status(queue_max: Configure) -> None:
    pytest.importorskip("prometheus_client")
    from queue_max_django.observability.metrics import render
    from tests.django.test_metrics import samples, value

    with queue_max():
        chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
        chain(w.wf_boom.si(), w.wf_add.s(2)).delay()
        drain()
        chain(w.wf_add.s(1)).delay()
        found = samples(render(get_queue())[0].decode())
    assert value(found, "queue_max_workflows", status="succeeded") == 1
    assert value(found, "queue_max_workflows", status="failed") == 1
    assert value(found, "queue_max_workflows", status="running") == 1
    assert value(found, "queue_max_workflows", status="cancelled") == 0


def test_queue_workflow_shows_the_nodes_and_queue_show_names_the_workflow(store: None) -> None:
    import json
    from io import StringIO

    from django.core.management import CommandError, call_command

    wf = Workflow().add("fetch", w.wf_add.s(1, 1)).add("report", w.wf_add.s(5), after=["fetch"])
    result = wf.delay()
    out = StringIO()
    call_command("queue_workflow", result.id, stdout=out)
    text = out.getvalue()
    assert f"workflow {result.id}: running" in text
    assert "fetch   queued" in text and "report  waiting on parents" in text
    drain()
    out = StringIO()
    call_command("queue_workflow", result.id, "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["status"] == "succeeded" and data["workflow_id"] == result.id
    assert [(n["name"], n["state"], n["job_state"], n["parents"]) for n in data["nodes"]] == [
        ("fetch", "succeeded", "done", []),
        ("report", "succeeded", "done", ["fetch"]),
    ]
    report_job = data["nodes"][1]["job_id"]
    out = StringIO()
    call_command("queue_show", report_job, stdout=out)
    assert f"\nworkflow       {result.id}, node 1 (manage.py queue_workflow {result.id})\n" in out.getvalue()
    out = StringIO()
    call_command("queue_show", report_job, "--json", stdout=out)
    assert json.loads(out.getvalue())["workflow"] == {"workflow_id": result.id, "node": 1}
    with pytest.raises(CommandError, match="no workflow 12345 is stored"):
        call_command("queue_workflow", "12345")
