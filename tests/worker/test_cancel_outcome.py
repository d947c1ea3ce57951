"""A cancel is its own outcome, not a failure (issue 29, "Operating it"), with real ``queue_worker``
subprocesses (``--threads 2``) on both stores: the worker logs it at INFO with who cancelled it and when, and
no traceback; the job is stored as a dead letter with ``Cancelled`` and the note of who asked; the closing
line and ``queue_stats --json`` count it as cancelled, not as a failure.

And the timeouts of a process with two threads: a timed-out job's process is replaced without an unrelated
``QueueClosed`` from its sibling thread, and a timeout that is retried is a WARNING, as every other retried
failure is (only the one that makes a dead letter is an ERROR)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

from queue_max_django.engine import Job, State

from .conftest import ROOT, Site, wait_for

LEASE = "1.5"  # a heartbeat every 0.5 s: the worker sees a cancel within a second
TIME = r"\d\d:\d\d:\d\d"


def _job(site: Site, job_id: int) -> Job | None:
    with site.queue() as queue:
        return queue.job(job_id)


def _failed(site: Site, job_id: int) -> Job | None:
    job = _job(site, job_id)
    return job if job is not None and job.state is State.FAILED else None


def _stats(site: Site) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "django", "queue_stats", "--json"],
        cwd=ROOT, env=site.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def _levels(output: str, pattern: str) -> list[str]:
    """The level of each log line of ``output`` that matches ``pattern``."""
    return [line.split()[2] for line in output.splitlines() if re.search(pattern, line)]


def test_a_cancel_of_a_running_job_is_logged_at_info_stored_with_who_and_counted_apart(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = LEASE
    polite = site.put("cooperative", 1)
    stubborn = site.put("stubborn", 2)
    worker = site.start("--processes", "1", "--threads", "2", "--no-scheduler", "--cancel-grace", "0.5")
    wait_for(lambda: len(site.marks("started")) == 2, what="both tasks to start")
    with site.queue() as queue:
        assert queue.request_cancel(polite, by="alice").value == "requested"
        assert queue.request_cancel(stubborn, by="queue_cancel command: stuck").value == "requested"
    asked = time.time()

    polite_job = wait_for(lambda: _failed(site, polite), what="the cooperative job to end")
    stubborn_job = wait_for(lambda: _failed(site, stubborn), what="the stubborn job to be ended")

    for job, by in ((polite_job, "alice"), (stubborn_job, "queue_cancel command: stuck")):
        assert job.cancelled and job.retries == 1  # not retried
        note = job.cancel_note
        assert note is not None and note.by == by and abs(note.at - asked) < 5
        assert job.traceback is None
    assert "was cancelled by alice at" in (polite_job.error or "")
    assert "did not stop within 0.5 s" in (stubborn_job.error or "")
    stats = _stats(site)
    assert (stats["failed"], stats["cancelled"]) == (2, 2)  # cancels are kept with the dead letters
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    output = worker.output()
    said = rf"job {polite} .*was cancelled by alice at {TIME}: it stopped when asked"
    assert _levels(output, said) == ["INFO"]
    assert _levels(output, rf"job {stubborn} .*was cancelled by queue_cancel command: stuck at {TIME}") == [
        "INFO"
    ]
    assert _levels(output, rf"job {polite} .*cancel requested by alice at {TIME}") == ["INFO"]
    assert " ERROR " not in output and "Traceback" not in output, output
    assert "(0 done, 0 failed and retried, 0 dead letters, 2 cancelled)" in output


def test_a_timeout_with_two_threads_logs_no_queue_closed_and_a_retried_one_is_a_warning(site: Site) -> None:
    job_id = site.put("hang", 1, max_retries=1, timeout=0.5)
    worker = site.start("--processes", "1", "--threads", "2", "--no-scheduler")
    job = wait_for(lambda: _failed(site, job_id), what="the job to time out twice")
    assert job.attempts == 2 and not job.cancelled
    wait_for(lambda: "replaced after a job timed out" in worker.output().split(" now failed.")[-1],
             what="the second process to be replaced")  # fmt: skip
    time.sleep(0.5)  # a sibling thread's late line would be written by now
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    output = worker.output()
    assert _levels(output, rf"job {job_id} .*ran over its timeout") == ["WARNING", "ERROR"], output
    assert "QueueClosed" not in output and "Traceback" not in output, output
    assert output.count(" ERROR ") == 1, output  # the dead letter's line only
