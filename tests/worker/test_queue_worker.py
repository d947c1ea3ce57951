"""``manage.py queue_worker`` as users run it: real subprocesses, real signals, the store checked on disk."""

from __future__ import annotations

import importlib.util
import io
import itertools
import os
import re
import signal
from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from queue_max_django.engine import State

from .conftest import TASKS, Site, probe, wait_for

HAS_DJANGO_TASKS = importlib.util.find_spec("django.tasks") is not None


def test_burst_drains_the_store_and_exits_zero(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_DJANGO_TASKS"] = "1"  # QueueMaxBackend in TASKS (Django >= 6.0)
    with site.queue() as queue:
        for value in range(300):
            queue.put({"args": [value], "kwargs": {}}, name=TASKS + "finish")
        queue.put({"args": [1000], "kwargs": {}}, name=TASKS + "async_finish")
        dead = queue.put({"args": [], "kwargs": {}}, name=TASKS + "boom", max_retries=1)

    done = site.run("--burst", "--processes", "2", "--threads", "2", "--worker-id", "drain", "--no-scheduler")

    assert done.returncode == 0, done.stderr
    finished = Counter(value for value, _pid in site.marks("finished"))
    assert finished == Counter({str(value): 1 for value in [*range(300), 1000]})
    with site.queue() as queue:
        stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)
        assert (stats["done"], stats["failed"]) == (301, 1)
        assert queue.verify() == []
        job = queue.job(dead)
        assert job is not None and job.state is State.FAILED
        assert [kind for kind, _error in job.errors] == ["ValueError", "ValueError"]
        assert all(worker.startswith("drain/") for worker in job.worker_ids) and len(job.worker_ids) == 2
        assert queue.workers(include_dead=True) == []  # each process took itself off the registry
    assert "queue_worker drain" in done.stderr and "2 process(es) x 2 thread(s)" in done.stderr
    if HAS_DJANGO_TASKS:  # the banner lists the django.tasks tasks it will run beside the @task ones
        assert "django.tasks tasks (1): tests.worker.workapp.django_tasks.double\n" in done.stderr
    else:
        assert "django.tasks tasks" not in done.stderr
    # the failed attempt that was retried is one line; the dead letter's is logged with its traceback
    assert re.search(
        rf"job {dead} \({TASKS}boom\) failed \(attempt 1 of 2\), retrying now: ValueError: boom "
        r"\(at tests/worker/workapp/tasks\.py:\d+ in boom\)\n",
        done.stderr,
    ), done.stderr
    assert (
        f"job {dead} ({TASKS}boom) failed (attempt 2 of 2), no retries left: now a dead letter" in done.stderr
    )
    assert done.stderr.count("Traceback (most recent call last)") == 1
    closing = "queue_worker drain: stopped after 303 jobs (301 done, 1 failed and retried, 1 dead letter)\n"
    assert done.stderr.endswith(closing), done.stderr[-500:]


def test_sigterm_lets_running_jobs_finish_and_loses_nothing(site: Site) -> None:
    with site.queue() as queue:
        slow = [queue.put({"args": [value, 1.0], "kwargs": {}}, name=TASKS + "slow") for value in (1, 2)]
        quick = [queue.put({"args": [value], "kwargs": {}}, name=TASKS + "finish") for value in range(10, 40)]
    worker = site.start("--processes", "1", "--threads", "2", "--no-scheduler", "--shutdown-timeout", "20")
    wait_for(lambda: len(site.marks("started")) == 2, what="both slow jobs to start")

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0, worker.output()
    assert re.search(
        r"stopped after \d+ jobs \(\d+ done, 0 failed and retried, 0 dead letters\)\n$", worker.output()
    )
    assert sorted(value for value, _ in site.marks("finished") if value in ("1", "2")) == ["1", "2"]
    with site.queue() as queue:
        states = {job_id: queue.job(job_id).state for job_id in [*slow, *quick]}  # type: ignore[union-attr]
        assert set(states.values()) <= {State.DONE, State.PENDING}  # finished, or never started
        assert all(states[job_id] is State.DONE for job_id in slow)
        assert queue.stats()["running"] == 0
    # What was left runs later, once: nothing was lost and nothing runs twice.
    assert site.run("--burst", "--processes", "1", "--no-scheduler").returncode == 0
    finished = Counter(value for value, _ in site.marks("finished"))
    assert finished == Counter({str(value): 1 for value in [1, 2, *range(10, 40)]})


def test_unfinished_jobs_are_released_after_the_shutdown_timeout(site: Site) -> None:
    job_id = site.put("slow", 7, 30.0)
    worker = site.start("--processes", "1", "--no-scheduler", "--shutdown-timeout", "0.3")
    wait_for(lambda: site.marks("started"), what="the job to start")

    worker.signal(signal.SIGTERM)

    assert worker.wait(15) == 0, worker.output()
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.PENDING  # back to waiting at once
        assert (job.retries, job.attempts) == (0, 0)  # a release is not an attempt
    assert "released 1 unfinished job(s)" in worker.output()
    assert site.marks("finished") == []


def test_a_second_signal_stops_at_once_and_the_lease_brings_the_job_back(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "1.0"
    job_id = site.put("slow", 8, 30.0)
    worker = site.start("--processes", "1", "--no-scheduler", "--shutdown-timeout", "60")
    wait_for(lambda: site.marks("started"), what="the job to start")

    worker.signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received" in worker.output(), 10, "the first signal to be handled")
    worker.signal(signal.SIGTERM)

    assert worker.wait(15) == 1, worker.output()
    with site.queue(lease_time=1.0) as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.RUNNING  # nobody finished it: its lease runs out
        wait_for(lambda: queue.recover() or queue.job(job_id).state is not State.RUNNING, 10)  # type: ignore[union-attr]
        job = queue.job(job_id)
        assert job is not None and job.state is State.PENDING and job.error_type == "LeaseExpired"


def test_a_killed_worker_process_is_replaced_and_its_job_runs_again(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "1.5"
    job_id = site.put("slow", 9, 1.0)
    worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "crashy")
    started = wait_for(lambda: site.marks("started"), what="the job to start")
    victim = started[0][1]
    with site.queue() as queue:
        registered = wait_for(lambda: [w for w in queue.workers() if w.current_jobs], 10, "a heartbeat")
        assert [(w.worker_id, w.pid, w.current_jobs) for w in registered] == [("crashy/0", victim, (job_id,))]

    os.kill(victim, signal.SIGKILL)

    finished = wait_for(lambda: site.marks("finished"), what="the job to run again and finish")
    assert [value for value, _ in finished] == ["9"] and finished[0][1] != victim
    assert next(pid for _, pid in site.marks("started")) == victim and len(site.marks("started")) == 2
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.DONE
        assert job.errors == (("LeaseExpired", "lease expired: the worker holding the job died or stalled"),)
        assert job.worker_ids == ("crashy/0", "crashy/0")
        assert [w.pid for w in queue.workers()] != [victim]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "killed by SIGKILL; starting a new one" in worker.output()


@pytest.mark.store_neutral  # the supervisor's replacing of a process
def test_a_job_over_its_timeout_is_stopped_counted_and_retried(site: Site) -> None:
    job_id = site.put("hang", 5, max_retries=1, timeout=0.5)

    done = site.run("--burst", "--processes", "1", "--no-scheduler")

    assert done.returncode == 0, done.stderr
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.FAILED
        assert [kind for kind, _ in job.errors] == ["queue_max_django.worker.process.JobTimeout"] * 2
        assert job.attempts == 2 and job.retries == 2
    started = site.marks("started")
    assert len(started) == 2 and started[0][1] != started[1][1]  # each time in a new process
    assert done.stderr.count("replaced after a job timed out") == 2
    assert done.stderr.count("exiting: ran 1 job(s), 1 failed") == 2  # each process: its one attempt


@pytest.mark.store_neutral  # the supervisor's recycling of a process
def test_max_jobs_recycles_the_process(site: Site) -> None:
    with site.queue() as queue:
        for value in range(12):
            queue.put({"args": [value], "kwargs": {}}, name=TASKS + "finish")

    done = site.run("--burst", "--processes", "1", "--max-jobs", "4", "--no-scheduler")

    assert done.returncode == 0, done.stderr
    by_pid = Counter(pid for _, pid in site.marks("finished"))
    assert sorted(by_pid.values()) == [4, 4, 4]
    assert done.stderr.count("recycled; starting a new one") == 3  # the third too; the fourth finds nothing


@pytest.mark.store_neutral  # the burst's waiting; a due job's promotion is the
# contract suite's, on every store (tests/engine/test_contract_records.py)
def test_burst_waits_for_jobs_due_within_burst_wait(site: Site) -> None:
    soon = site.put("finish", 1, delay=0.5)
    later = site.put("finish", 2, delay=3600)

    done = site.run("--burst", "--burst-wait", "5", "--processes", "1", "--no-scheduler")

    assert done.returncode == 0, done.stderr
    with site.queue() as queue:
        assert queue.job(soon).state is State.DONE  # type: ignore[union-attr]
        assert queue.job(later).state is State.SCHEDULED  # type: ignore[union-attr]


def test_a_periodic_task_is_enqueued_once_per_tick_with_two_worker_commands(site: Site) -> None:
    first = site.start("--processes", "1", "--worker-id", "one")
    second = site.start("--processes", "1", "--worker-id", "two")
    wait_for(lambda: len(site.marks("ticks")) >= 4, 30, "four ticks to run")
    leaders = [w for w in (first, second) if "leads" in w.output()]
    assert len(leaders) == 1  # while both ran, one of them led
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
    for worker in (first, second):
        assert worker.wait() == 0, worker.output()

    with site.queue() as queue:
        ticks = [j for state in State for j in queue.jobs(state, name=TASKS + "every_second", limit=1000)]
        prefix = f"periodic:{TASKS}every_second:"
        due = sorted(int(key[len(prefix) :]) for key in probe(queue).unique_keys() if key.startswith(prefix))
    assert len(ticks) >= 4
    # one job per one-second tick (the minute before the start caught up too), never two for the same tick
    assert len(ticks) == len(due) == len(set(due))
    assert [b - a for a, b in itertools.pairwise(due)] == [1_000_000] * (len(due) - 1)  # and no gap


def test_a_task_rate_limit_is_shared_by_two_worker_commands(site: Site) -> None:
    """Two ``queue_worker`` commands drain 40 jobs of a task limited to 10/s (burst 10): between them they
    start at most rate x window + burst jobs in any window (start times read from the store), each job
    once, and both take part (with one alone the bound would prove nothing of sharing)."""

    from tests.engine.test_flow_multiprocess import most_in_any_window
    from tests.worker.workapp import tasks

    workers = [
        site.start("--processes", "1", "--threads", "2", "--no-scheduler", "--worker-id", name)
        for name in ("a", "b")
    ]
    with site.queue() as queue:
        wait_for(lambda: len(queue.workers()) == 2, 30, "both workers to register")
        with override_settings(QUEUE_MAX=site.settings()):
            ids = [result.job_id for result in tasks.limited.map(range(40))]  # the task sets its limit
        wait_for(lambda: queue.stats()["done"] == 40, 30, "the jobs to run")
        jobs = [queue.job(job_id) for job_id in ids]
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()
    assert Counter(value for value, _ in site.marks("limited")) == Counter(str(n) for n in range(40))
    starts = [job.started_at for job in jobs if job is not None and job.started_at is not None]
    assert len(starts) == 40
    slack = 0.1  # a start time is read just before its admitting transaction: one token's time
    for window in (0.5, 1.0, 2.0):
        assert most_in_any_window(starts, window - slack) <= 10 * window + 10, (window, sorted(starts))
    assert max(starts) - min(starts) >= (40 - 10) / 10 - slack  # the limit held the drain back
    takers = {worker_id.split("/")[0] for job in jobs if job is not None for worker_id in job.worker_ids}
    assert takers == {"a", "b"}


@pytest.mark.store_neutral  # options refused before the store is opened
def test_queue_worker_refuses_bad_options(site: Site) -> None:
    """Each refusal is a CommandError raised before the store is opened or a process started; one of them
    through a real command line, for the exit status and the line on stderr (a start of Django each: the
    others are the same code path, called in this process)."""
    done = site.run("--burst", "--processes", "0")
    assert done.returncode == 1, done.stderr
    assert "CommandError: --processes must be a whole number >= 1" in done.stderr, done.stderr
    for args, message in [
        (["--autoscale", "4,2"], "--autoscale needs 1 <= MIN <= MAX"),
        (["--autoscale", "x"], "--autoscale takes MIN,MAX"),
        (["--worker-id", "a/b"], "--worker-id must be 1 to 150 characters without '/'"),
    ]:
        with override_settings(QUEUE_MAX=site.settings()), pytest.raises(CommandError) as refused:
            call_command("queue_worker", "--burst", *args, stdout=io.StringIO(), stderr=io.StringIO())
        assert str(refused.value).startswith(message), (args, str(refused.value))
    assert not site.location.exists()  # nothing was written


def test_worker_processes_stop_when_the_supervisor_is_killed(site: Site) -> None:
    job_id = site.put("slow", 3, 0.5)
    worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "orphan")
    started = wait_for(lambda: site.marks("started"), what="the job to start")
    child = started[0][1]

    worker.signal(signal.SIGKILL)  # the supervisor only: its worker process is left without a parent

    worker.wait(10)
    wait_for(lambda: not os.path.exists(f"/proc/{child}") or _zombie(child), 15, "the orphan to stop")
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.DONE  # it finished its running job first
        assert queue.workers() == []  # and took itself off the registry


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


@pytest.mark.store_neutral  # what the worker reports; the registry's store part
# (report, list, stale, remove) is tests/engine/test_coordination.py's, on every store
def test_live_workers_are_in_the_registry_while_they_run(site: Site) -> None:
    worker = site.start("--processes", "2", "--threads", "3", "--no-scheduler", "--worker-id", "seen")
    with site.queue() as queue:
        workers = wait_for(lambda: len(queue.workers()) == 2 and queue.workers(), 30, "two workers")
        assert [(w.worker_id, w.threads, w.queues) for w in workers] == [
            ("seen/0", 3, None),
            ("seen/1", 3, None),
        ]
        assert len({w.pid for w in workers}) == 2 and all(w.pid != worker.proc.pid for w in workers)
        for value in range(20):
            queue.put({"args": [value], "kwargs": {}}, name=TASKS + "finish")
        assert queue.wait_until_empty(30)
        wait_for(lambda: sum(w.processed for w in queue.workers()) == 20, 30, "the counts to be reported")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.store_neutral  # the supervisor's scaling
def test_autoscale_follows_the_waiting_jobs(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "0.6"  # heartbeats (and scaling decisions) every 0.2 s
    with site.queue() as queue:
        for value in range(12):
            queue.put({"args": [value, 1.0], "kwargs": {}}, name=TASKS + "slow")
    worker = site.start("--processes", "1", "--autoscale", "1,4", "--no-scheduler")
    with site.queue() as queue:
        wait_for(lambda: any(w.threads == 4 for w in queue.workers()), 30, "four threads")
        running = wait_for(
            lambda: queue.stats()["running"] >= 3 and queue.stats()["running"], 30, "parallel runs"
        )
        assert running <= 4
        wait_for(
            lambda: queue.stats()["pending"] == 0 and queue.stats()["running"] == 0, 30, "the backlog to go"
        )
        wait_for(lambda: any(w.threads == 1 for w in queue.workers()), 30, "one thread again")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_result_handle_in_this_process_follows_a_job_that_a_worker_process_runs(site: Site) -> None:

    from tests.worker.workapp import tasks

    with override_settings(QUEUE_MAX=site.settings()):
        result = tasks.finish.delay(42)
        worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "remote")
        try:
            result.wait(timeout=30)
        finally:
            worker.signal(signal.SIGTERM)
            worker.wait()
        assert (result.return_value, result.worker_ids, result.attempts) == (42, ["remote/0"], 1)
        assert result.started_at is not None and result.finished_at is not None


def test_a_job_finishing_during_shutdown_keeps_its_lease_past_the_lease_time(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_LEASE_TIME"] = "1.0"  # the job runs 2.5 lease times after the stop request
    job_id = site.put("slow", 11, 2.5)
    worker = site.start("--processes", "1", "--no-scheduler", "--shutdown-timeout", "20")
    wait_for(lambda: site.marks("started"), what="the job to start")

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0, worker.output()
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.DONE
        assert (job.attempts, job.errors) == (1, ())  # heartbeats went on: no lease expired meanwhile
    assert [value for value, _ in site.marks("finished")] == ["11"]
