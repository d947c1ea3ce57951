"""AsyncQueue: the same operations as coroutines, and an idle get() that never blocks the event loop.

No pytest-asyncio here: each test is a plain function that runs its coroutine with asyncio.run().
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import (
    AsyncQueue,
    AsyncRecord,
    InvalidJob,
    Queue,
    QueueClosed,
    QueueEmpty,
    RateLimited,
    State,
)
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation

MakeQueue = Callable[..., Queue]


async def after_ticks(count: int, seconds: float, then: Callable[[], Any]) -> int:
    """``count`` sleeps of ``seconds`` on the loop (they run only while nothing blocks it), then ``then()``,
    awaited if it returns an awaitable. -> the ticks made."""
    ticks = 0
    for _ in range(count):
        ticks += 1
        await asyncio.sleep(seconds)
    done = then()
    if inspect.isawaitable(done):
        await done
    return ticks


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


@pytest.mark.contract
@pytest.mark.rule_async
def test_batches_claims_and_reads_as_coroutines(
    location: StoreLocation, clock: FakeClock, make_queue: MakeQueue
) -> None:
    """rule_async: put_parts, get_many, ack_many (of AsyncRecords), claim, delete, promote,
    cancel_requested and the reads (queue_counts, pending_ages, shard_stats, now) change and read the store
    as the sync ones do."""

    async def main() -> None:
        async with open_async(location, clock) as aq:
            ids = await aq.put_parts(range(6), queue="bulk")
            later = await aq.put("later", delay=60)
            assert (await aq.queue_counts())["bulk"] == {"pending": 6, "scheduled": 0, "running": 0}
            clock.advance(5)
            assert (await aq.pending_ages())["bulk"] == pytest.approx(5)
            assert sum(shard["pending"] for shard in await aq.shard_stats()) == 6
            assert await aq.now() == clock.now

            records = await aq.get_many(4, timeout=0, queues=["bulk"])
            assert records and all(isinstance(record, AsyncRecord) for record in records)
            taken = [record.job_id for record in records]
            assert await aq.cancel_requested(taken[0]) is False
            await aq.request_cancel(taken[0])
            assert await aq.cancel_requested(taken[0]) is True
            assert await aq.ack_many([(record, record.payload * 10) for record in records]) == {}
            for record in records:
                job = await aq.job(record.job_id)
                assert job is not None and (job.state, job.result) == (State.DONE, record.payload * 10)

            rest = [job_id for job_id in ids if job_id not in taken]
            claimed = await aq.claim(rest[0])
            assert claimed is not None and claimed.job_id == rest[0]
            await claimed.ack()
            assert await aq.claim(rest[0]) is None  # done: nothing to claim
            assert await aq.delete(rest[0]) is True
            assert await aq.job(rest[0]) is None

            clock.advance(60)
            assert await aq.promote() == 1
            assert (await aq.job(later)).state is State.PENDING
            assert not aq.closed
        assert aq.closed

    asyncio.run(main())
    with make_queue() as q:
        assert q.stats()["done"] == len(q.jobs(State.DONE, limit=100))


@pytest.mark.contract
@pytest.mark.rule_async
def test_get_many_waits_on_the_loop_and_times_out(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: an idle get_many() lets other coroutines run, takes a job put meanwhile, and raises
    QueueEmpty once its timeout passes."""

    async def main() -> tuple[list[Any], int]:
        async with open_async(location, clock) as aq:
            with pytest.raises(QueueEmpty):
                await aq.get_many(3, timeout=0.05)
            putter = asyncio.create_task(after_ticks(10, 0.005, lambda: aq.put_many(["a", "b"])))
            records = await aq.get_many(3, timeout=5)
            ticks = await putter
            await aq.ack_many([(record, None) for record in records])
            return sorted(record.payload for record in records), ticks

    payloads, ticks = asyncio.run(main())
    assert ticks == 10 and payloads and set(payloads) <= {"a", "b"}


@pytest.mark.contract
@pytest.mark.rule_async
def test_flow_control_locks_and_workers_as_coroutines(location: StoreLocation, clock: FakeClock) -> None:
    """rule_async: rate limits (acquire waits on the loop, and refuses past its timeout), circuit breakers,
    locks and the worker registry as coroutines, on the store's clock."""

    async def main() -> None:
        async with open_async(location, clock) as aq:
            rate = await aq.set_rate_limit("name:api", "100/s", burst=1)
            assert (await aq.rate_limits())["name:api"] == rate
            assert await aq.try_acquire("name:api") is True
            assert await aq.try_acquire("name:api") is False
            assert await aq.retry_after("name:api") == pytest.approx(0.01)
            with pytest.raises(RateLimited):
                await aq.acquire("name:api", timeout=0.001)  # the next token is 10 ms away

            # then the store's clock moves on: now a token is there
            refill = asyncio.create_task(after_ticks(5, 0.002, lambda: clock.advance(0.01)))
            await asyncio.wait_for(aq.acquire("name:api", timeout=5), 5)
            assert await refill == 5  # the loop ran while acquire() waited
            assert await aq.remaining("name:api") == pytest.approx(0)
            assert await aq.reset_rate_limit("name:api") is True
            assert await aq.remaining("name:api") == pytest.approx(1)
            assert await aq.remove_rate_limit("name:api") is True
            with pytest.raises(InvalidJob):
                await aq.acquire("name:api", timeout=-1)

            await aq.set_circuit_breaker("queue:mail", threshold=2, recovery_timeout=30)
            assert (await aq.circuit_breakers())["queue:mail"]["state"] == "closed"
            assert await aq.reset_circuit_breaker("queue:mail") is True
            assert await aq.remove_circuit_breaker("queue:mail") is True
            assert await aq.circuit_breakers() == {}

            assert await aq.acquire_lock("nightly", "me", ttl=30) is True
            assert await aq.acquire_lock("nightly", "you", ttl=30) is False
            holder = await aq.lock_holder("nightly")
            assert holder is not None and holder.owner == "me"
            assert await aq.release_lock("nightly", "me") is True
            assert await aq.lock_holder("nightly") is None
            last = await aq.last_lock_holder("nightly")
            assert last is not None and last.owner == "me"

            await aq.report_worker("host:1", stale_after=10, pid=1)
            assert [worker.worker_id for worker in await aq.workers()] == ["host:1"]
            clock.advance(11)
            assert await aq.workers() == []
            assert await aq.prune_workers() == 1
            assert await aq.remove_worker("host:1") is False

    asyncio.run(main())


def test_a_store_without_a_wake_descriptor_is_polled_with_a_backoff(
    location: StoreLocation, clock: FakeClock
) -> None:
    """A PostgreSQL store that does not LISTEN (behind PgBouncer in transaction mode) hands out no
    descriptor to wait on: an idle get() polls it from 5 ms, doubling up to MAX_IDLE_WAIT, not every 5 ms."""
    if location.kind != "postgres":
        pytest.skip("only the PostgreSQL store can be opened without a wake descriptor (listen=False)")
    from queue_max_django.engine.stores.postgres.store import PostgresStore

    async def main() -> int:
        store = PostgresStore.open(location.where, listen=False, clock=clock)
        async with AsyncQueue(store) as aq:
            claims = 0
            get = aq.queue.get

            def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal claims
                claims += 1
                return get(*args, **kwargs)

            aq.queue.get = counted  # type: ignore[method-assign]
            with pytest.raises(QueueEmpty):
                await aq.get(timeout=0.6)
            return claims

    claims = asyncio.run(main())
    # 5, 10, 20, 40, 80, 160, 320 ms ... : about 8 claims in 0.6 s (a poll every 5 ms would make ~120)
    assert 4 <= claims <= 12
