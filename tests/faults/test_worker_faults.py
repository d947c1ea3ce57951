"""Bad jobs in front of a real ``queue_worker``: jobs naming tasks this process does not have, and jobs whose
bytes on disk are broken. The worker dead-letters each with a clear error, keeps serving the others, and
exits 0 in burst mode; ``queue_check`` names the broken jobs before and finds the store clean after.

``queue_check`` after the quarantine: a quarantined job is a well-formed dead letter (error type
"Corrupted"), so the store is consistent again and ``queue_check`` reports it clean; the dead letters
(``queue_list --status failed``, the admin) are where the damage stays visible.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from queue_max_django.engine import State
from tests.faults.corrupt import garbage_payload, garbage_record, truncated_record
from tests.worker.conftest import BOUND, ROOT, TASKS, Site


def queue_check(site: Site) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "django", "queue_check", "--json"],
        cwd=ROOT, env=site.env, capture_output=True, text=True, timeout=BOUND,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def burst(site: Site) -> subprocess.CompletedProcess[str]:
    done = site.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler")
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_jobs_naming_unknown_tasks_are_dead_letters_and_the_worker_serves_the_rest(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE"] = "0"  # no waiting for an updated worker: at once
    unknown = {
        "misspelt": TASKS + "finsh",
        "module-only": TASKS.rstrip("."),
        "no-such-module": "no.such.module.task",
        "builtin": "builtins.print",
    }
    with site.queue() as queue:
        dead = {
            label: queue.put({"args": [1], "kwargs": {}}, name=name, priority=5)
            for label, name in unknown.items()
        }
        dead["no-name"] = queue.put({"args": [1], "kwargs": {}}, priority=5)
        good = [queue.put({"args": [n], "kwargs": {}}, name=TASKS + "finish") for n in range(20)]

    done = burst(site)

    assert sorted(int(value) for value, _pid in site.marks("finished")) == list(range(20))
    with site.queue() as queue:
        assert queue.verify() == []
        for label, job_id in dead.items():
            job = queue.job(job_id)
            assert job is not None and job.state is State.FAILED, label
            name = unknown.get(label)
            assert job.error == (
                f"no task named {name!r} is registered in this process: is the module that defines it "
                f"imported (an installed app's tasks.py), and is the task name unchanged since the job was "
                f"enqueued? If the code that enqueued it is newer than this worker's, restart or update your "
                f"workers."
            ), label
            assert job.error_type == "queue_max_django.running.runner.TaskNotRegistered", label
            assert job.attempts == 1, f"{label}: an unknown task is not retried"
        assert all(queue.job(job_id).state is State.DONE for job_id in good)
        stats = queue.stats()
        assert (stats["done"], stats["failed"], stats["pending"], stats["running"]) == (20, 5, 0, 0)
    assert "Traceback" not in done.stderr


@pytest.mark.lmdb  # breaks LMDB records and payloads byte by byte (LmdbProbe)
def test_corrupted_jobs_are_quarantined_by_a_real_worker_that_keeps_serving(site: Site) -> None:
    with site.queue() as queue:
        broken = {
            "garbage-record": queue.put({"args": [100], "kwargs": {}}, name=TASKS + "finish", priority=9),
            "truncated-record": queue.put({"args": [101], "kwargs": {}}, name=TASKS + "finish", priority=9),
            "garbage-payload": queue.put({"args": [102], "kwargs": {}}, name=TASKS + "finish", priority=9),
            "garbage-large-payload": queue.put(
                {"args": [103, "x" * 5000], "kwargs": {}}, name=TASKS + "finish", priority=9
            ),
        }
        good = [queue.put({"args": [n], "kwargs": {}}, name=TASKS + "finish") for n in range(30)]
        garbage_record(queue, broken["garbage-record"])
        truncated_record(queue, broken["truncated-record"])
        garbage_payload(queue, broken["garbage-payload"])
        garbage_payload(queue, broken["garbage-large-payload"])

    status, report = queue_check(site)
    assert status == 1 and report["ok"] is False
    for label, job_id in broken.items():
        assert any(str(job_id) in problem for problem in report["problems"]), (label, report["problems"])

    done = burst(site)

    assert sorted(int(value) for value, _pid in site.marks("finished")) == list(range(30))
    with site.queue() as queue:
        for label, job_id in broken.items():
            job = queue.job(job_id)
            assert job is not None and job.state is State.FAILED, label
            assert job.error_type == "Corrupted" and (job.error or "").startswith("corrupted:"), label
            assert f"job {job_id} could not be delivered" in done.stderr, label
        assert all(queue.job(job_id).state is State.DONE for job_id in good)
        stats = queue.stats()
        assert (stats["done"], stats["failed"], stats["pending"], stats["running"]) == (30, 4, 0, 0)
        assert queue.verify() == []
    status, report = queue_check(site)
    assert status == 0 and report["ok"] is True and report["jobs"] == 34
