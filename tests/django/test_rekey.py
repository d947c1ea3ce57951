"""``manage.py queue_rekey`` (issue 36), on every store: every stored job of an encrypted task (waiting,
scheduled, done with its result, dead letters with their error and traceback, their metadata) is sealed
again under the newest key, what does not open is reported and left as it is, and a run SIGKILLed mid-way
(a real process) and run again leaves every job under the new key. So is what workflows keep on their nodes
(waiting payloads and metadata, results and errors): a workflow that ran at the rotation finishes without
the old key."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.encryption.jobs import open_text
from queue_max_django.engine import State
from queue_max_django.engine.rekey import _kids, node_kids
from queue_max_django.engine.sealing import is_sealed_text
from queue_max_django.engine.stores.contract.transfer import SealedFields
from queue_max_django.testing import run_queued
from tests.engine.locations import StoreLocation
from tests.testapp import encrypted_tasks as et

pytest.importorskip("cryptography")

Configure = Callable[..., override_settings]
KEY_0, KEY_1, KEY_2 = (base64.urlsafe_b64encode(bytes([n]) * 32).decode() for n in (7, 8, 9))
ROOT = Path(__file__).resolve().parents[2]
BOUND = 60.0  # seconds any one subprocess may take


@pytest.fixture(autouse=True)
def _encrypted_tasks() -> Iterator[None]:
    with et.registered():
        yield


def under(queue: Any = None) -> Counter[str]:
    """Jobs per set of key ids their sealed data is under (``"k1"``, ``"k1+k2"``, ``"clear"``)."""
    store = (queue or get_queue())._live()
    found: Counter[str] = Counter()
    for shard in range(store.shards):
        after = None
        while jobs := store.transfer.export(shard, after, 500):
            after = jobs[-1].job_id
            for moved in jobs:
                found["+".join(sorted(_kids(SealedFields.of(moved)))) or "clear"] += 1
    return found


def nodes_under(queue: Any = None) -> Counter[str]:
    """Workflow nodes holding user data, per set of key ids it is sealed under (as ``under``)."""
    store = (queue or get_queue())._live()
    found: Counter[str] = Counter()
    for shard in range(store.shards):
        after = None
        while nodes := store.workflows.export_nodes(shard, after, 500):
            after = nodes[-1][0]
            for _ref, data in nodes:
                found["+".join(sorted(node_kids(data))) or "clear"] += 1
    return found


def rekey_json() -> dict[str, Any]:
    out = StringIO()
    call_command("queue_rekey", "--json", "--batch", "2", stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_rekey_seals_every_kind_of_job_again_under_the_newest_key(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        done = et.charge.using(metadata={"note": "n"}).delay("card-done")
        failed = et.leak.delay("card-failed")
        run_queued()
        waiting = et.charge.using(metadata={"note": "w"}).delay("card-waiting")
        later = et.charge.schedule_in(600, "card-later")
        clear = et.clear.delay("card-clear")
        assert under() == {"k1": 4, "clear": 1}
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        report = rekey_json()
        assert (report["key_id"], report["resealed"], report["clear"], report["left_under_old_keys"]) == (
            "k2",
            4,
            1,
            {},
        )
        assert under() == {"k2": 4, "clear": 1}
        assert rekey_json()["current"] == 4  # a second run finds nothing to do
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2}):  # the old key removed: everything still opens
        for handle in (done, failed, waiting, later, clear):
            handle.refresh()
        assert done.return_value == {"receipt": "card-done-receipt", "amount": 1}
        assert done.metadata == {"note": "n", "charged": "card-done-done"}
        assert "card card-failed was declined" in failed.errors[-1].traceback
        assert waiting.metadata == {"note": "w"}
        outcomes = {o.job_id: o.state for o in run_queued()}
        assert outcomes == {waiting.job_id: State.DONE, clear.job_id: State.DONE}


def test_workflows_that_ran_at_the_rotation_finish_under_the_new_key_alone(queue_max: Configure) -> None:
    """A chain and a chord whose first steps ran under k1 (their nodes' results sealed under it, their next
    steps' payloads waiting on their nodes) and a chain whose first step failed (its node's error): after
    queue_rekey and without k1, the rest runs and hands on the right results."""
    from queue_max_django import chain, chord, group
    from tests.testapp import workflow_tasks as w

    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k1": KEY_1}):
        first = {"queue": "first"}  # the steps run before the rotation
        failed = chain(w.wf_boom.using(**first).s(), w.wf_add.s(1)).delay()
        noted = w.wf_add.using(metadata={"note": "n"})
        steps = chain(w.wf_add.using(**first).s(1, 2), w.wf_add.s(10), noted.s(100)).delay()
        joined = chord(group(w.wf_add.using(**first).s(1, 1), w.wf_add.s(2, 2)), w.wf_total.s()).delay()
        assert len(run_queued(queues=["first"])) == 3
        assert [n.state.value for n in steps.nodes] == ["succeeded", "queued", "waiting"]
        assert [n.state.value for n in joined.nodes] == ["succeeded", "queued", "waiting"]
        assert failed.status == "failed"
        # on nodes: 3 results or errors, 2 waiting payloads, 1 payload kept by a node cancelled before its job
        assert nodes_under() == {"k1": 6}
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        report = rekey_json()
        assert (report["nodes_resealed"], report["nodes_left_under_old_keys"]) == (6, {})
        assert (report["left_under_old_keys"], report["nodes_changed"], report["nodes_broken"]) == ({}, 0, [])
        assert nodes_under() == {"k2": 6} and set(under()) == {"k2"}
        assert (rekey_json()["nodes_current"], rekey_json()["nodes_resealed"]) == (6, 0)  # a rerun: nothing
        out = StringIO()
        call_command("queue_rekey", stdout=out)
        assert "Re-encrypted 0 workflow node(s); 6 already were." in out.getvalue()
        assert "Nothing is left under old keys" in out.getvalue()
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2}):  # k1 removed
        assert {o.state for o in run_queued()} == {State.DONE}
        assert steps.status == "succeeded" and steps.results == {"0": 3, "1": 13, "2": 113}
        assert joined.status == "succeeded"
        assert joined.results["callback"] == 6 and [joined.results[i] for i in range(2)] == [2, 4]
        assert steps.jobs["2"].metadata == {"note": "n"}
        assert failed.status == "failed"
        error = failed.nodes[0].error
        assert is_sealed_text(error) and open_text(error, "error") == "boom"  # the node's own copy opens


def test_what_does_not_open_is_reported_and_left(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k0": KEY_0}):
        lost = et.charge.delay("card")
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        kept = et.charge.delay("card")
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        report = rekey_json()
        assert report["broken"] == [lost.job_id] and report["left_under_old_keys"] == {"k0": 1}
        assert report["resealed"] == 1
        assert under() == {"k0": 1, "k2": 1}
        out = StringIO()
        call_command("queue_rekey", stdout=out)
        assert "Left under old keys (jobs): 'k0': 1." in out.getvalue()
        assert f"hold data that does not open (tampered, or its key is not given): {lost.job_id}" in (
            out.getvalue()
        )
        assert kept.job_id is not None


def test_nodes_whose_data_does_not_open_are_reported_and_left(queue_max: Configure) -> None:
    from queue_max_django import chain
    from tests.testapp import workflow_tasks as w

    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k0": KEY_0}):
        lost = chain(w.wf_add.s(1, 2), w.wf_add.s(10), w.wf_add.s(100)).delay()
        assert len(run_queued(max_jobs=1)) == 1  # step 0's result and step 2's payload on nodes, under k0
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        report = rekey_json()
        workflow_id = int(lost.id)
        assert report["nodes_broken"] == [[workflow_id, 0], [workflow_id, 2]]
        assert (report["nodes_left_under_old_keys"], report["nodes_resealed"]) == ({"k0": 2}, 0)
        assert report["broken"] == [int(lost.nodes[at].job_id or 0) for at in (0, 1)]  # their jobs too
        out = StringIO()
        call_command("queue_rekey", stdout=out)
        assert "Left under old keys (workflow nodes): 'k0': 2." in out.getvalue()
        assert (
            f"2 workflow node(s) (workflow:index) hold data that does not open: {workflow_id}:0, "
            f"{workflow_id}:2. Put the key back"
        ) in out.getvalue()
        assert nodes_under() == {"k0": 2}


def test_no_key_is_a_command_error(queue_max: Configure) -> None:
    from django.core.management.base import CommandError

    with queue_max(), pytest.raises(CommandError, match="gives no key"):
        call_command("queue_rekey")


def _subprocess_settings(location: StoreLocation, keys: dict[str, str]) -> dict[str, Any]:
    where = (
        {"STORE": "postgresql", "URL": location.where}
        if location.kind == "postgres"
        else {"DATA_DIR": location.where}
    )
    return {**where, "ENCRYPTION_KEYS": keys}


def test_killed_mid_way_and_run_again_every_job_is_under_the_new_key(
    queue_max: Configure, location: StoreLocation
) -> None:
    jobs = 1500
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        et.charge.map([f"card-{i}" for i in range(jobs)])
        assert under() == {"k1": jobs}
    given = json.dumps(_subprocess_settings(location, {"k2": KEY_2, "k1": KEY_1}))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.rekey_settings", "PYTHONPATH": str(ROOT),
           "QUEUE_MAX_TEST_REKEY": given}  # fmt: skip
    argv = [sys.executable, "-m", "django", "queue_rekey", "--batch", "5"]
    proc = subprocess.Popen([*argv, "-v", "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # a batch was written: kill it there
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=BOUND)
    assert first.startswith("batch "), (first, proc.stderr)
    assert proc.returncode == -signal.SIGKILL
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        mid = under()
        assert set(mid) == {"k1", "k2"} and sum(mid.values()) == jobs  # part done, every job whole
    done = subprocess.run([*argv, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["left_under_old_keys"] == {} and report["resealed"] == mid["k1"]
    assert report["current"] == mid["k2"]
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2}):
        assert under() == {"k2": jobs}
        assert len(run_queued()) == jobs  # every one opens under the new key alone


@pytest.mark.slow
def test_killed_in_the_nodes_pass_and_run_again_every_node_is_under_the_new_key(
    queue_max: Configure, location: StoreLocation
) -> None:
    from queue_max_django import chain, group
    from tests.testapp import workflow_tasks as w

    pairs = 250
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k1": KEY_1}):
        result = group(chain(w.wf_add.s(i, 1), w.wf_add.s(10)) for i in range(pairs)).delay()
        assert nodes_under() == {"k1": pairs}  # each chain's second step waits with its payload
    given = json.dumps(_subprocess_settings(location, {"k2": KEY_2, "k1": KEY_1}))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.rekey_settings", "PYTHONPATH": str(ROOT),
           "QUEUE_MAX_TEST_REKEY": given}  # fmt: skip
    argv = [sys.executable, "-m", "django", "queue_rekey", "--batch", "5"]
    proc = subprocess.Popen([*argv, "-v", "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # a batch of nodes was written (the nodes go first): kill it there
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=BOUND)
    assert first.startswith("batch "), (first, proc.stderr)
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        mid = nodes_under()
        assert set(mid) == {"k1", "k2"} and sum(mid.values()) == pairs  # part done, every node whole
        assert under() == {"k1": pairs}  # the jobs' pass had not begun
    done = subprocess.run([*argv, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["nodes_resealed"], report["nodes_current"]) == (mid["k1"], mid["k2"])
    assert report["nodes_left_under_old_keys"] == {} and report["left_under_old_keys"] == {}
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2}):
        assert nodes_under() == {"k2": pairs} and under() == {"k2": pairs}
        assert {o.state for o in run_queued()} == {State.DONE}
        assert result.status == "succeeded"
        assert [result.results[f"{i}.1"] for i in range(pairs)] == [i + 11 for i in range(pairs)]
