"""Rate limits through the ``Queue``: the token bucket's arithmetic on the injected clock, changing and
removing limits, ``acquire``'s errors, and rate-aware claiming (issue 3).

Slow limits (below ``flow.FAST_RATE`` per second) are admitted job by job; fast ones are served from a small
per-process reserve taken from the shared bucket. Both must keep the bucket's promise: no more than
``burst + rate x time`` jobs or tokens. Everything runs on the fake clock (no sleeping) except the test
that checks that a waiting consumer wakes when its token is due.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from queue_max_django.engine import (
    InvalidJob,
    InvalidRate,
    Queue,
    QueueEmpty,
    Rate,
    RateLimited,
    Record,
    State,
    flow,
)
from tests.engine.conftest import FakeClock

pytestmark = pytest.mark.contract


def sleep_on(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``acquire``'s sleeps, recorded and made on the fake clock instead of the wall's: -> what it slept."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    monkeypatch.setattr(flow, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    return slept


def drain(q: Queue, **get_options: Any) -> list[Record]:
    """get(0) until QueueEmpty; -> every record handed out (none acked)."""
    records = []
    while True:
        try:
            records.append(q.get(0, **get_options))
        except QueueEmpty:
            return records


def grants(q: Queue, key: str, most: int = 10_000) -> int:
    """try_acquire until it refuses; -> how many it granted."""
    for count in range(most):
        if not q.try_acquire(key):
            return count
    raise AssertionError(f"{key!r} granted {most} tokens in a row")


@pytest.fixture
def reopen(make_queue: Callable[..., Queue]) -> Callable[[], Queue]:
    """Open another Queue on the fixture's store (closed at teardown): state read through it is stored,
    not in the first object's memory."""
    return make_queue


# ------------------------------------------------------------------------------------ the bucket's arithmetic


@pytest.mark.flow_limit
def test_try_acquire_grants_the_burst_then_exactly_rate_times_time(queue: Queue, clock: FakeClock) -> None:
    """flow_limit: a new limit grants exactly ``burst`` tokens, then refuses; k / rate seconds later exactly
    k more. Nothing accrues while the clock stands still."""
    assert queue.set_rate_limit("name:send", "4/s", burst=6) == Rate(4, 1.0, 6)
    assert grants(queue, "name:send") == 6
    assert not queue.try_acquire("name:send")  # still refused: the clock did not move
    clock.advance(0.75)  # 3 tokens at 4/s
    assert grants(queue, "name:send") == 3
    clock.advance(10.0)  # 40 tokens' worth, but the bucket holds at most the burst
    assert grants(queue, "name:send") == 6


@pytest.mark.flow_limit
def test_limits_are_keyed_independently(queue: Queue) -> None:
    """flow_limit: each key has its own bucket; a key without a limit always grants."""
    queue.set_rate_limit("*", "2/m")
    queue.set_rate_limit("queue:mail", "3/m")
    assert grants(queue, "*") == 2
    assert grants(queue, "queue:mail") == 3
    assert all(queue.try_acquire("name:unlimited") for _ in range(100))
    assert queue.rate_limits() == {"*": Rate(2, 60.0, 2), "queue:mail": Rate(3, 60.0, 3)}


@pytest.mark.flow_limit
def test_remaining_and_retry_after_are_exact(queue: Queue, clock: FakeClock, reopen: Any) -> None:
    """flow_limit: remaining() counts fractional tokens, retry_after() the seconds to the next whole one,
    both exact on the injected clock; the bucket is on disk (another Queue on the path reads the same)."""
    queue.set_rate_limit("k", "4/s")
    assert queue.remaining("k") == 4.0
    assert queue.retry_after("k") == 0.0
    assert grants(queue, "k") == 4
    assert queue.remaining("k") == 0.0
    assert queue.retry_after("k") == 0.25
    clock.advance(0.125)
    other = reopen()
    for q in (queue, other):
        assert q.remaining("k") == 0.5
        assert q.retry_after("k") == 0.125
    clock.advance(0.125)
    assert other.remaining("k") == 1.0
    assert other.retry_after("k") == 0.0
    assert other.try_acquire("k")
    assert queue.remaining("k") == 0.0
    assert queue.remaining("no-limit") is None
    assert queue.retry_after("no-limit") == 0.0


@pytest.mark.flow_limit
def test_stats_show_each_limit(queue: Queue) -> None:
    """flow_limit: stats() gains "rate_limits" (rate and remaining tokens) only when a limit exists."""
    assert "rate_limits" not in queue.stats()
    queue.set_rate_limit("name:send", "10/5s", burst=3)
    queue.try_acquire("name:send")
    assert queue.stats()["rate_limits"] == {"name:send": {"rate": "10/5s (burst 3)", "remaining": 2.0}}
    queue.remove_rate_limit("name:send")
    assert "rate_limits" not in queue.stats()


@pytest.mark.flow_limit
def test_changing_a_limit_keeps_the_tokens_capped_at_the_new_burst(queue: Queue, clock: FakeClock) -> None:
    """flow_limit: set_rate_limit on an existing key keeps the tokens there are, at most the new burst, and
    accrues at the new rate from then on; raising the burst does not refill."""
    queue.set_rate_limit("k", "10/s")
    assert queue.try_acquire("k") and queue.try_acquire("k")
    assert queue.remaining("k") == 8.0
    queue.set_rate_limit("k", "1/s", burst=5)
    assert queue.remaining("k") == 5.0  # capped
    assert queue.rate_limits() == {"k": Rate(1, 1.0, 5)}
    assert grants(queue, "k") == 5
    clock.advance(1.0)
    assert grants(queue, "k") == 1  # the new rate: one per second
    queue.set_rate_limit("k", "1/s", burst=50)
    assert queue.remaining("k") == 0.0  # a bigger burst is room, not tokens
    clock.advance(3.0)
    assert grants(queue, "k") == 3


@pytest.mark.flow_limit
def test_reset_refills_and_remove_lifts_the_limit(queue: Queue, reopen: Any) -> None:
    """flow_limit: reset_rate_limit fills the bucket again; remove_rate_limit lifts the limit for good (every
    Queue on the path sees it); both say False for a key without a limit."""
    queue.set_rate_limit("k", "3/h")
    assert grants(queue, "k") == 3
    assert queue.reset_rate_limit("k") is True
    assert queue.remaining("k") == 3.0
    assert grants(queue, "k") == 3
    assert queue.reset_rate_limit("missing") is False
    assert queue.remove_rate_limit("k") is True
    assert queue.remove_rate_limit("k") is False
    other = reopen()
    assert other.rate_limits() == {}
    assert other.remaining("k") is None
    assert all(other.try_acquire("k") for _ in range(1000))
    assert queue.remaining("k") is None


@pytest.mark.flow_limit
def test_acquire_with_a_short_timeout_raises_rate_limited_at_once(
    queue: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flow_limit: acquire() takes a token when there is one; when the next one is further away than its
    timeout it raises RateLimited at once (no sleeping), with the exact retry_after, and takes nothing."""
    slept = sleep_on(clock, monkeypatch)
    queue.set_rate_limit("k", "4/s", burst=1)
    queue.acquire("k", timeout=0)
    clock.advance(0.0625)
    with pytest.raises(RateLimited) as caught:
        queue.acquire("k", timeout=0)
    assert caught.value.retry_after == 0.1875
    with pytest.raises(RateLimited) as caught:
        queue.acquire("k", timeout=0.1)
    assert caught.value.retry_after == 0.1875
    assert slept == []
    assert queue.remaining("k") == 0.25
    clock.advance(0.1875)
    queue.acquire("k", timeout=0)
    assert queue.remaining("k") == 0.0


@pytest.mark.flow_limit
def test_acquire_waits_for_the_next_token(
    queue: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flow_limit: acquire() without a timeout sleeps until the token is due (20/s, burst 1: 50 ms), then
    takes it. Its sleep moves the fake clock (a wall-clock bound on a loaded machine is no test)."""
    slept = sleep_on(clock, monkeypatch)
    queue.set_rate_limit("k", "20/s", burst=1)
    queue.acquire("k")
    assert slept == []
    queue.acquire("k")
    assert sum(slept) == pytest.approx(0.05, abs=1e-6)
    assert queue.remaining("k") == pytest.approx(0.0, abs=1e-6)


BAD_SPECS: list[tuple[Any, dict[str, Any]]] = [
    ("ten per second", {}),
    ("10/fortnight", {}),
    ("0/s", {}),
    ("-1/s", {}),
    ("10/s", {"burst": 0}),
    ("10/s", {"burst": -3}),
    ("10/s", {"burst": float("nan")}),
    ((5, 0), {}),
    ((0, 5), {}),
    ((5, float("inf")), {}),
    (float("inf"), {}),
    (True, {}),
    (None, {}),
    ([10, 1], {}),
]


@pytest.mark.flow_limit
@pytest.mark.parametrize(("spec", "options"), BAD_SPECS)
def test_bad_specs_raise_invalid_rate_and_write_nothing(
    queue: Queue, reopen: Any, spec: Any, options: dict[str, Any]
) -> None:
    """flow_limit (inv_7): a bad rate or burst raises InvalidRate, a ValueError, before anything is written:
    a new key stays unlimited, an existing limit keeps its rate and its tokens."""
    queue.set_rate_limit("k", "4/s")
    assert queue.try_acquire("k")
    for key in ("new", "k"):
        with pytest.raises(InvalidRate) as caught:
            queue.set_rate_limit(key, spec, **options)
        assert isinstance(caught.value, ValueError)
    other = reopen()
    assert other.rate_limits() == {"k": Rate(4, 1.0, 4)}
    assert other.remaining("k") == 3.0


@pytest.mark.flow_limit
@pytest.mark.parametrize("key", ["", "x" * 201, None, 7])
def test_bad_keys_raise_and_write_nothing(queue: Queue, key: Any) -> None:
    """flow_limit (inv_7): a key must be a non-empty str of at most 200 characters."""
    with pytest.raises(InvalidJob):
        queue.set_rate_limit(key, "1/s")
    with pytest.raises(InvalidJob):
        queue.try_acquire(key)
    assert queue.rate_limits() == {}


# ------------------------------------------------------------------------------------ rate-aware claiming


def assert_untouched(q: Queue, job_ids: list[int]) -> None:
    """Held back means never leased: pending, no attempt counted, no start time, no lease."""
    for job_id in job_ids:
        job = q.job(job_id)
        assert job is not None
        assert job.state is State.PENDING, job
        assert (job.attempts, job.retries, job.started_at, job.lease_until) == (0, 0, None, None), job


@pytest.mark.flow_rate_aware_claim
@pytest.mark.parametrize(
    ("key", "slow", "other"),
    [
        ("name:slow", {"name": "slow"}, {"name": "other"}),
        ("queue:slow", {"queue": "slow", "name": "a"}, {"queue": "default", "name": "a"}),
    ],
    ids=["name", "queue"],
)
def test_claim_takes_only_jobs_it_may_start(
    queue: Queue, clock: FakeClock, key: str, slow: dict[str, Any], other: dict[str, Any]
) -> None:
    """flow_rate_aware_claim: at 2/m, get() hands out exactly 2 of 5 limited jobs and every other job, then
    QueueEmpty; the 3 held back were never leased (pending, attempts 0, no start time). 30 s later exactly one
    more is allowed."""
    queue.set_rate_limit(key, "2/m")
    slow_ids = [queue.put(n, **slow) for n in range(5)]
    other_ids = [queue.put(n, **other) for n in range(3)]
    records = drain(queue)
    started = {record.job_id for record in records}
    assert set(other_ids) <= started
    assert len(started & set(slow_ids)) == 2
    assert len(records) == 5
    held = sorted(set(slow_ids) - started)
    assert_untouched(queue, held)
    assert {job.job_id for job in queue.jobs(State.RUNNING)} == started
    assert queue.stats()["running"] == 5
    assert queue.remaining(key) == 0.0
    clock.advance(29.9)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    clock.advance(0.1)
    record = queue.get(0)
    assert record.job_id in held
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert_untouched(queue, [job_id for job_id in held if job_id != record.job_id])


@pytest.mark.flow_rate_aware_claim
def test_store_wide_limit_holds_every_job(queue: Queue, clock: FakeClock) -> None:
    """flow_rate_aware_claim: a "*" limit covers every job of the store, whatever its queue or name."""
    queue.set_rate_limit("*", "2/m")
    ids = [queue.put(n, queue=f"q{n % 2}", name=f"t{n % 3}") for n in range(5)]
    started = [record.job_id for record in drain(queue)]
    assert len(started) == 2
    assert_untouched(queue, sorted(set(ids) - set(started)))
    clock.advance(30)
    assert len(drain(queue)) == 1
    assert queue.stats()["pending"] == 2


@pytest.mark.flow_rate_aware_claim
def test_a_job_pays_one_token_of_each_of_its_limits(queue: Queue) -> None:
    """flow_rate_aware_claim: a job under several limited keys (its queue, its name) takes one token from each
    when it starts, and starts only when each has one."""
    queue.set_rate_limit("queue:mail", "1/h", burst=2)
    queue.set_rate_limit("name:send", "1/h", burst=5)
    ids = [queue.put(n, queue="mail", name="send") for n in range(4)]
    other_task = queue.put("other", queue="mail", name="other")
    started = {record.job_id for record in drain(queue)}
    assert len(started) == 2 and started <= {*ids, other_task}
    assert queue.remaining("queue:mail") == 0.0
    assert queue.remaining("name:send") == 5.0 - len(started - {other_task})
    assert_untouched(queue, sorted({*ids, other_task} - started))


@pytest.mark.flow_rate_aware_claim
def test_a_held_back_higher_priority_job_does_not_stop_the_others(queue: Queue) -> None:
    """flow_rate_aware_claim (rule_priority's exception): a higher-priority job held back by its limit does
    not block lower-priority jobs of other keys; among the allowed jobs, priority order still holds."""
    queue.set_rate_limit("name:slow", "1/h")
    slow_ids = [queue.put(n, name="slow", priority=50) for n in range(2)]
    low = [queue.put("low", name="other", priority=-5) for _ in range(2)]
    mid = queue.put("mid", name="other", priority=10)
    plain = queue.put("plain", priority=0)
    order = [record.job_id for record in drain(queue)]
    assert order[0] in slow_ids  # the best job runs while it has a token
    assert order[1:3] == [mid, plain]
    assert sorted(order[3:]) == sorted(low)
    assert_untouched(queue, [job_id for job_id in slow_ids if job_id != order[0]])


@pytest.mark.flow_rate_aware_claim
def test_a_long_backlog_of_held_back_jobs_does_not_hide_the_others(
    make_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """flow_rate_aware_claim: a limited task's backlog (300 jobs from one put_many, ahead in the same queue
    and shard) does not starve a job of another task queued behind it: get() serves it."""
    with make_queue(shards=1) as q:
        q.set_rate_limit("name:slow", "1/h")
        backlog = q.put_many(list(range(300)), name="slow")
        other = q.put("other", name="other")
        assert q.get(0).job_id == backlog[0]
        record = q.get(0)
        assert record.job_id == other
        assert_untouched(q, backlog[1:])


@pytest.mark.flow_rate_aware_claim
def test_get_with_a_queue_filter_under_a_limit(queue: Queue) -> None:
    """flow_rate_aware_claim: get(queues=[...]) under limits serves only those queues, held back jobs
    stay untouched, and jobs of other queues are never touched either."""
    queue.set_rate_limit("name:slow", "1/h")
    a_slow = [queue.put(n, queue="a", name="slow") for n in range(3)]
    a_fast = [queue.put(n, queue="a", name="fast") for n in range(2)]
    b_jobs = [queue.put(n, queue="b", name="fast") for n in range(2)]
    started = {record.job_id for record in drain(queue, queues=["a"])}
    assert set(a_fast) <= started
    assert len(started & set(a_slow)) == 1
    assert len(started) == 3
    assert_untouched(queue, [*b_jobs, *sorted(set(a_slow) - started)])


@pytest.mark.flow_rate_aware_claim
def test_a_job_that_becomes_due_is_still_limited(queue: Queue, clock: FakeClock) -> None:
    """flow_rate_aware_claim: a scheduled job promoted by get() is admitted like any other."""
    queue.set_rate_limit("name:slow", "1/h")
    now_id = queue.put("now", name="slow")
    later = queue.put("later", name="slow", delay=5)
    assert queue.get(0).job_id == now_id
    clock.advance(5)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert_untouched(queue, [later])


@pytest.mark.flow_rate_aware_claim
def test_tokens_of_a_lost_claim_race_are_given_back(
    make_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """flow_rate_aware_claim: consumers racing for the same jobs each pay one token per job they got; a
    consumer that was admitted but lost the claim gives its token back (frozen clock: exact count)."""
    jobs, threads = 12, 4
    queues = [make_queue(shards=2) for _ in range(threads)]
    try:
        queues[0].set_rate_limit("name:slow", "1/h", burst=100)
        queues[0].put_many(list(range(jobs)), name="slow", partition_key="one shard")
        got: list[list[int]] = [[] for _ in range(threads)]
        barrier = threading.Barrier(threads)

        def consume(n: int) -> None:
            barrier.wait()
            got[n].extend(record.job_id for record in drain(queues[n]))

        workers = [threading.Thread(target=consume, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(10)
        claimed = [job_id for ids in got for job_id in ids]
        assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == jobs
        assert queues[0].remaining("name:slow") == 100 - jobs
    finally:
        for q in queues:
            q.close()


@pytest.mark.flow_rate_aware_claim
def test_a_waiting_get_wakes_when_its_token_is_due(make_queue: Callable[..., Queue]) -> None:
    """flow_rate_aware_claim: a get(timeout=) blocked only by a limit returns once the next token is due
    (20/s with a burst of 1: 50 ms), not at its next idle poll (1 s); real clock, bounded (the margin is for
    a loaded machine: CI runs two suites on two cores)."""
    with make_queue(clock=None) as q:
        q.set_rate_limit("name:slow", "20/s", burst=1)
        first, second = q.put(1, name="slow"), q.put(2, name="slow")
        taken = time.monotonic()  # before the first token is taken: the second is due 50 ms after it
        got = q.get(0)
        assert got.job_id in (first, second)
        result: list[Any] = []

        def consume() -> None:
            try:
                record = q.get(timeout=3)
                result.append((record.job_id, time.monotonic()))
            except QueueEmpty as exc:
                result.append(exc)

        waiter = threading.Thread(target=consume)
        waiter.start()
        waiter.join(5)
        assert not waiter.is_alive()
        job_id, returned = result[0]
        assert job_id == (second if got.job_id == first else first)
        assert 0.045 <= returned - taken < 0.95  # before the idle poll (1 s) would have found it


# ------------------------------------------------------------------------------ fast limits (the reserve)


def chunk_of(rate: float) -> int:
    """How many tokens one refill of the local reserve takes (flow.py's rule)."""
    return max(1, min(flow.RESERVE_MAX, int(rate * flow.RESERVE_SECONDS)))


@pytest.mark.flow_fast_limit
def test_a_fast_limit_drains_through_the_reserve(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """flow_fast_limit: at 100000/s, 500 jobs drain; every claim is paid from tokens taken from the shared
    bucket (in reserve chunks, not one transaction per job), and the bucket shows exactly what was taken."""
    burst = 100_000
    queue.set_rate_limit("*", "100000/s")
    takes: list[int] = []
    given: list[int] = []
    take_up_to = queue._store.control.take_up_to

    def spy(key: str, most: int, *, give_back: int = 0) -> int:
        got = take_up_to(key, most, give_back=give_back)
        takes.append(got)
        given.append(give_back)
        return got

    monkeypatch.setattr(queue._store.control, "take_up_to", spy)
    # The reserve goes stale after RESERVE_TTL of the wall's monotonic clock; on a loaded machine a claim can
    # take longer than that (a PostgreSQL one under CI's load did), which would refill it at every claim:
    # here that clock stands still, so what is counted is the chunking, not the machine's speed.
    monkeypatch.setattr(flow, "time", SimpleNamespace(monotonic=lambda: 0.0, sleep=time.sleep))
    queue.put_many(list(range(500)))
    records = drain(queue)
    assert len(records) == 500
    for record in records:
        record.ack()
    assert queue.stats()["done"] == 500
    spent = burst - queue.remaining("*")
    assert spent == sum(takes) - sum(given)  # stale reserve tokens go back to the bucket
    assert 500 <= spent <= 500 + chunk_of(100_000) * len(takes)
    assert len(takes) < 100  # the fast path: far fewer shared transactions than jobs


@pytest.mark.flow_fast_limit
@pytest.mark.parametrize("key", ["*", "name:fast"])
def test_a_fast_limit_never_hands_out_more_than_its_bucket(queue: Queue, clock: FakeClock, key: str) -> None:
    """flow_fast_limit: 300/s with a burst of 300 on a frozen clock: one consumer claims at most 300 jobs
    (the reserve never creates tokens), nearly all of them (the rate is usable); the rest stay untouched.
    0.1 s later, at most 30 more."""
    queue.set_rate_limit(key, "300/s", burst=300)
    ids = queue.put_many(list(range(400)), name="fast")
    claimed = drain(queue)
    assert 270 <= len(claimed) <= 300
    assert_untouched(queue, sorted(set(ids) - {record.job_id for record in claimed}))
    assert queue.remaining(key) < 1
    clock.advance(0.1)
    assert len(drain(queue)) <= 30


@pytest.mark.flow_fast_limit
def test_threads_of_one_queue_never_exceed_a_fast_bucket(queue: Queue, clock: FakeClock) -> None:
    """flow_fast_limit: consumer threads sharing one Queue (one local reserve) on a frozen clock claim at most
    the burst of a 300/s limit together, round after round."""
    threads = 4
    for round_ in range(3):
        queue.set_rate_limit("*", "300/s", burst=300)
        queue.reset_rate_limit("*")
        queue.purge(State.PENDING)
        queue.put_many(list(range(400)))
        counts: list[int] = []
        barrier = threading.Barrier(threads)

        def consume(barrier: threading.Barrier, counts: list[int]) -> None:
            barrier.wait()
            counts.append(len(drain(queue)))

        workers = [threading.Thread(target=consume, args=(barrier, counts)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(10)
        assert sum(counts) <= 300, f"round {round_}: {threads} threads claimed {counts} = {sum(counts)} jobs"
