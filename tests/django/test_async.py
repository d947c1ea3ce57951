"""The async API of ``@task`` and of its result handle, run in a real event loop on every store: ``aenqueue``,
``adelay``, ``aschedule_in``/``aschedule_at``, ``amap``, ``aget_result``, ``JobResult.arefresh``/``aload``
and ``await_result``, which lets the loop run other coroutines while it waits."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from django.test import override_settings

from queue_max_django import JobMismatch, JobNotFound, JobResult, JobStatus
from queue_max_django.conf import get_queue
from queue_max_django.engine import Job, State
from queue_max_django.testing import run_queued
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
T = TypeVar("T")
BOUND = 10.0  # seconds: a wait that would end only by timing out fails the test within this


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max(RETRY_BACKOFF=0):
        yield


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def stored(job_id: int) -> Job:
    job = get_queue().job(job_id)
    assert job is not None
    return job


def test_aenqueue_and_adelay_store_the_jobs_that_enqueue_and_delay_store() -> None:
    async def enqueue() -> list[JobResult]:
        return [await t.add.aenqueue(1, 2), await t.echo.adelay(3, key="v")]

    first, second = run(enqueue())
    assert (first.status, second.status) == (JobStatus.READY, JobStatus.READY)
    assert (stored(first.job_id).name, stored(first.job_id).payload) == (
        "tests.testapp.tasks.add",
        {"args": [1, 2], "kwargs": {}},
    )
    assert stored(second.job_id).payload == {"args": [3], "kwargs": {"key": "v"}}
    assert stored(second.job_id).state is State.PENDING
    with pytest.raises(TypeError, match="cannot be called with these arguments"):
        run(t.add.aenqueue(1))  # checked as .delay() checks, nothing stored
    assert get_queue().stats()["total"] == 2


def test_aschedule_in_aschedule_at_and_amap() -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)

    async def enqueue() -> tuple[JobResult, JobResult, list[JobResult]]:
        soon = await t.add.aschedule_in(dt.timedelta(minutes=10), 1, 1)
        at = await t.add.aschedule_at(later, 2, 2)
        return soon, at, await t.add.amap(iter(range(3)), 10)

    soon, at, mapped = run(enqueue())
    assert stored(soon.job_id).state is State.SCHEDULED
    assert stored(soon.job_id).eta == pytest.approx(time.time() + 600, abs=30)
    assert stored(at.job_id).eta == pytest.approx(later.timestamp(), abs=0.01)
    assert [stored(r.job_id).payload["args"] for r in mapped] == [[0, 10], [1, 10], [2, 10]]


def test_await_result_lets_the_loop_run_other_coroutines_while_it_waits() -> None:
    """The job runs only after another coroutine made progress while ``await_result`` was waiting: a wait
    that blocked the loop would never let it, and would end in ``TimeoutError``."""

    async def scenario() -> tuple[JobResult, JobResult, list[str]]:
        handle = await t.add.adelay(20, 22)
        progress: list[str] = []
        waiting = asyncio.create_task(handle.await_result(timeout=BOUND))
        for step in range(3):
            await asyncio.sleep(0.01)  # the waiter polls in between
            assert not waiting.done()
            progress.append(f"tick {step}")
        progress.append(f"status {stored(handle.job_id).state}")
        await asyncio.to_thread(run_queued)  # now the job runs (in a thread, as a worker would)
        return handle, await waiting, progress

    handle, waited, progress = run(scenario())
    assert waited is handle
    assert progress == ["tick 0", "tick 1", "tick 2", "status pending"]
    assert (handle.status, handle.return_value, handle.attempts) == (JobStatus.SUCCESSFUL, 42, 1)
    assert stored(handle.job_id).state is State.DONE


@pytest.mark.store_neutral  # the control of the test above: what it rules out, shown once
def test_control_a_blocking_wait_in_a_coroutine_stops_every_other_coroutine() -> None:
    async def scenario() -> list[str]:
        handle = await t.add.adelay(1, 1)
        progress: list[str] = []

        async def other() -> None:
            progress.append("other ran")

        other_task = asyncio.create_task(other())
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.1)  # the sync wait: the loop is stuck in it
        seen_during_wait = list(progress)
        await other_task
        return seen_during_wait

    assert run(scenario()) == []


def test_await_result_raises_timeout_error_and_the_job_stays_waiting() -> None:
    async def scenario() -> JobResult:
        handle = await t.add.adelay(1, 2)
        with pytest.raises(TimeoutError, match=f"job {handle.id} did not finish within 0.05 s"):
            await handle.await_result(timeout=0.05)
        return handle

    handle = run(scenario())
    assert handle.status is JobStatus.READY and stored(handle.job_id).state is State.PENDING


def test_await_result_of_a_failing_job_ends_failed_with_its_errors() -> None:
    async def scenario() -> JobResult:
        handle = await t.fail_permanent.adelay()
        waiting = asyncio.create_task(handle.await_result(timeout=BOUND))
        await asyncio.to_thread(run_queued)
        return await waiting

    handle = run(scenario())
    assert handle.status is JobStatus.FAILED
    assert [e.exception_class_path for e in handle.errors] == ["queue_max_django.engine.classify.Permanent"]


def test_arefresh_aload_and_aget_result_read_the_store() -> None:
    handle = t.add.delay(2, 3)
    other = t.echo.delay()
    assert handle.status is JobStatus.READY  # read now: a snapshot from here on
    run_queued()

    async def scenario() -> tuple[JobStatus, JobResult, JobResult]:
        before = handle.status  # still the snapshot
        await handle.arefresh()
        loaded = await JobResult.aload(handle.id)
        got = await t.add.aget_result(handle.id)
        with pytest.raises(JobMismatch, match=r"tests\.testapp\.tasks\.echo"):
            await t.add.aget_result(other.id)
        return before, loaded, got

    before, loaded, got = run(scenario())
    assert before is JobStatus.READY
    assert handle.status is JobStatus.SUCCESSFUL and handle.return_value == 5
    assert (loaded.return_value, got.return_value, got.task_name) == (5, 5, "tests.testapp.tasks.add")
    assert t.add.get_result(int(handle.id)).job_id == handle.job_id  # the sync form, by int or str
    assert get_queue().purge(State.DONE) == 2
    with pytest.raises(JobNotFound):
        run(handle.arefresh())
    with pytest.raises(JobNotFound):
        run(t.add.aget_result(handle.id))


def test_aenqueue_in_immediate_mode_runs_the_task_and_its_coroutine(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        result = run(t.async_add.aenqueue(4, 5))
        failed = run(t.fail_always.adelay("now"))
    assert (result.status, result.return_value) == (JobStatus.SUCCESSFUL, 9)
    assert stored(result.job_id).state is State.DONE
    assert failed.status is JobStatus.FAILED and stored(failed.job_id).state is State.FAILED
