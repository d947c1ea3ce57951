"""The PostgreSQL store behind PgBouncer in transaction mode (``tests/pgbouncer.py``: two server connections
shared by every client): with ``listen=False, prepare_threshold=None`` it keeps no state in a server session,
so puts, claims, acknowledgements, retries, flow control, named locks and the worker registry work from
several connections at once, and an idle consumer finds new work by polling. The control: psycopg's default
of prepared statements fails there, so the bouncer really does hand transactions to shared sessions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from queue_max_django.engine import Queue, QueueEmpty, State
from queue_max_django.engine.errors import StoreError
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests.pgbouncer import Bouncer, backends
from tests.pgbouncer import bouncer as bouncer

THREADS = 4
JOBS = 40  # per thread


def pooled(url: str, **options: object) -> Queue:
    store = PostgresStore.open(url, listen=False, prepare_threshold=None, poll_interval=0.05)
    return Queue(store, retry_backoff=0, do_vacuum=False, **options)  # type: ignore[arg-type]


@pytest.fixture
def queues(bouncer: Bouncer) -> Iterator[Callable[[], Queue]]:
    opened: list[Queue] = []

    def make() -> Queue:
        opened.append(pooled(bouncer.url))
        return opened[-1]

    yield make
    for queue in opened:
        queue.close()


def in_threads(work: Callable[[int], None], count: int = THREADS) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(number: int) -> None:
        try:
            work(number)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


def test_jobs_put_claimed_and_finished_from_several_connections(
    queues: Callable[[], Queue], bouncer: Bouncer, pg_url: str
) -> None:
    """Each thread has a connection of its own; the bouncer gives their transactions two server sessions.
    Some jobs are retried once, some released once, the rest acknowledged (in batches too)."""
    queue = queues()
    finished: list[int] = []
    released: set[int] = set()
    lock = threading.Lock()

    def put(number: int) -> None:
        for n in range(JOBS // 2):
            queue.put({"n": n}, priority=n % 3)
        queue.put_many([{"n": n} for n in range(JOBS // 2)], name="batch")

    def work(number: int) -> None:
        while True:
            try:
                records = queue.get_many(8, timeout=1)
            except QueueEmpty:
                return
            done = []
            for record in records:
                record.touch()
                if record.retries == 0 and record.job_id % 5 == 0:
                    record.nack("once more")  # pending again at once (retry_backoff 0)
                    continue
                with lock:
                    again = record.job_id % 7 == 0 and record.job_id not in released
                    released.add(record.job_id)
                if again:
                    record.release()
                    continue
                done.append((record, {"by": number}))
            assert queue.ack_many(done) == {}
            with lock:
                finished.extend(record.job_id for record, _ in done)

    assert in_threads(put) == []
    assert in_threads(work) == []
    stats = queue.stats()
    assert stats["done"] == stats["total"] == THREADS * JOBS
    assert len(finished) == len(set(finished)) == THREADS * JOBS  # each job finished once
    assert queue.jobs(State.DONE, limit=1)[0].result in [{"by": n} for n in range(THREADS)]
    assert queue.verify() == []
    assert backends(pg_url) <= bouncer.pool_size  # the bouncer's sessions, nothing direct


def test_rate_limits_breakers_locks_and_workers_through_the_bouncer(queues: Callable[[], Queue]) -> None:
    first, second = queues(), queues()  # two processes' worth of connections
    first.set_rate_limit("api", "20/m", burst=20)
    granted: list[bool] = []

    def take(number: int) -> None:
        queue = first if number % 2 else second
        granted.extend(queue.try_acquire("api") for _ in range(10))

    assert in_threads(take) == []
    assert granted.count(True) == 20  # shared by both, none spent twice
    first.set_circuit_breaker("svc", threshold=1, recovery_timeout=60)
    assert "svc" in second.circuit_breakers()

    winners: list[str] = []

    def lead(number: int) -> None:
        queue = first if number % 2 else second
        if queue.acquire_lock("leader", f"owner-{number}", 30):
            winners.append(f"owner-{number}")

    assert in_threads(lead, 6) == []
    assert len(winners) == 1
    holder = second.lock_holder("leader")
    assert holder is not None and holder.owner == winners[0]
    assert first.release_lock("leader", winners[0])
    assert second.lock_holder("leader") is None

    first.report_worker("w1", stale_after=30, threads=2)
    second.report_worker("w2", stale_after=30, threads=3)
    assert [w.worker_id for w in first.workers()] == ["w1", "w2"]
    assert second.remove_worker("w1")


def test_an_idle_consumer_finds_a_new_job_by_polling(queues: Callable[[], Queue]) -> None:
    consumer, producer = queues(), queues()
    found: list[int] = []
    waiting = threading.Thread(target=lambda: found.append(consumer.get(timeout=10).job_id))
    waiting.start()
    job_id = producer.put({"late": True})
    waiting.join(10)
    assert found == [job_id]
    assert consumer.job(job_id).state is State.RUNNING  # type: ignore[union-attr]


def test_prepared_statements_fail_through_the_bouncer(bouncer: Bouncer) -> None:
    """The control: psycopg's default (a statement run 5 times is prepared on the server) breaks behind a
    transaction-mode bouncer: two connections prepare the same name in one shared session."""
    store = PostgresStore.open(bouncer.url, listen=False)  # prepare_threshold: psycopg's default
    queue = Queue(store, do_vacuum=False, do_recover=False)
    try:

        def work(number: int) -> None:
            for n in range(20):
                queue.put({"n": n})

        errors = in_threads(work)
    finally:
        queue.close()
    assert errors and all(isinstance(error, StoreError) for error in errors)
    assert any("prepared statement" in str(error) for error in errors)
