"""Per-queue counts (``Queue.queue_counts()``) come from counters that every state change keeps in its own
transaction: O(queues), equal to a count of the jobs in every situation, rebuilt once where they are not
known to be exact (a store from before them, a quarantined record whose queue could not be read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, State
from queue_max_django.engine.stores.lmdb.access import QUEUE_COUNTS_KEY
from tests.engine.conftest import FakeClock
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]


def counted(q: Queue) -> dict[str, dict[str, int]]:
    """What queue_counts() should say: every job read, one by one."""
    out: dict[str, dict[str, int]] = {}
    for state in (State.PENDING, State.SCHEDULED, State.RUNNING):
        after = None
        while True:
            page = q.jobs(state, after=after, limit=500)
            for job in page:
                into = out.setdefault(job.queue, {"pending": 0, "scheduled": 0, "running": 0})
                into[state.value] += 1
            if len(page) < 500:
                break
            after = page[-1].job_id
    return dict(sorted(out.items()))


def test_every_state_change_keeps_the_counts(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    with make_queue(shards=2, lease_time=5, max_retries=1) as q:
        assert q.queue_counts() == {}
        ids = q.put_many(["a"] * 5, queue="mail")
        q.put_many(["b"] * 3, queue="mail", delay=10)
        q.put("c", queue="reports")
        q.put("d", queue="reports", delay=30)
        steps: list[tuple[str, Any]] = [
            ("claim a batch", lambda: q.get_many(3, timeout=0, queues=["mail"])),
            ("ack one", lambda: q.get(timeout=0, queues=["mail"]).ack()),
            ("nack to a retry", lambda: q.get(timeout=0, queues=["mail"]).nack("x", delay=1)),
            ("release", lambda: q.get(timeout=0, queues=["reports"]).release()),
            ("touch", lambda: [r.touch() for r in q.get_many(2, timeout=0, queues=["reports"])]),
            ("promote", lambda: (clock.advance(11), q.promote())),
            ("recover", lambda: (clock.advance(6), q.recover())),
            ("ack_many", lambda: q.ack_many([(r, None) for r in q.get_many(4, timeout=0)])),
            ("fail for good", lambda: q.get(timeout=0).nack("x", permanent=True)),
            ("requeue", lambda: q.requeue(q.dead_letters()[0].job_id)),
            ("cancel", lambda: q.cancel(q.jobs(State.PENDING)[0].job_id)),
            ("delete", lambda: q.delete(q.jobs(State.SCHEDULED)[0].job_id)),
            ("claim by id", lambda: q.claim(q.jobs(State.PENDING)[0].job_id)),
            ("purge", lambda: q.purge(State.PENDING)),
        ]
        assert q.queue_counts() == counted(q)
        for what, step in steps:
            step()
            assert q.queue_counts() == counted(q), what
            assert q.verify() == [], what
        assert ids


def test_the_counts_are_read_without_a_walk(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """O(queues): the answer comes from the counters alone; a record changed behind the engine's back is
    not even read (verify() says the counters disagree with it)."""
    with make_queue(shards=1) as q:
        q.put_many(["x"] * 1000, queue="bulk")
        assert q.queue_counts() == {"bulk": {"pending": 1000, "scheduled": 0, "running": 0}}
        job_id = q.jobs(State.PENDING, limit=1)[0].job_id  # one job vanishes without its counters knowing
        probe(q).drop_entry(job_id, State.PENDING)
        probe(q).drop_entry(job_id, "record")
        assert q.queue_counts()["bulk"]["pending"] == 1000
        assert any("counts of queue 'bulk'" in problem for problem in q.verify())


@pytest.mark.lmdb  # where LMDB keeps its counters
def test_a_store_without_counters_rebuilds_them_once(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """A store written before the counters existed (no counter keys at all) gets them on the first
    queue_counts(), exact, and keeps them from then on."""
    with make_queue(shards=2, lease_time=5) as q:
        q.put_many(["x"] * 10, queue="a")
        q.put_many(["y"] * 4, queue="b", delay=60)
        q.get_many(3, timeout=0, queues=["a"])
        for shard in q._store._shards:  # as the previous version left it
            with shard.env.env.begin(write=True) as txn:
                cursor = txn.cursor(db=shard.jobs)
                stale = []
                if cursor.set_range(QUEUE_COUNTS_KEY):
                    stale = [bytes(k) for k in cursor.iternext(values=False)]
                for key in stale:
                    txn.delete(key, db=shard.jobs)
        expected = {"a": {"pending": 7, "scheduled": 0, "running": 3},
                    "b": {"pending": 0, "scheduled": 4, "running": 0}}  # fmt: skip
        assert q.queue_counts() == expected == counted(q)
        assert q.verify() == []
        q.get(timeout=0, queues=["a"]).ack()
        expected["a"] = {"pending": 6, "scheduled": 0, "running": 3}
        assert q.queue_counts() == expected


@pytest.mark.parametrize("state", ["scheduled", "running"])
def test_a_record_whose_queue_cannot_be_read_makes_the_counts_rebuild(
    clock: FakeClock, state: str, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=1, lease_time=5) as q:
        q.put_many(["x"] * 3, queue="a")
        bad = q.put("bad", queue="b", delay=5 if state == "scheduled" else None)
        if state == "running":
            q.claim(bad)
        probe(q).break_record(bad, "garbage-record")
        clock.advance(6)  # due, or its lease expired
        if state == "scheduled":
            q.promote()
        else:
            q.recover()
        job = q.job(bad)
        assert job is not None and job.state is State.FAILED and job.error_type == "Corrupted"
        assert q.queue_counts() == {"a": {"pending": 3, "scheduled": 0, "running": 0}} == counted(q)
        assert q.verify() == []


def test_a_claim_that_quarantines_keeps_the_counts(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=1) as q:
        bad = q.put("bad", priority=5)
        q.put_many(["x"] * 2)
        probe(q).break_record(bad, "garbage-record")
        with pytest.raises(QueueCorrupted):
            q.get(timeout=0)
        assert q.queue_counts() == {"default": {"pending": 2, "scheduled": 0, "running": 0}} == counted(q)
        assert q.verify() == []
