"""A rolling deploy that updates the web side first, with real ``queue_worker`` runs: a job of a task the
running worker lacks is given back to wait (not counted as an attempt) and the log says to restart or update
the workers; the updated worker then runs it. (The grace period's end, on a fake clock:
tests/django/test_runner.py; with a grace of 0: tests/faults/test_worker_faults.py.)"""

from __future__ import annotations

import pytest

from queue_max_django.engine import State

from .conftest import BOUND, TASKS, Site

pytestmark = pytest.mark.store_neutral  # the engine's release(delay=) is a contract test on both stores


def test_a_job_of_a_task_the_old_worker_lacks_waits_for_the_updated_worker(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE"] = "60"
    job_id = site.put("added_later", 7)  # enqueued by the web side, which runs the new code already

    old = site.run("--burst", "--processes", "1", "--no-scheduler", "--worker-id", "old")

    assert old.returncode == 0, old.stderr
    assert f"job {job_id}: no task named '{TASKS}added_later' is registered in this worker: restart or " in (
        old.stderr
    )
    assert "update your workers" in old.stderr and "Traceback" not in old.stderr
    closing = "queue_worker old: stopped after 0 jobs (0 done, 0 failed and retried, 0 dead letters); "
    assert closing + "1 given back to wait for their task" in old.stderr
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.retries, job.attempts) == (State.SCHEDULED, 0, 0)
        assert job.eta is not None and job.error is None
    assert site.marks("added_later") == []

    site.env["QUEUE_MAX_TEST_NEW_CODE"] = "1"  # the workers are updated
    # it waits as long as it had waited when the old worker gave it back (about the old worker's start-up):
    # a burst worker that waits for jobs due within a minute runs it
    new = site.run(
        "--burst", "--burst-wait", "60", "--processes", "1", "--no-scheduler", "--worker-id", "new",
        timeout=2 * BOUND,
    )  # fmt: skip

    assert new.returncode == 0, new.stderr
    assert [value for value, _pid in site.marks("added_later")] == ["7"]
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.result, job.retries, job.attempts) == (State.DONE, 7, 0, 1)
        assert queue.verify() == []
    assert f"{TASKS}added_later" in new.stderr.split("registered tasks", 1)[1].splitlines()[0]
    assert (
        "queue_worker new: stopped after 1 job (1 done, 0 failed and retried, 0 dead letters)" in new.stderr
    )
