"""Jobs that end their worker: ``sys.exit()`` or ``KeyboardInterrupt`` in a task is an ordinary failed attempt
(the worker thread lives on); a job that kills its process is charged for it alone, never the healthy jobs
that were claimed in the same batch (engine side: tests/engine/test_poison_isolation.py)."""

from __future__ import annotations

import pytest

from queue_max_django.engine import State
from tests.worker.conftest import TASKS, Site

pytestmark = pytest.mark.slow

EXITS = [("exits", (3,), "SystemExit"), ("interrupts", (), "KeyboardInterrupt")]


@pytest.mark.parametrize(("task", "args", "error_type"), EXITS)
@pytest.mark.store_neutral  # the worker thread's handling of SystemExit
def test_a_task_that_exits_fails_like_any_exception(
    site: Site, task: str, args: tuple[int, ...], error_type: str
) -> None:
    job_id = site.put(task, *args, max_retries=2)
    healthy = site.put("finish", 1)

    done = site.run("--burst", "--processes", "1", "--no-scheduler")

    assert done.returncode == 0, done.stderr  # --burst ends: the job does not loop forever
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.FAILED, job
        assert (job.retries, job.attempts) == (3, 3)
        assert [kind for kind, _ in job.errors] == [error_type] * 3
        assert job.traceback is not None and error_type in job.traceback
        finished = queue.job(healthy)
        assert finished is not None and finished.state is State.DONE
    assert len(site.marks(task)) == 3
    assert len({pid for _, pid in site.marks(task)}) == 1  # the process (and its thread) lived on


@pytest.mark.store_neutral  # the supervisor's handling of a crashing process, end to end; which jobs a
# lost batch charges is the store's part, proven on every store by tests/engine/test_poison_isolation.py
def test_a_job_that_kills_its_worker_charges_no_healthy_job_of_its_batches(site: Site) -> None:
    """300 fast jobs around one that kills its process: the worker claims them in batches, so every crash
    loses a batch's leases. With the default MAX_RETRIES (3) the poison job ends in the dead letters after
    4 charged attempts (5 crashes: the first, in a batch, is not charged); every healthy job is done, once
    or again, and none was charged an attempt."""
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "1"
    with site.queue(shards=1) as queue:  # one shard: the poison job is claimed in batches with the others
        finish = TASKS + "finish"
        healthy = queue.put_many([{"args": [n], "kwargs": {}} for n in range(150)], name=finish)
        poison = queue.put({"args": [], "kwargs": {}}, name=TASKS + "poison")
        healthy += queue.put_many([{"args": [n], "kwargs": {}} for n in range(150, 300)], name=finish)

    done = site.run("--burst", "--processes", "1", "--no-scheduler", timeout=90)

    assert done.returncode == 0, done.stderr
    with site.queue() as queue:
        job = queue.job(poison)
        assert job is not None and job.state is State.FAILED
        assert job.retries == 4 and job.error_type == "LeaseExpired"
        assert [d.job_id for d in queue.dead_letters()] == [poison]
        for job_id in healthy:
            finished = queue.job(job_id)
            assert finished is not None and finished.state is State.DONE and finished.retries == 0, finished
        assert queue.verify() == []
    assert len(site.marks("poison")) == 5
    assert {int(value) for value, _ in site.marks("finished")} == set(range(300))
