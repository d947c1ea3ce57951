"""Progress from inside a running job (issue 20), with a real ``queue_worker``: a task saves its metadata
while it runs, another process (this test) reads it from the store, and the worker saves what the task set
last with the outcome."""

from __future__ import annotations

from queue_max_django.engine import State
from tests.worker.conftest import BOUND, Site, wait_for


def test_a_running_task_saves_progress_that_another_process_reads(site: Site) -> None:
    job_id = site.put("progress", 3, metadata={"of": 3, "_trace": "t-1"})
    worker = site.start("--processes", "1", "--threads", "1", "--no-scheduler", "--burst")
    wait_for(lambda: site.marks("saved"), what="the task to save its progress")
    with site.queue() as queue:
        running = queue.job(job_id)
        assert running is not None and running.state is State.RUNNING
        assert running.metadata == {"of": 3, "_trace": "t-1", "done": 3}
        (site.root / "marks" / "go").touch()
        done = wait_for(
            lambda: (job := queue.job(job_id)) is not None and job.state is State.DONE and job,
            what="the job to finish",
        )
    assert done.result == 3
    assert done.metadata == {"of": 3, "_trace": "t-1", "done": 3, "finished": True}
    assert worker.wait(BOUND) == 0, worker.output()
