"""Jobs that end their worker: ``sys.exit()`` or ``KeyboardInterrupt`` in a task is an ordinary failed attempt
(the worker thread lives on)."""

from __future__ import annotations

import pytest

from queue_max_django.engine import State
from tests.worker.conftest import TASKS, Site

pytestmark = pytest.mark.slow

EXITS = [("exits", (3,), "SystemExit"), ("interrupts", (), "KeyboardInterrupt")]


@pytest.mark.parametrize(("task", "args", "error_type"), EXITS)
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

