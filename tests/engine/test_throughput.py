"""The throughput history (engine/throughput.py) on both stores, on a fake clock: the store-wide totals of
jobs ever done and ever dead-lettered (``finished_totals``) only grow, whatever removes jobs afterwards; a
sample per minute, the first of several samplers wins; the ring keeps ``KEEP`` minutes; the history's
per-minute differences, with gaps where no sample was taken."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, State
from queue_max_django.engine.stores.types import Sample
from queue_max_django.engine.throughput import (
    KEEP,
    WINDOW,
    Point,
    Sampler,
    enqueued_totals,
    history,
    minute_of,
    per_minute,
    take_sample,
)
from tests.engine.conftest import FakeClock


def finish(q: Queue, done: int, failed: int) -> None:
    for _ in range(done):
        q.get(timeout=0).ack()
    for _ in range(failed):
        q.get(timeout=0).nack("boom", permanent=True)


def test_the_totals_of_jobs_ever_done_and_dead_lettered_only_grow(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=2, result_ttl=10) as q:
        store = q._live()
        assert store.finished_totals() == (0, 0)
        ids = q.put_many(list(range(4))) + q.put_many(list(range(4)))
        finish(q, done=5, failed=3)
        assert store.finished_totals() == (5, 3) == (q.stats()["done"], q.stats()["failed"])

        dead = [job.job_id for job in q.jobs(State.FAILED)]
        assert q.requeue(dead[0])  # a dead letter back to pending: it was dead-lettered all the same
        assert q._live().delete(q.now(), dead[1], None)  # deleted
        done_ids = [job.job_id for job in q.jobs(State.DONE)]
        assert q._live().delete(q.now(), done_ids[0], None)
        clock.advance(20)
        assert q.vacuum() == 4  # the other done jobs, past their result ttl
        assert q.stats()["done"] == 0 and q.stats()["failed"] == 1
        assert store.finished_totals() == (5, 3)

        q.get(timeout=0).nack("again", permanent=True)  # the requeued job fails again: counted again
        assert q.purge(State.FAILED) == 2
        assert store.finished_totals() == (5, 4)
        assert q.stats()["failed"] == 0 and len(ids) == 8


def test_one_sample_a_minute_whoever_takes_it(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    clock.now = 1_700_000_020.0  # 20 s before a minute starts
    first, second = make_queue(), make_queue()  # two samplers of one store (two supervisors)
    first.put_many([1, 2, 3])
    clock.advance(10)
    finish(first, done=1, failed=1)
    assert take_sample(first)
    assert not take_sample(second)  # the same minute: the first one's stays
    minute = minute_of(clock.now)
    assert first._live().samples(minute) == [Sample(minute, 1, 1, 10.0)]

    clock.advance(20)  # the next minute
    finish(second, done=1, failed=0)
    assert take_sample(second)
    assert not take_sample(first)
    assert second._live().samples(minute) == [Sample(minute, 1, 1, 10.0), Sample(minute + 1, 2, 1, 0.0)]
    assert [p for p in history(first) if p.done is not None] == [Point(minute + 1, 1, 0, 0.0)]


def test_the_ring_keeps_its_minutes_and_the_history_has_its_gaps(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    q = make_queue()
    sampler = Sampler(q)
    start = minute_of(clock.now)
    for minute in range(KEEP + 11):  # the last one sampled
        if minute % 7 != 3:  # no worker ran in these minutes
            q.put(minute)
            finish(q, done=1, failed=0)
            assert sampler.tick()
            assert not sampler.tick()  # at most once a minute
        clock.advance(60)
    clock.advance(-60)
    end = minute_of(clock.now)
    kept = q._live().samples(0)
    assert kept[0].minute >= end - KEEP and kept[-1].minute == end
    assert len(kept) <= KEEP + 1
    assert all(s.minute >= start for s in kept)

    points = history(q)
    assert len(points) == WINDOW and points[-1].minute == end
    for point in points:
        offset = point.minute - start
        if offset % 7 == 3:
            assert (point.done, point.lag) == (None, None)  # no sample
        elif (offset - 1) % 7 == 3:
            assert point.done is None and point.lag == 0.0  # no sample the minute before
        else:
            assert (point.done, point.failed, point.lag) == (1, 0, 0.0)


def test_per_minute_with_zero_data_one_sample_and_a_reset() -> None:
    assert per_minute([], end=100, minutes=3) == [Point(m, None, None, None) for m in (98, 99, 100)]
    assert per_minute([Sample(100, 5, 2, 1.5)], end=100, minutes=2) == [
        Point(99, None, None, None),
        Point(100, None, None, 1.5),
    ]
    samples = [Sample(97, 10, 1, 0.0), Sample(98, 12, 1, 0.0), Sample(99, 3, 0, 0.0), Sample(100, 4, 0, 2.0)]
    assert per_minute(samples, end=100, minutes=3) == [
        Point(98, 2, 0, 0.0),
        Point(99, None, None, 0.0),  # the totals fell: a store emptied or replaced, not -9 jobs
        Point(100, 1, 0, 2.0),
    ]


def test_a_sample_that_fails_is_logged_not_raised(
    clock: FakeClock, make_queue: Callable[..., Queue], caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue()
    sampler = Sampler(q)
    q.close()  # every store operation now raises QueueClosed
    with caplog.at_level(logging.WARNING, logger="queue_max_django.engine"):
        assert sampler.tick()
    assert "throughput sample" in caplog.text
    assert not sampler.tick()  # the next try is the next minute's
    caplog.clear()
    clock.advance(60)
    with caplog.at_level(logging.WARNING, logger="queue_max_django.engine"):
        assert sampler.tick()
    assert caplog.text == ""  # still failing: said once


def test_jobs_ever_put_into_each_queue(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    with make_queue(shards=3) as q:
        assert enqueued_totals(q) == {}
        q.put(1, queue="mail")
        q.put(2, queue="mail", delay=60)  # scheduled: put all the same
        q.put_many(list(range(5)), queue="reports")  # one shard
        for n in range(4):  # one shard after another
            q.put(n, queue="reports")
        finish(q, done=3, failed=1)
        assert q.purge(State.PENDING) > 0  # removing jobs takes nothing back
        assert enqueued_totals(q) == {"mail": 2, "reports": 9}
        assert sum(enqueued_totals(q).values()) == q.stats()["total"] == 11
        assert q.verify() == []


@pytest.mark.lmdb
def test_an_lmdb_queues_total_of_puts_lives_in_its_counts_and_survives_their_rebuild(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """The LMDB store counts a queue's puts in the queue counts value its put writes anyway (no write of its
    own on the put path): the value stays when nothing waits, a rebuild of the counts keeps it, and a value
    written before the totals (two counts, no total) reads as a total of 0 and counts on from there."""
    from queue_max_django.engine.stores.lmdb.access import QUEUE_COUNTS, QUEUE_COUNTS_KEY, counts_inexact

    with make_queue(shards=1) as q:
        q.put_many(["x"] * 3, queue="mail")
        finish(q, done=3, failed=0)
        assert q.queue_counts() == {} and enqueued_totals(q) == {"mail": 3}  # nothing waits: no counts row
        shard = q._store._shards[0]
        with shard.env.env.begin(write=True) as txn:
            counts_inexact(shard, txn)  # as a quarantined record leaves them
            txn.put(QUEUE_COUNTS_KEY + b"old", QUEUE_COUNTS.pack(0, 0), db=shard.jobs)  # a value from before
        q.put("y", queue="mail")
        assert q.queue_counts() == {"mail": {"pending": 1, "scheduled": 0, "running": 0}}  # rebuilt
        assert enqueued_totals(q) == {"mail": 4}
        q.put("z", queue="old")
        assert enqueued_totals(q) == {"mail": 4, "old": 1}
        assert q.verify() == []
