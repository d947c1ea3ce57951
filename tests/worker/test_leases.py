"""A worker renews the leases of its running jobs at least three times per lease time, on its main loop's
tick; a lease time too short for that is refused before anything runs (the system checks refuse it as
LEASE_TIME, run_worker and the options refuse it for an engine Queue). A process stalled past its lease loses
the job, and its late outcome is refused and counted."""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Any

import pytest

from queue_max_django.conf.defaults import MIN_LEASE_TIME
from queue_max_django.engine import QueueEmpty, Record, State
from queue_max_django.worker import WorkerOptionError, process, run_worker
from queue_max_django.worker import options as options_module
from queue_max_django.worker.options import RENEWALS, WATCH_EVERY, WorkerOptions

from .conftest import Site, wait_for


def test_the_tick_the_heartbeat_counts_on_is_the_main_loops() -> None:
    assert options_module.WATCH_EVERY == process.WATCH_EVERY


@pytest.mark.parametrize(
    ("lease_time", "beat"),
    [(0.5, 0.1), (0.6, 0.2), (1.0, 0.3), (1.5, 0.5), (2.0, 0.6), (30.0, 5.0), (86400.0, 5.0)],
)
def test_the_heartbeat_renews_a_lease_at_least_three_times_on_whole_ticks(
    lease_time: float, beat: float
) -> None:
    every = WorkerOptions().heartbeat_every(lease_time)
    assert every == pytest.approx(beat)
    assert lease_time / every >= RENEWALS - 1e-9  # 0.6 / 0.2 is 2.9999999999999996
    ticks = every / WATCH_EVERY
    assert ticks == pytest.approx(round(ticks)) and round(ticks) >= 1


@pytest.mark.parametrize("lease_time", [0.05, 0.3, 0.499, math.nan, math.inf, -1.0, 0.0])
def test_a_lease_too_short_to_renew_is_refused(lease_time: float) -> None:
    with pytest.raises(WorkerOptionError, match=r"needs a lease time of at least 0\.5 s"):
        WorkerOptions().heartbeat_every(lease_time)
    assert MIN_LEASE_TIME == 0.5


def test_a_heartbeat_given_that_renews_too_rarely_is_refused() -> None:
    assert WorkerOptions(heartbeat=1.0).heartbeat_every(3.0) == 1.0
    assert WorkerOptions(heartbeat=0.2).heartbeat_every(0.6) == 0.2
    with pytest.raises(WorkerOptionError, match=r"fewer than 3 times: beat every 1 s at most"):
        WorkerOptions(heartbeat=1.5).heartbeat_every(3.0)
    for bad in (0.0, 0.05, math.nan, math.inf):
        with pytest.raises(WorkerOptionError, match="the heartbeat must be"):
            WorkerOptions(heartbeat=bad)


@pytest.mark.store_neutral  # an option refused before any job is claimed
def test_run_worker_refuses_a_store_whose_leases_it_cannot_renew(site: Site) -> None:
    """An engine Queue may have a lease of 0.05 s: run_worker refuses it before it starts anything, so the
    job is not claimed (it ran 6 times and ended a "lease expired" dead letter)."""
    job_id = site.put("slow", 1, 3.0)
    with site.queue(lease_time=0.05) as queue:
        options = WorkerOptions(processes=1, burst=True, scheduler=False, worker_id="short")
        with pytest.raises(WorkerOptionError, match=r"lease time is 0\.05 s.*at least 0\.5 s"):
            run_worker(queue, options)
        job = queue.job(job_id)
        assert job is not None and (job.state, job.attempts) == (State.PENDING, 0)
        assert queue.workers(include_dead=True) == []


@pytest.mark.store_neutral  # an option refused before any job is claimed
def test_queue_worker_refuses_a_lease_time_under_the_minimum(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "0.05"
    job_id = site.put("slow", 1, 3.0)
    done = site.run("--processes", "1", "--burst", "--no-scheduler")
    assert done.returncode == 1
    assert "queue_max_django.E004" in done.stderr
    assert "QUEUE_MAX['LEASE_TIME'] must be from 0.5 to 3155760000, not 0.05." in done.stderr
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.attempts) == (State.PENDING, 0)
        assert site.marks("started") == []


def test_a_job_three_lease_times_long_runs_once_at_the_minimum_lease(site: Site) -> None:
    """At LEASE_TIME 0.5 s the heartbeat renews every 0.1 s: a job of 1.5 s runs once and is done, with no
    lease expired on the way."""
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "0.5"
    job_id = site.put("slow", 5, 1.5)
    worker = site.start("--processes", "1", "--burst", "--no-scheduler")
    assert worker.wait() == 0, worker.output()
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.result) == (State.DONE, 5)
        assert (job.attempts, job.errors) == (1, ())
    assert [value for value, _ in site.marks("started")] == ["5"]


def test_a_stalled_processs_late_outcome_is_refused_changes_nothing_and_is_counted(site: Site) -> None:
    """A worker process stalled (SIGSTOP) for longer than its lease loses its job, which another holder
    claims; when the process goes on, its task finishes, but the store refuses the acknowledgement: the job
    stays the new holder's, and the process's last line counts the refused outcome."""
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "0.5"
    job_id = site.put("slow", 7, 1.0)
    worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "stalled")
    victim = wait_for(lambda: site.marks("started"), what="the job to start")[0][1]
    with site.queue(lease_time=60.0) as queue:
        record = None
        for _try in range(3):  # stopped inside a transaction (rare), it holds the job's row: let it finish
            os.kill(victim, signal.SIGSTOP)
            deadline = time.monotonic() + 10
            while record is None and time.monotonic() < deadline:
                record = _take_back(queue, job_id)
            if record is not None:
                break
            os.kill(victim, signal.SIGCONT)
            time.sleep(0.05)
        assert record is not None, worker.output()
        os.kill(victim, signal.SIGCONT)

        wait_for(lambda: site.marks("finished"), what="the stalled task to finish")
        wait_for(lambda: "not acknowledged" in worker.output(), what="the refused acknowledgement")
        job = queue.job(job_id)
        assert job is not None and (job.state, job.attempts, job.result) == (State.RUNNING, 2, None)
        assert job.worker_ids[0] == "stalled/0"
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()
        record.ack("the new holder's")
        job = queue.job(job_id)
        assert job is not None and (job.state, job.result) == (State.DONE, "the new holder's")
    log = worker.output()
    assert f"job {job_id} finished but was not acknowledged" in log
    assert "worker stalled/0: exiting: ran 1 job(s), 0 failed; 1 late outcome(s) refused" in log
    assert [value for value, _ in site.marks("finished")] == ["7"]


def _take_back(queue: Any, job_id: int) -> Record | None:
    """Claim ``job_id`` once its lease has expired (recovering it if nobody has yet), or None for now."""
    queue.recover()
    try:
        record: Record = queue.get(timeout=0)
    except QueueEmpty:
        time.sleep(0.05)
        return None
    assert record.job_id == job_id
    return record
