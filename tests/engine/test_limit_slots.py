"""Concurrency limits' slots (issue 31) through the ``Queue``, on every store kind: a running limited job
that leaves the running state by being quarantined (its record found undecodable at its completion or at
its lease's recovery) gives its slot back, so the next job of its key starts. (A store whose records cannot
be garbled skips: ``StoreProbe.break_record``.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State

from .conftest import FakeClock
from .probes import StoreProbe

LIMIT = (("task:t", 1),)


def running(queue: Queue) -> int:
    return queue.concurrency_limits().get("task:t", {}).get("running", 0)


@pytest.mark.parametrize("ended_by", ["ack", "recovery"])
def test_a_quarantined_running_job_gives_its_slot_back(
    queue: Queue, probe: Callable[[Queue], StoreProbe], clock: FakeClock, ended_by: str
) -> None:
    first = queue.put("first", concurrency=LIMIT)
    second = queue.put("second", concurrency=LIMIT)
    record = queue.get(timeout=0)
    assert record.job_id == first
    assert running(queue) == 1
    probe(queue).break_record(first, "garbage-record")
    if ended_by == "ack":
        with pytest.raises(QueueCorrupted):
            record.ack()
    else:
        clock.advance(queue.lease_time + 1)
        queue.recover()
    broken = queue.job(first)
    assert broken is not None and broken.state is State.FAILED and broken.error_type == "Corrupted"
    assert running(queue) == 0
    nxt = queue.get(timeout=0)
    assert nxt.job_id == second
    nxt.ack()


def test_a_batch_of_acks_with_a_broken_record_gives_every_slot_back_once(
    queue: Queue, probe: Callable[[Queue], StoreProbe]
) -> None:
    """``ack_many`` of limited jobs, one of which is quarantined on the way: the slots of the others and
    of the broken one come back, none twice (the next jobs start up to the limit, not over it)."""
    limit = (("task:t", 3),)
    first = [queue.put(f"first {n}", concurrency=limit) for n in range(3)]
    later = [queue.put(f"later {n}", concurrency=limit) for n in range(4)]
    records = queue.get_many(3, timeout=0)
    assert sorted(r.job_id for r in records) == sorted(first)
    probe(queue).break_record(records[1].job_id, "garbage-record")
    queue.ack_many([(record, None) for record in records])
    assert running(queue) == 0
    taken = queue.get_many(10, timeout=0)
    with pytest.raises(QueueEmpty):
        queue.get_many(10, timeout=0)  # the limit is full again: the fourth waits
    assert len(taken) == 3 and running(queue) == 3
    assert {r.job_id for r in taken} <= set(later)


def test_a_stray_entry_at_a_groups_head_is_dropped_and_the_group_goes_on(
    queue: Queue, probe: Callable[[Queue], StoreProbe], store_kind: str
) -> None:
    """LMDB: a waiting entry of a limit's group whose job is no longer pending (an entry left by damage) is
    dropped by the limited claim, which takes the group's next job (it stopped there, for every claim)."""
    if store_kind != "lmdb":
        pytest.skip("an index entry apart from its job is LMDB's: the other stores keep no such entries")
    from queue_max_django.engine.concurrency import group_of
    from queue_max_django.engine.stores.lmdb import keys

    done = queue.put("done", name="t", concurrency=LIMIT)
    queue.get(timeout=0).ack()
    waiting = queue.put("waiting", name="t", concurrency=LIMIT)
    stray = keys.ready_key(keys.group_head(group_of("default", LIMIT)), 100, 1, done)  # before it
    with probe(queue)._txn(done, write=True) as (txn, dbs):  # type: ignore[attr-defined]
        txn.put(stray, b"t", db=dbs["ready"])
    record = queue.get(timeout=0)
    assert record.job_id == waiting
    record.ack()
    job = queue.job(done)
    assert job is not None and job.state is State.DONE


def test_a_broken_waiting_job_met_by_a_batch_claim_does_not_charge_the_batch_twice(
    queue: Queue, probe: Callable[[Queue], StoreProbe], clock: FakeClock
) -> None:
    """A limited claim that takes a job and then meets a waiting job of the group whose record does not
    decode (quarantined in the claim's transaction, the running counts recounted from the running records,
    the job just taken among them) charges the job it took once: the stored count is the jobs running, and
    after they end (acked or recovered) it is 0, so the key's next jobs start up to its limit again."""
    limit = (("task:t", 3),)
    earlier = queue.put("earlier", concurrency=limit)
    first = queue.get(timeout=0)  # a slot in use before the batch: the claim's quarantine recounts
    assert first.job_id == earlier
    taken, broken = queue.put("taken", concurrency=limit), queue.put("broken", concurrency=limit)
    later = [queue.put(f"later {n}", concurrency=limit) for n in range(3)]
    probe(queue).break_record(broken, "garbage-record")
    batch = queue.get_many(3, timeout=0)
    assert batch[0].job_id == taken
    held = queue.job(broken)
    assert held is not None and held.state is State.FAILED and held.error_type == "Corrupted"
    assert running(queue) == 1 + len(batch)
    first.ack()
    clock.advance(queue.lease_time + 1)
    queue.recover()  # the batch's leases expired: back to waiting, their slots with them
    assert running(queue) == 0
    again = [queue.get(timeout=0) for _ in range(3)]  # recovered: each claimed alone next
    assert running(queue) == 3
    with pytest.raises(QueueEmpty):
        queue.get(timeout=0)  # the limit is full: the last one waits
    assert {r.job_id for r in again} <= {taken, *later}


def test_a_broken_waiting_limited_job_leaves_its_queue_counted_right(
    queue: Queue, probe: Callable[[Queue], StoreProbe]
) -> None:
    """A limited job waiting (LMDB: under its group's head in the ready index, not its queue's) whose
    record does not decode is quarantined by the claim that meets it: its queue's pending count loses it,
    and the counts read back (no count under the group's head, whose bytes are not text)."""
    broken = queue.put("broken", queue="media", concurrency=LIMIT)
    fine = queue.put("fine", queue="media", concurrency=LIMIT)
    assert queue.queue_counts()["media"]["pending"] == 2
    probe(queue).break_record(broken, "garbage-record")
    record = queue.get(timeout=0)
    assert record.job_id == fine
    job = queue.job(broken)
    assert job is not None and job.state is State.FAILED and job.error_type == "Corrupted"
    counts = queue.queue_counts()
    assert counts.get("media", {}).get("pending", 0) == 0, counts
    assert set(counts) <= {"media", "default"}, counts
    record.ack()
    assert running(queue) == 0
