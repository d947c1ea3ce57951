"""A ``--burst`` run that ends while a job it ran waits for a retry says so in its closing line (the retry
was counted among "failed and retried", but nothing said it is still to come), with a real ``queue_worker``
on both stores."""

from __future__ import annotations

import re
import time

from queue_max_django.engine import State

from .conftest import Site


def test_a_burst_names_the_retry_it_left_behind(site: Site) -> None:
    job_id = site.put("retry_later", 600.0, max_retries=3)  # Retry(delay=600): far past --burst-wait
    other = site.put("finish", 1)
    run = site.run("--burst", "--processes", "1", "--no-scheduler", "--worker-id", "burst")

    assert run.returncode == 0, run.stderr
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.attempts) == (State.SCHEDULED, 1)
        assert job.eta is not None and job.eta > time.time() + 500
        done = queue.job(other)
        assert done is not None and done.state is State.DONE
    at = time.strftime("%H:%M:%S", time.localtime(job.eta))
    closing = re.search(r"queue_worker burst: stopped after .*", run.stderr)
    assert closing is not None, run.stderr
    assert closing.group(0).startswith(
        "queue_worker burst: stopped after 2 jobs (1 done, 1 failed and retried, 0 dead letters); "
        f"1 retry scheduled for {at} (in "
    )
    assert closing.group(0).endswith(" s) left behind")
