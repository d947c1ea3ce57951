"""``Queue.pending_ages()`` (the store's ``oldest_pending``): per queue, how long its longest-waiting pending
job has been ready to claim, on both stores, through every priority in use and every shard, and after the
jobs that were oldest leave."""

from __future__ import annotations

from collections.abc import Callable

from queue_max_django.engine import Queue
from tests.engine.conftest import FakeClock


def test_the_oldest_waiting_job_of_each_queue_whatever_its_priority(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=3) as q:
        assert q.pending_ages() == {}
        q.put("oldest", queue="mail", priority=-100)  # the lowest priority holds the oldest job
        clock.advance(5)
        q.put_many(["high"] * 4, queue="mail", priority=100)  # several shards, several priorities
        q.put("middle", queue="mail", priority=7)
        q.put("r", queue="reports")
        clock.advance(3)
        q.put("later", queue="mail", delay=1)  # scheduled: not waiting yet
        assert q.pending_ages() == {"mail": 8.0, "reports": 3.0}

        for _ in range(5):  # the high and middle jobs run first: the oldest one still waits
            q.get(timeout=0, queues=["mail"]).ack()
        assert q.pending_ages() == {"mail": 8.0, "reports": 3.0}
        q.get(timeout=0, queues=["mail"]).ack()  # now the oldest
        assert q.pending_ages() == {"reports": 3.0}

        clock.advance(2)
        assert q.promote() == 1  # the delayed job became ready 1 s ago, at its ETA
        assert q.pending_ages() == {"mail": 1.0, "reports": 5.0}
        assert q.stats()["pending"] == 2  # what the ages stand for: the pending jobs


def test_a_released_job_waits_from_its_release(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    with make_queue() as q:
        q.put("x")
        clock.advance(10)
        record = q.get(timeout=0)
        assert q.pending_ages() == {}  # running is not waiting
        clock.advance(4)
        record.release()
        clock.advance(1)
        ages = q.pending_ages()
        assert list(ages) == ["default"]
        assert 0.0 <= ages["default"] <= 15.0  # at the front again: a store may keep its ready time
