"""Batches: ``Queue.get_many`` claims several jobs of one shard in one transaction, ``Queue.ack_many``
acknowledges many records with one transaction per shard.

The rules proved here: a batch is the shard's next jobs in claim order and never holds a job below a priority
another shard holds (DESIGN.md's priority rule); every record of a batch is an ordinary record with its own
lease; a holder killed with its batch loses every job of it to recovery (invariant 2); ack_many stores each
result, skips stale or finished records while completing the others, and refuses an unencodable result before
anything is written (invariant 7).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import (
    JOB_STARTED,
    JOB_SUCCEEDED,
    InvalidJob,
    Job,
    PayloadNotSerializable,
    PayloadTooLarge,
    Queue,
    QueueCorrupted,
    QueueEmpty,
    Record,
    State,
)
from queue_max_django.engine.codec import Packed
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import LmdbProbe, StoreProbe
from tests.engine.procs import CHILD_TIMEOUT, Children, Log, kill, read_lines, wait_for

Probe = Callable[[Queue], StoreProbe]


def pending_by_shard(q: Queue) -> dict[int, list[Job]]:
    """Each shard's pending jobs in the order get() takes them (jobs() lists pending in claim order)."""
    out: dict[int, list[Job]] = defaultdict(list)
    for job in q.jobs(State.PENDING, limit=10_000):
        out[job.shard].append(job)
    return out


def state_of(q: Queue, job_id: int) -> State:
    job = q.job(job_id)
    assert job is not None
    return job.state


# ------------------------------------------------------------------------------------------ get_many


@pytest.mark.rule_fifo
def test_get_many_claims_the_next_jobs_of_one_shard_in_claim_order(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_fifo: get_many(n) returns the first n jobs of the shard in put order, each running on disk."""
    with make_queue(shards=1) as q:
        ids = q.put_many([{"n": n} for n in range(10)])
        batch = q.get_many(4, timeout=0)
        assert [r.job_id for r in batch] == ids[:4]
        assert [r.payload for r in batch] == [{"n": n} for n in range(4)]
        assert all(state_of(q, job_id) is State.RUNNING for job_id in ids[:4])
        assert all(state_of(q, job_id) is State.PENDING for job_id in ids[4:])
        rest = q.get_many(100, timeout=0)  # fewer left than the limit: all of them, no error
        assert [r.job_id for r in rest] == ids[4:]
        with pytest.raises(QueueEmpty):
            q.get_many(5, timeout=0)
        assert q.stats()["running"] == 10
        assert q.verify() == []


@pytest.mark.rule_priority
def test_get_many_takes_higher_priorities_first_within_the_shard(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_priority, rule_fifo: inside one shard a batch goes by priority, then FIFO."""
    with make_queue(shards=1) as q:
        low = q.put_many(["low"] * 3, priority=-5)
        high = q.put_many(["high"] * 2, priority=7)
        mid = q.put_many(["mid"] * 2, priority=0)
        batch = q.get_many(10, timeout=0)
        assert [r.job_id for r in batch] == high + mid + low
        assert [r.priority for r in batch] == [7, 7, 0, 0, -5, -5, -5]


@pytest.mark.rule_priority
@pytest.mark.lmdb  # several shards
def test_get_many_never_takes_a_job_below_a_priority_another_shard_holds(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_priority: with jobs of several priorities spread over the shards, every batch comes from one
    shard, is that shard's next jobs in claim order, and holds no job below the best priority waiting in any
    other shard at the time of the claim. In the end every job was claimed exactly once."""
    rng = random.Random(7)
    with make_queue(shards=4) as q:
        put: set[int] = set()
        for _ in range(24):
            shard = rng.randrange(4)
            priority = rng.choice([-3, 0, 0, 2, 5])
            put.update(q.put_many_to_shard(shard, ["x"] * rng.randint(1, 6), priority=priority))
        claimed: list[int] = []
        batches = 0
        while True:
            before = pending_by_shard(q)
            try:
                batch = q.get_many(rng.randint(1, 12), timeout=0)
            except QueueEmpty:
                break
            batches += 1
            shards = {r.job_id & 0xFF for r in batch}
            assert len(shards) == 1, "a batch spans one shard"
            shard = shards.pop()
            assert [r.job_id for r in batch] == [j.job_id for j in before[shard][: len(batch)]]
            best_elsewhere = max((j.priority for s, jobs in before.items() if s != shard for j in jobs),
                                 default=None)  # fmt: skip
            if best_elsewhere is not None:
                assert min(r.priority for r in batch) >= best_elsewhere, (
                    f"batch of shard {shard} took priority {min(r.priority for r in batch)} while another "
                    f"shard held {best_elsewhere}"
                )
            claimed += [r.job_id for r in batch]
        assert sorted(claimed) == sorted(put)
        assert batches > 4
        assert q.verify() == []


@pytest.mark.rule_priority
@pytest.mark.lmdb  # several shards
def test_get_many_stops_at_the_priority_of_the_other_shards(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_priority: a shard holding 5, 5, 1 next to a shard holding 3 gives [5, 5] only (the 1 waits for
    the 3), then the 3, then the 1."""
    with make_queue(shards=2) as q:
        fives = q.put_many_to_shard(0, ["a", "b"], priority=5)
        one = q.put_many_to_shard(0, ["c"], priority=1)
        three = q.put_many_to_shard(1, ["d"], priority=3)
        assert [r.job_id for r in q.get_many(10, timeout=0)] == fives
        assert [r.job_id for r in q.get_many(10, timeout=0)] == three
        assert [r.job_id for r in q.get_many(10, timeout=0)] == one


@pytest.mark.rule_named_queues
def test_get_many_serves_only_the_named_queues(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rule_named_queues: get_many(queues=[...]) never takes a job of another queue."""
    with make_queue(shards=1) as q:
        mail = q.put_many(["m"] * 3, queue="mail")
        q.put_many(["r"] * 3, queue="reports", priority=9)
        batch = q.get_many(10, timeout=0, queues=["mail"])
        assert [r.job_id for r in batch] == mail
        assert {r.queue for r in batch} == {"mail"}
        assert q.queue_counts()["reports"]["pending"] == 3


@pytest.mark.rule_priority
@pytest.mark.rule_named_queues
def test_get_many_over_interleaved_queues_takes_each_job_once_in_priority_order(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_priority, rule_named_queues: one claim over two queues whose priorities interleave (it goes from
    one queue's jobs to the other's and back) takes the best job of either each time, FIFO within a
    priority, none of a queue not named; the jobs it left are the next claim's, and no index entry of a
    claimed job stays behind (verify)."""
    with make_queue(shards=1) as q:
        alpha = [q.put(n, queue="alpha", priority=priority) for n, priority in enumerate([5, 3, 3, 1])]
        beta = [q.put(n, queue="beta", priority=priority) for n, priority in enumerate([4, 3, 2, 0])]
        other = q.put("x", queue="gamma", priority=9)
        batch = q.get_many(6, timeout=0, queues=["alpha", "beta"])
        assert [r.job_id for r in batch] == [alpha[0], beta[0], alpha[1], alpha[2], beta[1], beta[2]]
        assert all(state_of(q, r.job_id) is State.RUNNING for r in batch)
        assert {job.job_id for job in q.jobs(State.PENDING)} == {alpha[3], beta[3], other}
        assert [r.job_id for r in q.get_many(10, timeout=0, queues=["alpha", "beta"])] == [alpha[3], beta[3]]
        assert [r.job_id for r in q.get_many(10, timeout=0)] == [other]
        assert q.verify() == []


def test_get_many_with_a_rate_limit_returns_one_job(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """flow: with a rate limit set, jobs are admitted one by one, so get_many returns one."""
    with make_queue(shards=1) as q:
        q.put_many(["x"] * 5)
        q.set_rate_limit("*", "1000/s")
        assert len(q.get_many(5, timeout=0)) == 1
        assert q.stats()["running"] == 1


def test_get_many_with_a_circuit_breaker_returns_one_job(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """flow: with a circuit breaker set (closed), get_many still returns one job at a time."""
    with make_queue(shards=1) as q:
        q.put_many(["x"] * 5)
        q.set_circuit_breaker("queue:default", threshold=3, recovery_timeout=10)
        assert len(q.get_many(5, timeout=0)) == 1
        q.remove_circuit_breaker("queue:default")
        assert len(q.get_many(5, timeout=0)) == 4


def test_get_many_raises_queue_empty_after_its_timeout(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """get_many waits like get(): QueueEmpty once the timeout passed with nothing to claim."""
    with make_queue() as q:
        start = time.monotonic()
        with pytest.raises(QueueEmpty):
            q.get_many(3, timeout=0.1)
        assert time.monotonic() - start >= 0.09
        q.put(None, delay=60)  # scheduled: not claimable yet
        with pytest.raises(QueueEmpty):
            q.get_many(3, timeout=0)


@pytest.mark.inv_7
@pytest.mark.parametrize("limit", [0, -1, 1.5, "3", None, True])
def test_get_many_refuses_a_bad_limit(
    clock: FakeClock, limit: Any, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """inv_7: a limit that is not an int >= 1 raises InvalidJob and claims nothing."""
    with make_queue() as q:
        q.put("x")
        before = probe(q).snapshot()
        with pytest.raises(InvalidJob):
            q.get_many(limit, timeout=0)
        assert probe(q).snapshot() == before
        with pytest.raises(InvalidJob):
            q.get_many(2, timeout=-1)


def test_get_many_emits_job_started_for_each_job(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """flow_events: one JOB_STARTED per claimed job, with its attempt."""
    with make_queue(shards=1) as q:
        ids = q.put_many(["x"] * 3)
        started: list[dict[str, Any]] = []
        q.events.on(JOB_STARTED, lambda **fields: started.append(fields))
        q.get_many(3, timeout=0)
        assert [e["job_id"] for e in started] == ids
        assert {e["attempt"] for e in started} == {1}


@pytest.mark.rule_completion
def test_each_record_of_a_batch_has_its_own_lease(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rule_completion, inv_2: the records of one batch are completed one by one, each through its own
    token: ack, nack, release and touch each act on their job only."""
    with make_queue(shards=1, lease_time=10, max_retries=2) as q:
        ids = q.put_many([0, 1, 2, 3])
        a, b, c, d = q.get_many(4, timeout=0)
        assert {r.lease_until for r in (a, b, c, d)} == {clock.now + 10}
        clock.advance(5)
        assert d.touch() == clock.now + 10
        a.ack(result="A")
        assert b.nack(RuntimeError("boom")) is State.PENDING
        c.release()
        jobs = {job_id: q.job(job_id) for job_id in ids}
        assert {job_id: job.state for job_id, job in jobs.items() if job} == {
            ids[0]: State.DONE, ids[1]: State.PENDING, ids[2]: State.PENDING, ids[3]: State.RUNNING,
        }  # fmt: skip
        assert jobs[ids[0]] is not None and jobs[ids[0]].result == "A"  # type: ignore[union-attr]
        assert jobs[ids[3]] is not None and jobs[ids[3]].lease_until == clock.now + 10  # type: ignore[union-attr]
        with pytest.raises(QueueCorrupted):
            a.ack()
        # the lease of the touched record outlives the others': only the untouched ones would be recovered
        clock.advance(7)
        assert q.recover() == 0
        assert d.touch() == clock.now + 10
        clock.advance(11)
        assert q.recover() == 1
        with pytest.raises(QueueCorrupted):
            d.ack()
        assert q.verify() == []


@pytest.mark.inv_2
def test_expired_leases_of_a_batch_are_all_recovered(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """inv_2: the jobs of a batch whose holder went silent all come back at recovery, uncharged (the holder
    ran at most one of them: tests/engine/test_poison_isolation.py), and the old records cannot complete."""
    with make_queue(shards=1, lease_time=5) as q:
        ids = q.put_many(["x"] * 6)
        batch = q.get_many(6, timeout=0)
        clock.advance(4.9)
        assert q.recover() == 0
        clock.advance(0.2)
        assert q.recover() == 6
        for job_id in ids:
            job = q.job(job_id)
            assert job is not None and job.state is State.PENDING and job.retries == 0 and job.errors == ()
        skipped = q.ack_many([(r, None) for r in batch])
        assert set(skipped) == set(ids)
        assert q.stats()["done"] == 0
        assert q.verify() == []


def hold_batch(location: StoreLocation, log_path: str, limit: int, lease_time: float) -> None:
    """Child: claim one batch of ``limit`` jobs, log each (id, lease expiry), then wait to be killed."""
    log = Log(log_path)
    q = location.open_queue(lease_time=lease_time)
    for record in q.get_many(limit, timeout=CHILD_TIMEOUT):
        log.line(record.job_id, repr(record.lease_until))
    log.line("holding")
    time.sleep(CHILD_TIMEOUT)


@pytest.mark.slow
@pytest.mark.inv_2
def test_killed_holder_of_a_batch_loses_every_job_of_it(
    make_queue: Callable[..., Queue], location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """inv_2: a real process that claimed a batch and was SIGKILLed holds its jobs until their leases
    expire (nobody else gets them meanwhile), then recover() brings every job of the batch back, uncharged
    (test_poison_isolation.py), and they run again, each claimed alone first."""
    with make_queue(clock=None, shards=1) as q:
        ids = q.put_many([{"n": n} for n in range(8)])
    log = tmp_path / "batch"
    holder = children.start(hold_batch, location, str(log), 5, 30.0)
    lines = wait_for(lambda: read_lines(log)[-1:] == [["holding"]] and read_lines(log), what="the batch")
    kill(holder)
    held = [int(line[0]) for line in lines[:-1]]
    assert held == ids[:5]
    expiry = max(float(line[1]) for line in lines[:-1])
    with make_queue(clock=None) as q:  # the wall clock: the leases are still running
        assert q.recover() == 0
        others = q.get_many(10, timeout=0)
        assert [r.job_id for r in others] == ids[5:], "a dead holder's jobs are not handed out before expiry"
        for r in others:
            r.release()
    late = FakeClock(expiry + 0.001)
    with make_queue(clock=late) as q:
        assert q.recover() == 5
        for job_id in held:
            job = q.job(job_id)
            assert job is not None and job.state is State.PENDING
            assert (job.retries, job.attempts, job.errors) == (0, 1, ())
        assert q.verify() == []
        again = [q.get_many(10, timeout=0) for _ in held]
        assert [[r.job_id] for batch in again for r in batch] == [[job_id] for job_id in held]
        again.append(q.get_many(10, timeout=0))
        again = [r for batch in again for r in batch]
        assert sorted(r.job_id for r in again) == sorted(ids)
        assert q.ack_many([(r, r.payload) for r in again]) == {}
        assert q.stats()["done"] == 8
        assert q.verify() == []


# ------------------------------------------------------------------------------------------ ack_many


@pytest.mark.rule_results
@pytest.mark.lmdb  # several shards
def test_ack_many_stores_every_result(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rule_results: each result of ack_many is readable through job(), across shards, after reopening."""
    with make_queue(shards=3) as q:
        for shard in range(3):
            q.put_many_to_shard(shard, [shard] * 3)
        records: list[Record] = []
        while len(records) < 9:
            records += q.get_many(9, timeout=0)
        clock.advance(2)
        assert q.ack_many([(r, {"double": r.payload * 2, "id": r.job_id}) for r in records]) == {}
        assert all(r.finished for r in records)
    with make_queue() as q:
        for r in records:
            job = q.job(r.job_id)
            assert job is not None and job.state is State.DONE
            assert job.result == {"double": r.payload * 2, "id": r.job_id}
            assert job.finished_at == clock.now
        assert q.stats()["done"] == 9 and q.stats()["running"] == 0
        assert q.verify() == []


@pytest.mark.lmdb  # several shards
def test_ack_many_writes_one_transaction_per_shard(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """ack_many commits once per shard it touches, not once per record."""
    with make_queue(shards=2) as q:
        q.put_many_to_shard(0, ["a"] * 4)
        q.put_many_to_shard(1, ["b"] * 4)
        records = q.get_many(4, timeout=0) + q.get_many(4, timeout=0)
        assert {r.job_id & 0xFF for r in records} == {0, 1}
        before = LmdbProbe(q).last_txnids()
        assert q.ack_many([(r, None) for r in records]) == {}
        after = LmdbProbe(q).last_txnids()
        assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1]


@pytest.mark.rfc_rec_01
def test_ack_many_skips_a_record_whose_job_was_claimed_again(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rfc_rec_01: a record whose lease expired, was recovered and claimed by someone else is skipped (and
    reported); the other records of the call still complete; the new holder keeps its job."""
    with make_queue(shards=1, lease_time=10) as q:
        ids = q.put_many([0, 1, 2])
        stale, fresh_1, fresh_2 = q.get_many(3, timeout=0)
        clock.advance(5)
        fresh_1.touch()
        fresh_2.touch()
        clock.advance(6)  # stale's lease ran out; the touched ones have 4 s left
        assert q.recover() == 1
        new_holder = q.get(timeout=0)
        assert new_holder.job_id == ids[0]
        skipped = q.ack_many([(stale, "old"), (fresh_1, "one"), (fresh_2, "two")])
        assert list(skipped) == [ids[0]]
        assert "claimed again" in skipped[ids[0]]
        assert not stale.finished and fresh_1.finished and fresh_2.finished
        job_0, job_1, job_2 = (q.job(job_id) for job_id in ids)
        assert job_0 is not None and job_0.state is State.RUNNING and job_0.result is None
        assert job_1 is not None and (job_1.state, job_1.result) == (State.DONE, "one")
        assert job_2 is not None and (job_2.state, job_2.result) == (State.DONE, "two")
        new_holder.ack("new")
        job_0 = q.job(ids[0])
        assert job_0 is not None and job_0.result == "new"
        assert q.verify() == []


@pytest.mark.rfc_id_01
def test_ack_many_skips_an_already_finished_record(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rfc_id_01: a record already acked, nacked or released is skipped and reported; nothing about its
    job changes; the others complete."""
    with make_queue(shards=1) as q:
        ids = q.put_many([0, 1, 2, 3])
        acked, nacked, released, good = q.get_many(4, timeout=0)
        acked.ack("first")
        nacked.nack("no")
        released.release()
        skipped = q.ack_many([(acked, "second"), (nacked, "x"), (released, "y"), (good, "ok")])
        assert set(skipped) == set(ids[:3])
        states = [q.job(job_id) for job_id in ids]
        assert [(j.state, j.result) for j in states if j] == [
            (State.DONE, "first"), (State.PENDING, None), (State.PENDING, None), (State.DONE, "ok"),
        ]  # fmt: skip
        assert q.verify() == []


@pytest.mark.rfc_id_02
def test_ack_many_skips_a_job_that_is_gone(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rfc_id_02: a record whose job was recovered to the dead letters and purged is skipped too."""
    with make_queue(shards=1, lease_time=1, max_retries=0) as q:
        gone_id, kept_id = q.put_many([0, 1])
        gone, kept = q.get(timeout=0), q.get(timeout=0)  # each alone: an expired lease is charged
        clock.advance(2)
        assert q.recover() == 2
        assert q.purge(State.FAILED) == 2
        assert q.ack_many([(gone, None), (kept, None)]).keys() == {gone_id, kept_id}
        assert q.verify() == []


@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (object(), PayloadNotSerializable),
        ({1, 2}, PayloadNotSerializable),
        (b"x" * 5000, PayloadTooLarge),
    ],
)
@pytest.mark.lmdb  # several shards
def test_ack_many_refuses_a_bad_result_before_writing_anything(
    clock: FakeClock, bad: Any, error: type[Exception], probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """inv_7: one unencodable (or too large) result among many raises before anything is written: every
    job of the call is still running, on disk, and the records can still be acked."""
    with make_queue(shards=2, max_payload_bytes=4096) as q:
        q.put_many_to_shard(0, ["a"] * 3)
        q.put_many_to_shard(1, ["b"] * 3)
        records = q.get_many(3, timeout=0) + q.get_many(3, timeout=0)
        before = probe(q).snapshot()
        with pytest.raises(error):
            q.ack_many([(r, "fine") for r in records[:4]] + [(records[4], bad), (records[5], "fine")])
        assert probe(q).snapshot() == before
        assert not any(r.finished for r in records)
        assert q.ack_many([(r, "fine") for r in records]) == {}
        assert q.stats()["done"] == 6


@pytest.mark.inv_7
def test_ack_many_refuses_a_job_listed_twice(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """inv_7: the same job twice in one call is a mistake: InvalidJob, nothing written (before the fix it
    was acked with the first result while reported as skipped, and its record never marked finished)."""
    with make_queue(shards=1) as q:
        q.put_many([0, 1])
        first, second = q.get_many(2, timeout=0)
        before = probe(q).snapshot()
        with pytest.raises(InvalidJob, match="twice"):
            q.ack_many([(first, 1), (second, 2), (first, 3)])
        assert probe(q).snapshot() == before
        assert q.ack_many([(first, 1), (second, 2)]) == {}
        job = q.job(first.job_id)
        assert job is not None and job.result == 1


@pytest.mark.flow_events
@pytest.mark.lmdb  # several shards
def test_ack_many_emits_job_succeeded_once_per_acked_job(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """flow_events: JOB_SUCCEEDED once for each job ack_many completed, with its result; none for the
    skipped ones."""
    with make_queue(shards=2, lease_time=10) as q:
        q.put_many_to_shard(0, ["a"] * 2)
        q.put_many_to_shard(1, ["b"] * 2)
        records = q.get_many(2, timeout=0) + q.get_many(2, timeout=0)
        succeeded: list[dict[str, Any]] = []
        q.events.on(JOB_SUCCEEDED, lambda **fields: succeeded.append(fields))
        records[0].ack("alone")
        skipped = q.ack_many([(r, f"r{r.job_id}") for r in records])
        assert list(skipped) == [records[0].job_id]
        assert sorted(e["job_id"] for e in succeeded) == sorted(r.job_id for r in records)
        assert [e["result"] for e in succeeded if e["job_id"] != records[0].job_id] == [
            f"r{r.job_id}" for r in records[1:]
        ]
        assert q.ack_many([]) == {}
        assert len(succeeded) == 4


def test_a_packed_result_is_stored_as_it_was_packed(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """A result given as a ``codec.Packed`` (to ``ack`` and to ``ack_many``) is stored as its bytes, not
    packed again (the worker packs each result once, when its task returns), and the success event carries
    its value. Here the bytes are another value's, to tell the two apart."""
    with make_queue(shards=1) as q:
        q.put_many_to_shard(0, ["a", "b", "c"])
        one, *many = q.get_many(3, timeout=0)
        succeeded: list[Any] = []
        q.events.on(JOB_SUCCEEDED, lambda **fields: succeeded.append(fields["result"]))
        one.ack(Packed("shown", one.pack_result("stored")))
        assert q.ack_many([(r, Packed(f"shown {r.payload}", r.pack_result(r.payload))) for r in many]) == {}
        assert [q.job(r.job_id).result for r in (one, *many)] == ["stored", "b", "c"]  # type: ignore[union-attr]
        assert succeeded == ["shown", "shown b", "shown c"]
        assert q.verify() == []


def test_ack_many_feeds_the_circuit_breaker(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """flow_breaker: an acked batch counts as successes, as single acks do: a half-open breaker closes."""
    with make_queue(shards=1) as q:
        q.set_circuit_breaker("queue:default", threshold=1, recovery_timeout=5)
        q.put_many(["x"] * 3)
        q.get(timeout=0).nack("boom")
        assert q.circuit_breakers()["queue:default"]["state"] == "open"
        clock.advance(6)
        trial = q.get_many(3, timeout=0)
        assert len(trial) == 1
        assert q.ack_many([(trial[0], None)]) == {}
        assert q.circuit_breakers()["queue:default"]["state"] == "closed"
