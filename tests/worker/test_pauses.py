"""Pausing with real ``queue_worker`` processes (issue 31, "Pausing"): a pause made while no worker runs is
honoured by a worker started after it; a running worker sees a pause at its next claim and a resume at
once; a pause with a duration ends by itself, with no process lifting it. The store's side is the contract
suite's (tests/store_contract/test_pauses.py), the Queue's tests/engine/test_pauses.py's."""

from __future__ import annotations

import signal
import time

from queue_max_django.engine import State

from .conftest import Site, wait_for

SETTLE = 1.5  # seconds a paused job is watched not to run, after the worker ran a job enqueued after it


def _state(site: Site, job_id: int) -> State | None:
    with site.queue() as queue:
        job = queue.job(job_id)
        return None if job is None else job.state


def _finished(site: Site) -> list[str]:
    return [value for value, _pid in site.marks("finished")]


def test_a_worker_started_after_a_pause_honours_it(site: Site) -> None:
    with site.queue() as queue:
        queue.pause("mail", reason="provider outage", by="test")  # no worker runs yet
    held = site.put("finish", 1, queue="mail")
    site.put("finish", 2)
    worker = site.start("--processes", "1", "--threads", "2", "--no-scheduler")
    wait_for(lambda: "2" in _finished(site), what="the default queue's job")
    site.put("finish", 3)  # a job enqueued after the paused one, in another queue: it runs, the paused waits
    wait_for(lambda: "3" in _finished(site), what="the second default job")
    time.sleep(SETTLE)
    assert "1" not in _finished(site)
    assert _state(site, held) is State.PENDING
    with site.queue() as queue:
        assert [p.queue for p in queue.resume("mail")] == ["mail"]
    wait_for(lambda: "1" in _finished(site), timeout=10, what="the paused job, after the resume")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_running_worker_sees_a_pause_at_its_next_claim_and_a_timed_one_ends_by_itself(site: Site) -> None:
    worker = site.start("--processes", "2", "--threads", "1", "--no-scheduler")
    site.put("finish", 10, queue="mail")
    wait_for(lambda: "10" in _finished(site), what="a mail job before the pause")
    with site.queue() as queue:
        queue.pause("mail")  # the workers are running: idle, waiting for jobs
    held = site.put("finish", 11, queue="mail")
    site.put("finish", 12)
    wait_for(lambda: "12" in _finished(site), what="a default job after the pause")
    time.sleep(SETTLE)
    assert "11" not in _finished(site) and _state(site, held) is State.PENDING
    with site.queue() as queue:
        queue.resume("mail")
    wait_for(lambda: "11" in _finished(site), timeout=5, what="the held job, after the resume")

    with site.queue() as queue:
        queue.pause("mail", duration=2.0)  # ends by itself: nobody resumes it
    timed = site.put("finish", 13, queue="mail")
    time.sleep(1.0)
    assert _state(site, timed) is State.PENDING
    wait_for(lambda: "13" in _finished(site), timeout=10, what="the job after its pause ended")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
