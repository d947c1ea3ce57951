"""A ``queue_worker`` told to stop at any phase of its start-up exits 0 having started nothing (issue 35):
real ``python -m django queue_worker`` processes, held at a named phase (``QUEUE_MAX_STARTUP_HOLD``,
worker/earlystop.py) until the test has sent its SIGTERM or SIGINT there, so that each phase is hit every
time without sleeping. What is checked: the exit status, the job left waiting and never claimed (no
attempt charged, no mark of the task), no worker in the registry, and no process of the command's group
left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from queue_max_django.engine import State
from queue_max_django.worker import earlystop

from .conftest import Site, Worker, wait_for

# Where each phase's stop is seen and logged: the apps' set-up has no way out of Django's own, so a stop
# during it is seen as the command starts.
SEEN_AT = {phase: phase for phase in earlystop.PHASES} | {"app": "command", "ready": "command"}


def held(site: Site, phase: str, *args: str) -> tuple[Worker, Path]:
    """A worker started and held at ``phase``. -> it, and the file that lets it go on."""
    release = site.root / f"release-{phase}"
    site.env[earlystop.HOLD_ENV] = f"{phase}:{release}"
    worker = site.start("--processes", "2", "--no-scheduler", "--worker-id", f"held-{phase}", *args)
    marker = Path(f"{release}.held")
    wait_for(lambda: marker.exists() or worker.proc.poll() is not None, what=f"the worker to reach {phase}")
    assert marker.exists(), f"the worker ended before {phase}:\n{worker.output()}"
    return worker, release


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def assert_nothing_started(site: Site, worker: Worker, job_id: int) -> None:
    wait_for(lambda: group_gone(worker.proc.pid), 15, "every process of the command's group to end")
    with site.queue() as queue:
        job = queue.job(job_id)
        assert job is not None and job.state is State.PENDING and job.attempts == 0
        assert queue.workers() == []
    assert site.marks("finished") == []


def stop_at(site: Site, phase: str, signum: int) -> None:
    job_id = site.put("finish", 7)
    worker, release = held(site, phase)

    worker.signal(signum)
    release.touch()

    assert worker.wait() == 0, worker.output()
    assert_nothing_started(site, worker, job_id)
    seen = "" if phase == "supervisor" else f" ({SEEN_AT[phase]})"  # run_worker's own line names none
    assert f"stopped during start-up{seen}" in worker.output()


@pytest.mark.store_neutral  # before the store is opened: nothing of it is in play
@pytest.mark.parametrize("phase", [p for p in earlystop.PHASES if p not in ("store", "supervisor")])
def test_sigterm_at_each_phase_before_the_store_exits_0_and_starts_nothing(site: Site, phase: str) -> None:
    stop_at(site, phase, signal.SIGTERM)


@pytest.mark.parametrize("phase", ["store", "supervisor"])
def test_sigterm_once_the_store_is_open_exits_0_and_starts_nothing(site: Site, phase: str) -> None:
    stop_at(site, phase, signal.SIGTERM)


@pytest.mark.store_neutral  # Ctrl-C: the same early handler
def test_sigint_while_django_sets_up_exits_0_and_starts_nothing(site: Site) -> None:
    stop_at(site, "app", signal.SIGINT)


@pytest.mark.store_neutral  # the signal handling of the start-up
def test_a_second_sigterm_during_start_up_ends_the_command_at_once(site: Site) -> None:
    job_id = site.put("finish", 7)
    worker, release = held(site, "app")

    worker.signal(signal.SIGTERM)  # the first: the hold goes on, the stop is remembered
    for _ in range(100):  # two at once may reach Python's handler as one: again until one is a second
        worker.signal(signal.SIGTERM)  # as without the early handler: the process ends, still in its hold
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(0.1)
            break

    assert worker.wait() == -signal.SIGTERM
    assert not release.exists()
    assert_nothing_started(site, worker, job_id)


@pytest.mark.store_neutral  # a worker left alone after its hold: the hook itself changes nothing
def test_a_worker_released_without_a_signal_runs_its_jobs(site: Site) -> None:
    job_id = site.put("finish", 7)
    worker, release = held(site, "app")
    release.touch()
    with site.queue() as queue:
        wait_for(lambda: queue.job(job_id).state is State.DONE, what="the job to be done")  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert [value for value, _ in site.marks("finished")] == ["7"]


def test_the_early_handlers_are_only_for_queue_worker_run_from_djangos_command_line() -> None:
    import django.core.management  # noqa: F401  (Django's command line, as in manage.py)

    assert earlystop.wanted(["manage.py", "queue_worker"])  # this process has Django's command line imported
    assert not earlystop.wanted(["manage.py", "queue_stats"])
    assert not earlystop.wanted(["manage.py"])
    assert not earlystop.installed()  # a test run is not queue_worker: its handlers are its own
