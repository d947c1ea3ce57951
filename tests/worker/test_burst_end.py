"""When a burst worker decides it has nothing left: its reads of the counts and of the scheduled jobs are two
reads, and a job claimed between them (it had become due) must keep the worker, not end it with the job
taken and then released unstarted (the example project's demo on PostgreSQL ended so once in CI, one job
left waiting)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from queue_max_django.engine import Queue, State
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess


class ClaimsBeforeListing:
    """The worker's Queue, but another consumer claims the due job just before the worker lists the
    scheduled ones: the interleaving of two processes, made to happen every time."""

    def __init__(self, queue: Queue, other: Queue) -> None:
        self._queue, self._other = queue, other
        self.claimed: list[int] = []

    def jobs(self, state: State, **options: Any) -> Any:
        if state is State.SCHEDULED and not self.claimed:
            self.claimed.append(self._other.get(0).job_id)  # promotes the due job and claims it
        return self._queue.jobs(state, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def test_a_job_claimed_between_the_counts_and_the_listing_keeps_a_burst_worker(tmp_path: Path) -> None:
    with Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as queue:
        job_id = queue.put("later", delay=0.05)
        time.sleep(0.1)  # due now, still scheduled until a claim promotes it
        assert queue.stats()["scheduled"] == 1
        with Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as other:
            proxy = ClaimsBeforeListing(queue, other)
            options = WorkerOptions(processes=1, burst=True, scheduler=False, verbosity=0)
            worker = WorkerProcess(proxy, options, 0)  # type: ignore[arg-type]
            assert worker._nothing_left() is False  # the claimed job is running: there is work left
            assert proxy.claimed == [job_id]
            assert queue.job(job_id).state is State.RUNNING  # type: ignore[union-attr]
