"""Workflows run by real ``queue_worker`` processes: every step after its parents, failures that cancel what
follows, a cancel while a step runs, and a retry of what failed (the tasks are
tests/testapp/workflow_tasks.py; each logs when it starts and ends, to one file all processes append to)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from queue_max_django import Workflow, WorkflowResult, chain, chord, group
from queue_max_django.conf import get_queue, reset
from queue_max_django.engine import State
from queue_max_django.engine.workflows import NodeState
from tests.testapp import workflow_tasks as w

from .conftest import Site, wait_for

WORKERS = ("--burst", "--processes", "2", "--threads", "2", "--no-scheduler")


@pytest.fixture
def here(site: Site) -> Iterator[Site]:
    """The test's own process configured on the site's store (it puts the workflows, the workers run them)."""
    with override_settings(QUEUE_MAX=site.settings()):
        yield site
    reset()


def lines(log: Path) -> list[tuple[str, str]]:
    """(start|end, label) of each whole line of the log, in order."""
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines() if " " in line]  # type: ignore[misc]


def check_order(log: Path, result: WorkflowResult) -> None:
    """Every node that became a job started after each of its parents ended (its first start after a end of
    each parent), and every node that never became a job never started."""
    seen = lines(log)
    first_start = {}
    first_end = {}
    for at, (what, label) in enumerate(seen):
        (first_start if what == "start" else first_end).setdefault(label, at)
    nodes = result.nodes
    for node in nodes:
        if node.job_id is None:
            assert node.name not in first_start, f"{node.name} never became a job but ran"
            continue
        if node.name not in first_start:  # a step that logs nothing (its label is its node's name)
            continue
        for parent in node.parents:
            name = nodes[parent].name
            if nodes[parent].state is NodeState.SUCCEEDED and name in first_end:  # (one that logs)
                assert first_end[name] < first_start[node.name], f"{node.name} started before {name} ended"


def test_steps_run_after_their_parents_in_worker_processes(here: Site, tmp_path: Path) -> None:
    log = str(tmp_path / "steps.log")
    flow = chain(
        w.wf_add.s(1, log=log, label="0"),
        group(*[w.wf_add.s(i, log=log, label=f"1.{i}") for i in range(6)]),
        w.wf_total.s(log=log, label="2"),
        w.wf_add.s(1000, log=log, label="3"),
    ).delay()
    fan = chord(group(w.wf_add.s(i, i, log=log, label=f"c{i}") for i in range(10)), w.wf_total.s()).delay()
    wf = Workflow()
    wf.add("a", w.wf_add.s(1, log=log, label="a"))
    wf.add("b", w.wf_add.s(10, log=log, label="b"), after=["a"])
    wf.add("c", w.wf_sleep.si(0.05, log=log, label="c"), after=["a"])
    wf.add("d", w.wf_join.s(), after=["b", "c"])
    diamond = wf.delay()

    done = here.run(*WORKERS)

    assert done.returncode == 0, done.stderr
    assert flow.status == fan.status == diamond.status == "succeeded"
    assert flow.results[3] == sum(1 + i for i in range(6)) + 1000
    assert fan.results["callback"] == sum(2 * i for i in range(10))
    assert diamond.results["d"] == {"b": 11, "c": 0.05}
    check_order(Path(log), flow)
    check_order(Path(log), diamond)
    with here.queue() as queue:
        assert queue.verify() == []
        assert queue.stats()["done"] == 9 + 11 + 4


def test_a_failed_step_cancels_its_descendants_but_not_an_always_step(here: Site, tmp_path: Path) -> None:
    log = str(tmp_path / "steps.log")
    wf = Workflow()
    wf.add("start", w.wf_add.s(1, log=log, label="start"))
    wf.add("boom", w.wf_boom.s(log=log, label="boom"), after=["start"])
    wf.add("after", w.wf_add.s(1, log=log, label="after"), after=["boom"])
    wf.add("later", w.wf_add.s(1, log=log, label="later"), after=["after"])
    wf.add("cleanup", w.wf_add.si(5, log=log, label="cleanup"), after=["boom"], always=True)
    result = wf.delay()

    assert here.run(*WORKERS).returncode == 0

    assert result.status == "failed"
    states = {node.name: node.state for node in result.nodes}
    assert states == {"start": NodeState.SUCCEEDED, "boom": NodeState.FAILED, "after": NodeState.CANCELLED,
                      "later": NodeState.CANCELLED, "cleanup": NodeState.SUCCEEDED}  # fmt: skip
    started = {label for what, label in lines(Path(log)) if what == "start"}
    assert started == {"start", "boom", "cleanup"}
    check_order(Path(log), result)


def test_cancel_while_a_step_runs_cancels_the_rest(here: Site, tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    result = chain(
        w.wf_sleep.si(1.5, log=str(log), label="slow"), w.wf_add.si(1, log=str(log), label="next")
    ).delay()
    worker = here.start("--processes", "1", "--threads", "1", "--no-scheduler")
    wait_for(lambda: ("start", "slow") in lines(log), what="the slow step to start")
    assert result.cancel(by="test") == 2  # the next step cancelled, the running one asked to stop
    slow = result.nodes[0].job_id
    assert slow is not None and get_queue().job(slow).cancel_note is not None  # type: ignore[union-attr]
    wait_for(lambda: result.status != "running", what="the workflow to end")
    worker.signal()
    worker.wait()
    assert result.status == "cancelled"
    assert ("start", "next") not in lines(log)
    assert result.nodes[1].state is NodeState.CANCELLED


def test_retry_failed_reruns_the_dead_letter_and_what_waited(here: Site, tmp_path: Path) -> None:
    switch = tmp_path / "switch"
    result = chain(w.wf_add.s(1, 1), w.wf_switch.s(str(switch)), w.wf_add.s(100)).delay()
    assert here.run(*WORKERS).returncode == 0
    assert result.status == "failed"
    failed = result.nodes[1].job_id
    assert failed is not None and get_queue().job(failed).state is State.FAILED  # type: ignore[union-attr]

    switch.touch()
    assert result.retry_failed() == 2
    assert here.run(*WORKERS).returncode == 0

    assert result.status == "succeeded"
    assert result.results == {"0": 2, "1": 2, "2": 102}


def test_requeueing_one_failed_step_brings_back_the_steps_it_cancelled(here: Site, tmp_path: Path) -> None:
    """The admin's Retry of one dead letter (``Queue.requeue``), not the workflow's retry: the failed step's
    descendants, cancelled because of it, wait on it again and run after it, in worker processes."""
    switch, log = tmp_path / "switch", tmp_path / "log"
    wf = Workflow()
    wf.add("first", w.wf_add.s(1, 1, log=str(log), label="first"))
    wf.add("flaky", w.wf_switch.s(str(switch)), after=["first"])
    wf.add("next", w.wf_add.s(10, log=str(log), label="next"), after=["flaky"])
    wf.add("last", w.wf_total.si([1, 2], log=str(log), label="last"), after=["next", "first"])
    result = wf.delay()
    assert here.run(*WORKERS).returncode == 0
    assert [node.state for node in result.nodes] == [NodeState.SUCCEEDED, NodeState.FAILED,
                                                     NodeState.CANCELLED, NodeState.CANCELLED]  # fmt: skip
    flaky = result.nodes[1].job_id
    assert flaky is not None

    switch.touch()
    assert get_queue().requeue(flaky)
    assert [node.state for node in result.nodes][1:] == [
        NodeState.QUEUED,
        NodeState.WAITING,
        NodeState.WAITING,
    ]
    assert here.run(*WORKERS).returncode == 0

    assert result.status == "succeeded"
    assert result.results == {"first": 2, "flaky": 2, "next": 12, "last": 3}  # next had flaky's result
    check_order(log, result)
