"""AsyncQueue: the same operations as coroutines, and an idle get() that never blocks the event loop.

No pytest-asyncio here: each test is a plain function that runs its coroutine with asyncio.run().
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import AsyncQueue, Queue, QueueClosed, QueueEmpty, State
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation

MakeQueue = Callable[..., Queue]


def open_async(location: StoreLocation, clock: FakeClock, **options: Any) -> AsyncQueue:
    """An AsyncQueue on the test's store, as ``make_queue`` opens a Queue: on ``clock``, no background
    threads, retries at once."""
    return location.open_async(**({"clock": clock, "retry_backoff": 0} | options))


@pytest.mark.contract
@pytest.mark.rule_async
def test_put_get_ack_round_trip(location: StoreLocation, clock: FakeClock, make_queue: MakeQueue) -> None:
    """rule_async: await put/get/ack/job/stats behave as the sync ones; async with closes the queue."""

    async def main() -> AsyncQueue:
        async with open_async(location, clock) as aq:
            job_id = await aq.put({"to": "a@example.com"}, name="mail.send", priority=5)
            record = await aq.get(0)
            assert (record.job_id, record.payload, record.name, record.priority) == (
                job_id, {"to": "a@example.com"}, "mail.send", 5
            )  # fmt: skip
            assert (await aq.job(job_id)).state is State.RUNNING
            await record.ack(result="sent")
            job = await aq.job(job_id)
            assert job.state is State.DONE and job.result == "sent"
            stats = await aq.stats()
            assert (stats["done"], stats["total"]) == (1, 1)
            assert await aq.verify() == []
        return aq

    aq = asyncio.run(main())
    assert aq.queue.closed
    with make_queue(clock=None) as q:
        assert q.stats()["done"] == 1


@pytest.mark.contract
@pytest.mark.rule_async
def test_nack_release_touch(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: await nack (-> new state), release and touch change the store like the sync ones."""

    async def main() -> None:
        async with open_async(location, clock, max_retries=1) as aq:
            job_id = await aq.put("flaky")
            record = await aq.get(0)
            assert await record.nack(ValueError("first")) is State.PENDING
            record = await aq.get(0)
            clock.advance(10)
            expiry = await record.touch()
            assert expiry == pytest.approx(clock.now + 30)
            assert (await aq.job(job_id)).lease_until == pytest.approx(expiry)
            await record.release()
            job = await aq.job(job_id)
            assert job.state is State.PENDING and job.retries == 1
            record = await aq.get(0)
            assert await record.nack(ValueError("second")) is State.FAILED
            dead = await aq.dead_letters()
            assert [j.job_id for j in dead] == [job_id]
            assert dead[0].error == "second" and dead[0].error_type == "ValueError"
            assert await aq.requeue(job_id) is True
            assert (await aq.job(job_id)).state is State.PENDING

    asyncio.run(main())


@pytest.mark.contract
@pytest.mark.rule_async
def test_put_many_jobs_cancel_purge(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: put_many, jobs, cancel, purge, vacuum, wait_until_empty as coroutines."""

    async def main() -> None:
        async with open_async(location, clock) as aq:
            ids = await aq.put_many(range(5), queue="bulk")
            listed = await aq.jobs(State.PENDING, queue="bulk", limit=10)
            assert [j.job_id for j in listed] == ids
            assert await aq.cancel(ids[0]) is True
            assert await aq.wait_until_empty(timeout=0.02) is False
            assert await aq.purge(State.PENDING) == 4
            assert await aq.wait_until_empty(timeout=0) is True
            job_id = await aq.put("x")
            await (await aq.get(0)).ack()
            assert await aq.vacuum(older_than=0) == 1
            assert await aq.job(job_id) is None
            assert await aq.recover() == 0

    asyncio.run(main())


@pytest.mark.contract
@pytest.mark.rule_async
def test_processing_acks_nacks_and_reraises(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: async with processing() acks on success, nacks and re-raises on an exception."""

    async def main() -> None:
        async with open_async(location, clock) as aq:
            ok = await aq.put("ok", partition_key="p")
            bad = await aq.put("bad", partition_key="p")
            async with aq.processing(timeout=0) as record:
                assert record.job_id == ok
            assert (await aq.job(ok)).state is State.DONE
            with pytest.raises(RuntimeError, match="handler broke"):
                async with aq.processing(timeout=0) as record:
                    assert record.job_id == bad
                    raise RuntimeError("handler broke")
            job = await aq.job(bad)
            assert job.state is State.PENDING and job.retries == 1
            assert job.error == "handler broke" and job.error_type == "RuntimeError"
            with pytest.raises(asyncio.CancelledError):
                async with aq.processing(timeout=0) as record:
                    raise asyncio.CancelledError  # cancellation is not the job's fault: released
            job = await aq.job(bad)
            assert job.state is State.PENDING and job.retries == 1

    asyncio.run(main())


@pytest.mark.contract
@pytest.mark.rule_async
def test_get_times_out_with_queue_empty(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: get(timeout=) raises QueueEmpty once the timeout passes, not much later."""

    async def main() -> float:
        async with open_async(location, clock) as aq:
            with pytest.raises(QueueEmpty):
                await aq.get(0)
            started = time.monotonic()
            with pytest.raises(QueueEmpty):
                await aq.get(timeout=0.1)
            return time.monotonic() - started

    elapsed = asyncio.run(main())
    assert 0.09 <= elapsed < 0.8


@pytest.mark.contract
@pytest.mark.rule_async
def test_waiting_get_does_not_block_the_loop_and_wakes_on_a_put_from_a_thread(
    location: StoreLocation, clock: FakeClock, make_queue: MakeQueue
) -> None:
    """rule_async: while get() waits, other coroutines keep running; a put from another thread wakes it
    promptly (well under the 1 s idle re-check)."""

    async def main() -> tuple[int, float, Any]:
        async with open_async(location, clock) as aq:
            ticks = 0
            stop = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.005)

            tick_task = asyncio.create_task(ticker())
            get_task = asyncio.create_task(aq.get(timeout=5))
            await asyncio.sleep(0.15)
            assert not get_task.done()
            ticks_while_waiting = ticks

            producer = make_queue()
            put_at = time.monotonic()
            thread = threading.Thread(target=producer.put, args=("wake up",))
            thread.start()
            record = await asyncio.wait_for(get_task, 5)
            woke_after = time.monotonic() - put_at
            thread.join()
            producer.close()
            stop.set()
            await tick_task
            await record.ack()
            return ticks_while_waiting, woke_after, record.payload

    ticks_while_waiting, woke_after, payload = asyncio.run(main())
    assert payload == "wake up"
    # The loop ran ~30 ticks' worth of time while get() waited; a get() that blocked the loop would let the
    # ticker run once at most. A loaded machine (CI: two suites on two cores) stretches each 5 ms sleep.
    assert ticks_while_waiting >= 3
    assert woke_after < 0.95  # before the idle re-check (1 s) would have found it


@pytest.mark.contract
@pytest.mark.rule_async
def test_second_get_in_a_row_sees_a_new_job(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: a consumer loop of get() after get() notices each job put in between, in any shard."""

    async def main() -> list[Any]:
        got = []
        async with open_async(location, clock) as aq:
            for i in range(4):
                await aq.put(i)  # the rotation puts each into the next shard
                record = await aq.get(timeout=3)
                got.append(record.payload)
                await record.ack()
        return got

    assert asyncio.run(main()) == [0, 1, 2, 3]


@pytest.mark.contract
@pytest.mark.rule_async
def test_close_is_idempotent_and_final(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: await close() twice is fine; afterwards operations raise QueueClosed."""

    async def main() -> None:
        aq = open_async(location, clock)
        await aq.put("x")
        await aq.close()
        await aq.close()
        with pytest.raises(QueueClosed):
            await aq.put("y")
        with pytest.raises(QueueClosed):
            await aq.get(0)
        with pytest.raises(QueueClosed):
            await aq.stats()

    asyncio.run(main())
