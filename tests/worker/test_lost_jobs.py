"""A job lost with its worker (the worker SIGKILLed while it runs the job: the OOM killer, a node lost) ends
no attempt, so its worker logs nothing; the recovery that takes it back, in another process, logs one line for
it: WARNING when it runs again, ERROR when it is a dead letter now, with the structured fields of a failed
attempt's line and the id of the worker that held it (queue_max_django/observability/lostjobs.py).

A real ``queue_worker`` runs the job and is SIGKILLed, supervisor and worker process alike (so that none of
its processes recovers the job); this process then recovers it through a Queue connected as the Django layer
connects its own (``signals.connect``), and the test reads the log records and the stored job.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator

import pytest

from queue_max_django import signals
from queue_max_django.engine import State

from .conftest import TASKS, Site, wait_for

pytestmark = pytest.mark.slow

LEASE = 1.0  # seconds: the killed worker's lease runs out this soon


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """The records of the worker's logger in this process (a handler of its own: another test may have
    stopped the package's loggers propagating, as ``queue_worker`` does)."""
    caught: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = caught.append  # type: ignore[method-assign]
    logger = logging.getLogger("queue_max_django.worker")
    logger.addHandler(handler)
    try:
        yield caught
    finally:
        logger.removeHandler(handler)


def kill_holding_worker(site: Site, max_retries: int) -> int:
    """A job of ``slow`` claimed by a worker named "doomed", then the worker SIGKILLed, every process of it.
    -> the job's id."""
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = str(LEASE)
    job_id = site.put("slow", 7, 60.0, max_retries=max_retries)
    worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "doomed")
    victim = wait_for(lambda: site.marks("started"), what="the job to start")[0][1]
    os.killpg(worker.proc.pid, signal.SIGKILL)  # its session: the supervisor, the fork server, the process
    worker.proc.wait(10)
    wait_for(lambda: not _alive(victim), 10, "the worker process to die")
    return job_id


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # a zombie is dead
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("max_retries", [2, 0], ids=["retried", "dead-letter"])
def test_a_job_lost_with_a_killed_worker_is_logged_by_the_recovery(
    site: Site, records: list[logging.LogRecord], max_retries: int
) -> None:
    job_id = kill_holding_worker(site, max_retries)
    with site.queue(lease_time=LEASE) as queue:
        assert queue.job(job_id).state is State.RUNNING  # type: ignore[union-attr]
        signals.connect(queue)
        wait_for(queue.recover, 10, "the lease to expire and the recovery to take the job back")
        assert queue.recover() == 0  # once: a second round finds nothing
        job = queue.job(job_id)

    lost = [record for record in records if getattr(record, "job_id", None) == str(job_id)]
    assert len(lost) == 1, [record.getMessage() for record in records]
    line = lost[0]
    dead = max_retries == 0
    assert line.levelno == (logging.ERROR if dead else logging.WARNING)
    message = line.getMessage()
    assert f"job {job_id} ({TASKS}slow) lost with worker doomed/0" in message, message
    assert f"(attempt 1 of {max_retries + 1}): lease expired" in message, message
    assert message.endswith("now a dead letter" if dead else "retrying now"), message
    names = ("task", "queue", "attempt", "attempts_allowed", "dead_letter", "worker_id")
    fields = {key: getattr(line, key) for key in names}
    assert fields == {
        "task": TASKS + "slow",
        "queue": "default",
        "attempt": 1,
        "attempts_allowed": max_retries + 1,
        "dead_letter": dead,
        "worker_id": "doomed/0",
    }

    # what is stored: the lost attempt counted, the worker that held it named
    assert job is not None
    assert job.state is (State.FAILED if dead else State.PENDING)
    assert job.retries == 1 and job.error_type == "LeaseExpired"
    assert job.worker_ids == ("doomed/0",)
