"""A job that kills its worker must not take the rest of its batch with it.

A worker claims short jobs in batches (``get_many``); a process killed while it runs one of them loses the
leases of the whole batch. Recovery charges no attempt to a job claimed in a batch: it goes back to
pending, at its place, and the next claim takes it alone. A job claimed alone is charged as before (a lease
that expires counts as a failed attempt), so a job that kills every worker still ends in the dead letters,
after ``max_retries + 1`` charged attempts, and no healthy job of its batches is charged at all.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, QueueEmpty, State
from tests.engine.conftest import FakeClock
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]

LEASE = 5.0


def test_a_batch_whose_lease_expired_comes_back_uncharged_in_its_place(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=1, lease_time=LEASE) as q:
        ids = q.put_many(list(range(6)))
        later = q.put("later")
        assert [r.job_id for r in q.get_many(6, timeout=0)] == ids
        clock.advance(LEASE + 0.1)
        assert q.recover() == 6
        assert [job.job_id for job in q.jobs(State.PENDING)] == [*ids, later]  # their old places
        for job_id in ids:
            job = q.job(job_id)
            assert job is not None and job.state is State.PENDING
            assert (job.retries, job.errors, job.error) == (0, (), None)
        assert q.verify() == []


def test_a_job_back_from_a_batch_is_claimed_alone_then_batches_resume(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=1, lease_time=LEASE) as q:
        ids = q.put_many(list(range(4)))
        fresh = q.put_many(list(range(4, 8)))
        q.get_many(4, timeout=0)
        clock.advance(LEASE + 0.1)
        assert q.recover() == 4
        for job_id in ids:  # each back-from-a-batch job alone, in order, however big the claim
            assert [r.job_id for r in q.get_many(64, timeout=0)] == [job_id]
        assert [r.job_id for r in q.get_many(64, timeout=0)] == fresh  # the others in a batch again


def test_a_batch_stops_before_a_job_that_must_be_claimed_alone(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    with make_queue(shards=1, lease_time=LEASE) as q:
        first = q.put("first", priority=1)
        suspect = q.put("suspect")
        q.get_many(2, timeout=0)  # claims both: a batch
        clock.advance(LEASE + 0.1)
        q.recover()
        q.get(timeout=0).ack()  # "first", alone
        before = q.put("before", priority=1)
        assert [r.job_id for r in q.get_many(10, timeout=0)] == [before]  # stops before the suspect
        assert [r.job_id for r in q.get_many(10, timeout=0)] == [suspect]
        assert q.job(first) is not None


def test_an_expired_lease_of_a_job_claimed_alone_is_charged(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """DESIGN: a lease that expires counts as a failed attempt: for a job claimed alone, as before."""
    with make_queue(shards=1, lease_time=LEASE, max_retries=1) as q:
        job_id = q.put("x")
        for expected in (State.PENDING, State.FAILED):
            assert q.get_many(8, timeout=0)[0].job_id == job_id
            clock.advance(LEASE + 0.1)
            assert q.recover() == 1
            job = q.job(job_id)
            assert job is not None and job.state is expected
        assert job.retries == 2 and job.error_type == "LeaseExpired"
        with pytest.raises(QueueEmpty):
            q.get(timeout=0)


def test_the_claim_mode_is_stored_in_the_record(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """What recovery decides from is on disk: a batch's records say CLAIM_BATCH, a lone claim's do not."""
    with make_queue(shards=1, lease_time=LEASE) as q:
        pair = q.put_many(["a", "b"])
        lone = q.put("c")
        q.get_many(2, timeout=0)
        q.get_many(5, timeout=0)

        def claim_mode(job_id: int) -> object:
            stored = probe(q).stored(job_id)
            assert stored is not None
            return stored.claim

        assert [claim_mode(j) for j in pair] == ["batch", "batch"]
        assert claim_mode(lone) is None
        clock.advance(LEASE + 0.1)
        q.recover()
        assert {claim_mode(j) for j in [*pair, lone]} == {"alone-next"}


@pytest.mark.parametrize("max_retries", [0, 3])
def test_a_poison_job_is_dead_lettered_and_charges_no_healthy_job(
    clock: FakeClock, max_retries: int, make_queue: Callable[..., Queue]
) -> None:
    """A worker that claims batches of 64 and dies whenever it starts the poison job: the poison job ends
    failed after max_retries + 1 charged attempts; every healthy job is done, none charged an attempt."""
    with make_queue(shards=1, lease_time=LEASE, max_retries=max_retries) as q:
        healthy = q.put_many(list(range(150)))
        poison = q.put("poison")
        healthy += q.put_many(list(range(150, 300)))
        crashes = 0
        while True:
            try:
                batch = q.get_many(64, timeout=0)
            except QueueEmpty:
                clock.advance(LEASE + 0.1)
                if q.recover() == 0:
                    break
                continue
            for record in batch:
                if record.job_id == poison:
                    crashes += 1
                    break  # the process is gone: this record and those after it are never finished
                record.ack()
        job = q.job(poison)
        assert job is not None and job.state is State.FAILED
        assert job.retries == max_retries + 1 and job.error_type == "LeaseExpired"
        assert crashes == max_retries + 2  # the batch's crash was not charged
        for job_id in healthy:
            done = q.job(job_id)
            assert done is not None and done.state is State.DONE and done.retries == 0, done
        assert q.stats()["failed"] == 1
        assert q.verify() == []
