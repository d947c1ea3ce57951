"""Cancelling with a real ``queue_worker`` (issue 20, "Cancelling"): a waiting or scheduled job is removed
before it runs; a running job is marked, its worker sees the mark at its next heartbeat, and the job stops
cooperatively (the task asks ``running.cancels``) or, when the task ignores it, its process is ended after
``--cancel-grace``. Either way the job is a dead letter with ``Cancelled``, not retried. The store's side
(the mark, the heartbeat's report, requeue) is the contract suite's (tests/engine/test_contract_cancel.py).
"""

from __future__ import annotations

import signal

import pytest

from queue_max_django.engine import CancelOutcome, Job, State

from .conftest import Site, wait_for

CANCELLED = "queue_max_django.engine.cancels.Cancelled"
LEASE = "1.5"  # a heartbeat every 0.5 s: the worker sees a cancel within a second


def _job(site: Site, job_id: int) -> Job | None:
    with site.queue() as queue:
        return queue.job(job_id)


def _failed(site: Site, job_id: int) -> Job | None:
    job = _job(site, job_id)
    return job if job is not None and job.state is State.FAILED else None


def test_a_cooperative_task_stops_and_waiting_jobs_are_removed(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = LEASE
    running = site.put("cooperative", 1)
    worker = site.start("--processes", "1", "--threads", "1", "--no-scheduler", "--cancel-grace", "30")
    wait_for(lambda: site.marks("started"), what="the cooperative task to start")
    waiting = site.put("finish", 2)  # behind the running job: the one thread is busy
    scheduled = site.put("finish", 3, delay=3600)
    with site.queue() as queue:
        assert queue.request_cancel(waiting) is CancelOutcome.REMOVED
        assert queue.request_cancel(scheduled) is CancelOutcome.REMOVED
        assert queue.request_cancel(running) is CancelOutcome.REQUESTED
        assert queue.job(waiting) is None and queue.job(scheduled) is None

    job = wait_for(lambda: _failed(site, running), what="the cancelled job to be a dead letter")

    assert job.error_type == CANCELLED and job.result is None
    assert job.retries == 1 and job.max_retries == 3  # not retried, though it had retries left
    assert [value for value, _pid in site.marks("stopped")] == [str(running)]  # it saw its own id
    after = site.put("finish", 4)  # the process goes on: the same one runs the next job
    wait_for(lambda: site.marks("finished"), what="the next job")
    assert [value for value, _ in site.marks("finished")] == ["4"]  # 2 and 3 never ran
    assert site.marks("finished")[0][1] == site.marks("started")[0][1]
    with site.queue() as queue:
        assert queue.request_cancel(after) is CancelOutcome.FINISHED
        assert queue.job(after).state is State.DONE
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "replaced after a job timed out" not in worker.output()
    with site.queue() as queue:
        assert queue.requeue(running)
        assert queue.job(running).state is State.PENDING


@pytest.mark.store_neutral  # the process's ending after the grace; the store's part is the contract suite's
def test_a_task_that_ignores_the_cancel_is_ended_after_the_grace_period(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = LEASE
    job_id = site.put("stubborn", 1)
    worker = site.start("--processes", "1", "--no-scheduler", "--cancel-grace", "0.3")
    started = wait_for(lambda: site.marks("started"), what="the stubborn task to start")
    with site.queue() as queue:
        assert queue.request_cancel(job_id) is CancelOutcome.REQUESTED

    job = wait_for(lambda: _failed(site, job_id), what="the cancelled job to be a dead letter")

    assert job.error_type == CANCELLED and "did not stop within 0.3 s" in (job.error or "")
    assert job.retries == 1 and job.max_retries == 3  # not retried
    after = site.put("finish", 2)
    wait_for(lambda: site.marks("finished"), what="a job in the new process")
    assert site.marks("finished")[0][1] != started[0][1]  # the stubborn one's process was ended
    with site.queue() as queue:
        assert queue.job(after).state is State.DONE
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "did not stop within --cancel-grace" in worker.output()
    assert len(site.marks("started")) == 1  # never run again
