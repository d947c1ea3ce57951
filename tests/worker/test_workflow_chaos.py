"""Workflows under SIGKILL: a mixed run of chains, groups, chords and graphs with failures, worked by real
``queue_worker`` commands that the test kills (the whole process group: supervisor and workers) and starts
again while they run, with short leases so that recovery takes back what the killed ones held.

Then, from the log every step appends to (``start label`` / ``end label``) and the workflows as stored: every
node that should run ran at least once, every child started after each of its parents had ended once, none of
a failed parent's children ran (unless ``always``), and each workflow ended as its shape says.

2,000 nodes by default (about a minute here); ``QUEUE_MAX_TEST_WORKFLOW_CHAOS_NODES=10000`` for the issue's
full size.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from queue_max_django import Workflow, WorkflowResult, chain, chord, group
from queue_max_django.conf import reset
from queue_max_django.engine.workflows import NodeState

from .conftest import Site, Worker
from .test_workflows import lines

pytestmark = pytest.mark.slow

NODES = int(os.environ.get("QUEUE_MAX_TEST_WORKFLOW_CHAOS_NODES", "2000"))
KILLS = 4
UNIT = 32  # nodes of one unit: a chain of 5, a group of 10, a chord of 10 + 1, a graph of 6 with a failure
TIME_LIMIT = 240.0 if NODES > 2000 else 90.0


@pytest.fixture
def here(site: Site) -> Iterator[Site]:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "2"
    with override_settings(QUEUE_MAX=site.settings()):
        yield site
    reset()


def unit(index: int, log: str) -> list[tuple[str, WorkflowResult]]:
    """One unit of the mix. -> (label prefix, workflow) of each of its four workflows."""
    from tests.testapp import workflow_tasks as w

    def add(prefix: str, name: str, *args: int) -> object:
        return w.wf_add.s(*args, log=log, label=f"{prefix}{name}")

    made: list[tuple[str, WorkflowResult]] = []
    prefix = f"u{index}c/"
    made.append(
        (prefix, chain(add(prefix, "0", 1, 1), *[add(prefix, str(i), i) for i in range(1, 5)]).delay())
    )
    prefix = f"u{index}g/"
    made.append((prefix, group(*[add(prefix, str(i), i, i) for i in range(10)]).delay()))
    prefix = f"u{index}h/"
    header = group(*[add(prefix, str(i), i, 1) for i in range(10)])
    made.append((prefix, chord(header, w.wf_total.s(log=log, label=f"{prefix}callback")).delay()))
    prefix = f"u{index}f/"
    wf = Workflow()
    wf.add("a", add(prefix, "a", 1))  # type: ignore[arg-type]
    wf.add("ok", add(prefix, "ok", 2), after=["a"])  # type: ignore[arg-type]
    wf.add("boom", w.wf_boom.s(log=log, label=f"{prefix}boom"), after=["a"])
    wf.add("x", add(prefix, "x", 3), after=["boom", "ok"])  # type: ignore[arg-type]
    wf.add("y", add(prefix, "y", 4), after=["x"])  # type: ignore[arg-type]
    wf.add("cleanup", w.wf_add.si(9, log=log, label=f"{prefix}cleanup"), after=["boom"], always=True)
    made.append((prefix, wf.delay()))
    return made


def start(site: Site) -> Worker:
    return site.start("--processes", "2", "--threads", "2", "--no-scheduler")


def test_killed_workers_release_every_node_once_in_order_and_no_child_of_a_failure(
    here: Site, tmp_path: Path
) -> None:
    log = tmp_path / "steps.log"
    made = [item for index in range(max(1, NODES // UNIT)) for item in unit(index, str(log))]
    rng = random.Random(32)
    workers = [start(here), start(here)]
    deadline = time.monotonic() + TIME_LIMIT
    kills = 0
    ends_at_kill: list[int] = []  # steps ended when each kill came: the kills fell mid-run
    first_at = max(1, NODES // 10)  # the first kill: once about a tenth of the steps ended
    while True:
        if kills == 0:  # polled, not slept: started from cached bytecode, workers can end the run in a second
            while sum(what == "end" for what, _ in lines(log)) < first_at and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            time.sleep(rng.uniform(0.5, 1.5))
        if kills < KILLS:  # SIGKILL a whole worker command (its supervisor and processes) mid-run
            ends_at_kill.append(sum(what == "end" for what, _ in lines(log)))
            victim = workers.pop(rng.randrange(len(workers)))
            os.killpg(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(10)
            workers.append(start(here))
            kills += 1
            continue
        if all(result.status != "running" for _, result in made):
            break
        assert time.monotonic() < deadline, f"workflows still running after {TIME_LIMIT}s"
    for worker in workers:
        worker.signal()
        worker.wait()

    seen = lines(log)
    first_start: dict[str, int] = {}
    first_end: dict[str, int] = {}
    for at, (what, label) in enumerate(seen):
        (first_start if what == "start" else first_end).setdefault(label, at)
    nodes_checked = 0
    for prefix, result in made:
        nodes = result.nodes
        nodes_checked += len(nodes)
        failing = prefix.endswith("f/")
        assert result.status == ("failed" if failing else "succeeded"), prefix
        for node in nodes:
            label = prefix + node.name
            if failing and node.name in ("x", "y"):  # after a failed parent: never a job, never ran
                assert node.state is NodeState.CANCELLED and node.job_id is None, label
                assert label not in first_start, f"{label} ran after its parent failed"
                continue
            if node.name == "boom":  # max_retries=0: it failed once it ran, or it never ran: a worker
                # that claimed it was killed before the task began, and the lease's expiry charged the one
                # attempt it has (a job claimed alone is charged; one of a batch goes back uncharged)
                assert node.state is NodeState.FAILED, label
                expired = (node.error or "").startswith("lease expired")
                assert label in first_start or expired, (label, node.error)
                continue
            assert node.state is NodeState.SUCCEEDED, (label, node.state, node.error)
            assert label in first_end, f"{label} never ran"
            for parent in node.parents:
                parent_label = prefix + nodes[parent].name
                if parent_label in first_end:
                    assert first_end[parent_label] < first_start[label], f"{label} before {parent_label}"
                elif parent_label in first_start:  # boom, an always step's parent: it ran (and failed) before
                    assert first_start[parent_label] < first_start[label], f"{label} before {parent_label}"
                else:  # boom that never ran (its lease expired): it ended before its always child began
                    boom = nodes[parent]
                    assert boom.name == "boom" and boom.state is NodeState.FAILED, parent_label
    assert nodes_checked >= min(NODES, UNIT) and kills == KILLS
    assert ends_at_kill[0] < len(first_end), "the first kill came after every step had run"
    with here.queue() as queue:
        assert queue.verify() == []
        stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)
