"""Crashes: holders and writers killed with a real SIGKILL at random moments.

After every kill the store must be consistent (verify() == []), put_many batches must be whole or absent,
every put that returned before the kill must be there, and a dead holder's job must run again after its
lease, up to the dead letters for a job that kills every holder. Nothing is mocked.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from queue_max_django.engine import QueueEmpty, State

from . import procs
from .locations import StoreLocation
from .procs import Children, finish, kill, opened, read_lines, wait_for

pytestmark = pytest.mark.contract


# ------------------------------------------------------------------------------------------ INV-2


@pytest.mark.slow
@pytest.mark.inv_2
def test_killed_holders_job_runs_again_after_its_lease(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """inv_2: the job of a SIGKILLed holder comes back after its lease (background recovery), not before,
    and counts the lost attempt."""
    with opened(location, do_recover=True, recover_interval=0.05) as q:
        job_id = q.put({"work": 1})
        log = tmp_path / "held"
        holder = children.start(procs.claim_and_hold, location, str(log), 1, 0.5)
        lines = wait_for(lambda: read_lines(log)[-1:] == [["holding"]] and read_lines(log), what="a claim")
        kill(holder)
        held_id, lease_until = int(lines[0][0]), float(lines[0][1])
        assert held_id == job_id
        record = q.get(timeout=10)
        got_at = time.time()
        assert record.job_id == job_id
        assert got_at >= lease_until, "the job was handed out again before its lease expired"
        assert (record.retries, record.attempts) == (1, 2)
        record.ack()
        job = q.job(job_id)
        assert job is not None and job.state is State.DONE
        assert q.verify() == []


@pytest.mark.slow
@pytest.mark.inv_2
def test_live_holder_that_touches_keeps_its_job(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """inv_2: a holder in another process that touch()es its job keeps it over several lease times, while
    background recovery runs and another consumer keeps asking for work."""
    lease_time, hold = 0.5, 2.0
    with opened(location, do_recover=True, recover_interval=0.05, lease_time=lease_time) as q:
        job_id = q.put("long job")
        log = tmp_path / "holder"
        holder = children.start(procs.hold_with_touch, location, str(log), lease_time, hold, 0.05)
        wait_for(lambda: read_lines(log), what="the claim")
        asked = 0
        while holder.is_alive():
            try:
                stolen = q.get(timeout=0)
            except QueueEmpty:
                asked += 1
                time.sleep(0.02)
                continue
            raise AssertionError(f"job {stolen.job_id} was handed to a second holder while touched")
        finish(holder)
        assert asked > 20
        lines = read_lines(log)
        assert lines[0] == ["claimed", str(job_id)]
        assert lines[1][:2] == ["acked", str(job_id)] and int(lines[1][2]) >= 10
        job = q.job(job_id)
        assert job is not None and job.state is State.DONE
        assert (job.retries, job.attempts) == (0, 1)
        assert q.verify() == []


@pytest.mark.slow
@pytest.mark.inv_2
def test_job_that_kills_every_holder_ends_in_the_dead_letters(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """inv_2: a job whose holder dies every time (SIGKILL after get) fails after max_retries + 1 attempts
    with error type "LeaseExpired", instead of looping forever."""
    max_retries = 2
    with opened(location, max_retries=max_retries) as q:
        job_id = q.put("poison")
        attempts = 0
        log = tmp_path / "attempts"
        for _ in range(10):
            job = q.job(job_id)
            assert job is not None
            if job.state is State.FAILED:
                break
            assert job.state is State.PENDING
            holder = children.start(procs.claim_then_die, location, str(log), 0.2)
            holder.join(timeout=procs.CHILD_TIMEOUT)
            assert holder.exitcode == -9
            attempts += 1
            assert read_lines(log)[-1] == [str(job_id), str(attempts - 1)]
            running = q.job(job_id)
            assert running is not None and running.state is State.RUNNING
            time.sleep(max(0.0, running.lease_until - time.time()) + 0.02)  # type: ignore[operator]
            assert q.recover() == 1
            assert q.verify() == []
        assert attempts == max_retries + 1
        job = q.job(job_id)
        assert job is not None and job.state is State.FAILED
        assert (job.retries, job.attempts) == (max_retries + 1, max_retries + 1)
        assert job.error_type == "LeaseExpired"
        assert [dead.job_id for dead in q.dead_letters()] == [job_id]
        with pytest.raises(QueueEmpty):
            q.get(timeout=0)


# ------------------------------------------------------------------------------------ INV-1 / INV-5


@pytest.mark.slow
@pytest.mark.inv_1
@pytest.mark.inv_5
def test_kills_at_random_moments_leave_a_consistent_store(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """inv_1 / inv_5: a process doing put / put_many(200) / get+ack / get+nack is SIGKILLed at random
    moments, 10 times. After each kill: verify() finds nothing, every put_many batch is whole or absent,
    no put that returned is lost, and total counts exactly the jobs written (nothing half-written)."""
    rng = random.Random(1234)
    purged = 0
    puts = batches_logged = 0
    with opened(location, shards=2):  # create the store with 2 shards: more collisions between operations
        pass
    for round_ in range(10):
        ready, log = tmp_path / f"ready-{round_}", tmp_path / f"chaos-{round_}"
        process = children.start(procs.chaos, location, str(log), str(ready), round_)
        wait_for(ready.exists, what="the child to open the store")
        # Some work of each kind first, however slow the machine is today; then a kill at a random moment.
        wait_for(lambda: _logged(log, "p") >= 3 and _logged(log, "b") >= 1, what="puts and a put_many")  # noqa: B023
        time.sleep(rng.uniform(0.01, 0.2))
        kill(process)

        with opened(location) as q:  # reopen after every kill, as a restarted worker would
            assert q.verify() == []
            jobs = procs.all_jobs(q)
            stats = q.stats()
            states = Counter(job.state.value for job in jobs)
            assert {state.value: stats[state.value] for state in State} == {
                state.value: states[state.value] for state in State
            }
            assert stats["total"] == len(jobs) + purged  # every put ever: stored now, or purged below
            batches = Counter(
                job.payload["batch"]
                for job in jobs
                if "batch" in job.payload and job.payload["batch"].startswith(f"{round_}-")
            )
            assert {batch: size for batch, size in batches.items() if size != 200} == {}
            stored = {job.job_id for job in jobs}
            for line in read_lines(log):
                if line[0] == "p":
                    puts += 1
                    assert int(line[1]) in stored, f"put {line[1]} returned, then was lost"
                else:
                    batches_logged += 1
                    assert batches[line[1]] == 200, f"put_many {line[1]} returned, then was lost"
                    assert {int(line[2]), int(line[3])} <= stored
            # Start the next round small: drop everything but the jobs the dead child still holds.
            purged += sum(q.purge(state) for state in State if state is not State.RUNNING)
            assert q.verify() == []
    assert puts > 20 and batches_logged > 5


def _logged(log: Path, kind: str) -> int:
    """How many lines of ``kind`` (``p`` a put, ``b`` a put_many) the chaos child has logged so far."""
    return sum(1 for line in read_lines(log) if line[0] == kind)


# ------------------------------------------------------------------------------------------ INV-3


@pytest.mark.inv_3
@pytest.mark.parametrize("sync", [False, True], ids=["default", "sync"])
def test_puts_that_returned_survive_a_sigkill(
    location: StoreLocation, tmp_path: Path, children: Children, sync: bool
) -> None:
    """inv_3: every put that returned before the writer was SIGKILLed is in the store afterwards, in the
    default mode and with sync=True."""
    log, ready = tmp_path / "puts", tmp_path / "ready"
    process = children.start(procs.put_forever, location, str(log), str(ready), sync)
    wait_for(ready.exists, what="the writer to open the store")
    wait_for(lambda: len(read_lines(log)) >= 50, what="50 puts")
    time.sleep(random.uniform(0.0, 0.1))
    kill(process)
    acknowledged = [int(line[0]) for line in read_lines(log)]
    with opened(location) as q:
        missing = [job_id for job_id in acknowledged if q.job(job_id) is None]
        assert missing == []
        stats = q.stats()
        assert stats["pending"] == stats["total"] >= len(acknowledged)
        assert stats["total"] <= len(acknowledged) + 1  # at most the put in flight also landed
        assert q.verify() == []
