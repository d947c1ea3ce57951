"""Contract tests of failure handling: retries, backoff, expired leases, recovery and dead letters.

EQueue RFC rules RFC-RT-*, RFC-RC-*, RFC-CL-01, RFC-INV-03/05/09, and DESIGN.md's rules on retries, backoff,
leases as attempts and dead letters.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State, backoff_delay
from queue_max_django.engine.stores.lmdb import keys
from tests.engine.conftest import FakeClock
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]

LEASE = 30.0  # the fixture queue's lease_time


class PaymentDeclined(Exception):
    """A user-defined error: its dead letter names it module.Class."""


# --------------------------------------------------------------------------------------------- RFC-RT


@pytest.mark.contract
@pytest.mark.rfc_rt_01
def test_failed_after_max_retries_plus_one_nacks(queue: Queue, probe: Probe) -> None:
    """RFC-RT-01: with max_retries=3, the 4th nack fails the job; retries == 4 in the record on disk."""
    job_id = queue.put("flaky")
    assert queue.job(job_id).max_retries == 3
    for attempt in range(1, 4):
        assert queue.get(0).nack(f"attempt {attempt}") is State.PENDING
    assert queue.get(0).nack("attempt 4") is State.FAILED

    stored = probe(queue).stored(job_id)
    assert stored is not None and stored.retries == 4 and stored.state is State.FAILED
    job = queue.job(job_id)
    assert job.state is State.FAILED and job.retries == 4 and job.error == "attempt 4"
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_rt_02
def test_requeue_increments_retry_counter(queue: Queue, probe: Probe) -> None:
    """RFC-RT-02: every nack that re-queues the job raises its retry count by exactly one."""
    job_id = queue.put("flaky", max_retries=5)
    for expected in range(1, 6):
        record = queue.get(0)
        assert record.retries == expected - 1
        assert record.nack("again") is State.PENDING
        assert probe(queue).stored(job_id).retries == expected
        assert queue.job(job_id).retries == expected
        assert queue.stats()["pending"] == 1


@pytest.mark.contract
@pytest.mark.rfc_inv_05
@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_failed_with_retry_count_max_retries_plus_one(queue: Queue, max_retries: int) -> None:
    """RFC-INV-05: after exactly max_retries + 1 nacks the job is failed, retries == max_retries + 1."""
    job_id = queue.put("x", max_retries=max_retries)
    for _ in range(max_retries):
        queue.get(0).nack("retry")
        assert queue.job(job_id).state is State.PENDING
    queue.get(0).nack("last")
    job = queue.job(job_id)
    assert job.state is State.FAILED
    assert job.retries == max_retries + 1
    assert queue.stats()["failed"] == 1 and queue.stats()["pending"] == 0


# ------------------------------------------------------------------------------------------ retries


@pytest.mark.contract
@pytest.mark.rule_retries
def test_max_retries_zero_means_one_attempt(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rule_retries: max_retries=0 (queue default or per job) -> the first nack fails the job."""
    with make_queue(max_retries=0) as q:
        by_default = q.put("default")
        overridden = q.put("three", max_retries=3)
        assert q.job(by_default).max_retries == 0
        assert q.job(overridden).max_retries == 3
        records = {r.job_id: r for r in (q.get(0), q.get(0))}
        assert records[by_default].nack("once") is State.FAILED
        assert records[overridden].nack("once") is State.PENDING
        assert q.job(by_default).retries == 1


@pytest.mark.contract
@pytest.mark.rule_retries
def test_default_max_retries_is_resolved_at_put_time(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_retries: max_retries=None stores the queue's default of the time of the put; a later Queue with
    another default does not change it."""
    with make_queue(max_retries=2) as q:
        job_id = q.put("x")
    with make_queue(max_retries=0) as q:
        assert q.job(job_id).max_retries == 2
        assert q.get(0).nack("1") is State.PENDING
        assert q.get(0).nack("2") is State.PENDING
        assert q.get(0).nack("3") is State.FAILED
        assert q.job(job_id).retries == 3


# ------------------------------------------------------------------------------------------ backoff


@pytest.fixture
def backoff_rng() -> random.Random:
    return random.Random(20240601)


@pytest.fixture
def backoff_queue(
    clock: FakeClock, backoff_rng: random.Random, make_queue: Callable[..., Queue]
) -> Iterator[Queue]:
    q = make_queue(retry_backoff=2.0, rng=backoff_rng, max_retries=5)
    yield q
    q.close()


def next_backoff(rng: random.Random, retries: int, base: float = 2.0, cap: float = 3600.0) -> float:
    """The delay the queue's seeded rng will give to its next nack, computed on a copy of it."""
    twin = random.Random()
    twin.setstate(rng.getstate())
    return backoff_delay(retries, base, cap, rng=twin)


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_nack_schedules_retry_after_exact_seeded_backoff(
    backoff_queue: Queue, backoff_rng: random.Random, clock: FakeClock
) -> None:
    """rule_backoff: each nack schedules the job at now + backoff_delay(retries) of the queue's rng:
    2 * 2**(retries-1) s +-20 %; it is not claimable before then and is at that instant."""
    q = backoff_queue
    job_id = q.put("flaky")
    for retries in (1, 2, 3):
        record = q.get(0)
        expected = next_backoff(backoff_rng, retries)
        nominal = 2.0 * 2 ** (retries - 1)
        assert 0.8 * nominal <= expected <= 1.2 * nominal
        now = clock.now
        assert record.nack("try again") is State.SCHEDULED

        job = q.job(job_id)
        assert job.state is State.SCHEDULED and job.retries == retries
        assert job.eta == pytest.approx(now + expected, abs=2e-6)
        assert q.stats()["scheduled"] == 1 and q.stats()["pending"] == 0
        clock.advance(expected - 0.01)
        with pytest.raises(QueueEmpty):
            q.get(0)
        assert q.job(job_id).state is State.SCHEDULED
        clock.advance(0.02)
    assert q.get(0).job_id == job_id


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_backoff_is_capped_at_retry_backoff_max(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """rule_backoff: the second retry's 4 s +-20 % is over retry_backoff_max=3: it waits exactly 3 s."""
    rng = random.Random(7)
    with make_queue(retry_backoff=2.0, retry_backoff_max=3.0, rng=rng) as q:
        job_id = q.put("x")
        record = q.get(0)
        expected = next_backoff(rng, 1, cap=3.0)
        now = clock.now
        record.nack("first")
        assert q.job(job_id).eta == pytest.approx(now + expected, abs=2e-6)
        assert expected < 3.0
        clock.advance(expected)
        record = q.get(0)
        now = clock.now
        record.nack("second")
        assert q.job(job_id).eta == pytest.approx(now + 3.0, abs=2e-6)


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_nack_delay_overrides_backoff(backoff_queue: Queue, clock: FakeClock) -> None:
    """rule_backoff: nack(delay=s) schedules after exactly s seconds; delay=0 re-queues at once."""
    q = backoff_queue
    job_id = q.put("x")
    now = clock.now
    assert q.get(0).nack("later", delay=7.5) is State.SCHEDULED
    assert q.job(job_id).eta == pytest.approx(now + 7.5, abs=2e-6)
    clock.advance(7.5)
    assert q.get(0).nack("now", delay=0) is State.PENDING
    job = q.job(job_id)
    assert job.state is State.PENDING and job.eta is None and job.retries == 2
    assert q.get(0).job_id == job_id


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_zero_backoff_requeues_at_once(queue: Queue) -> None:
    """rule_backoff: retry_backoff=0 puts a nacked job straight back to pending."""
    job_id = queue.put("x")
    assert queue.get(0).nack("again") is State.PENDING
    assert queue.job(job_id).eta is None
    assert queue.stats()["scheduled"] == 0
    assert queue.get(0).job_id == job_id


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_permanent_nack_goes_straight_to_failed(backoff_queue: Queue) -> None:
    """rule_backoff: permanent=True fails the job with retries left and no backoff."""
    q = backoff_queue
    job_id = q.put("x")
    assert q.get(0).nack(ValueError("never works"), permanent=True) is State.FAILED
    job = q.job(job_id)
    assert job.state is State.FAILED and job.eta is None
    assert job.retries < job.max_retries
    assert job.error == "never works" and job.error_type == "ValueError"
    assert [j.job_id for j in q.dead_letters()] == [job_id]
    assert q.stats()["scheduled"] == 0


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_out_of_retries_fails_even_with_delay(backoff_queue: Queue) -> None:
    """rule_backoff: delay= does not extend the retry budget."""
    q = backoff_queue
    job_id = q.put("x", max_retries=0)
    assert q.get(0).nack("no more", delay=10) is State.FAILED
    assert q.job(job_id).state is State.FAILED


# ------------------------------------------------------------------------------------- lease attempts


@pytest.mark.contract
@pytest.mark.rule_lease_attempt
def test_expired_lease_counts_as_failed_attempt(queue: Queue, clock: FakeClock) -> None:
    """rule_lease_attempt: recovery of an expired lease bumps retries and records "LeaseExpired"."""
    job_id = queue.put("x")
    queue.get(0)
    clock.advance(LEASE - 1)
    assert queue.recover() == 0
    clock.advance(2)
    assert queue.recover() == 1
    job = queue.job(job_id)
    assert job.state is State.PENDING
    assert job.retries == 1
    assert job.error_type == "LeaseExpired" and job.error
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_lease_attempt
@pytest.mark.parametrize("max_retries", [0, 2])
def test_job_whose_lease_always_expires_ends_failed(queue: Queue, clock: FakeClock, max_retries: int) -> None:
    """rule_lease_attempt: a job that kills its worker every time is failed after max_retries + 1 tries."""
    job_id = queue.put("poison", max_retries=max_retries)
    for attempt in range(1, max_retries + 2):
        assert queue.get(0).job_id == job_id
        clock.advance(LEASE + 1)
        assert queue.recover() == 1
        assert queue.job(job_id).retries == attempt
    job = queue.job(job_id)
    assert job.state is State.FAILED
    assert job.retries == max_retries + 1
    assert job.error_type == "LeaseExpired"
    assert [j.job_id for j in queue.dead_letters()] == [job_id]
    with pytest.raises(QueueEmpty):
        queue.get(0)


# ------------------------------------------------------------------------------------- dead letters


@pytest.mark.contract
@pytest.mark.rule_dead_letters
def test_dead_letter_keeps_payload_error_type_traceback_and_times(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_dead_letters: a failed job keeps its payload, error text, error type (builtins bare,
    others module.Class), the traceback with the raising line, retries and timestamps, across a reopen."""
    t0 = clock.now
    with make_queue() as q:
        job_id = q.put({"order": 7, "blob": b"\x00\x01"}, name="shop.charge", queue="payments", max_retries=1)
        clock.advance(1)
        record = q.get(0)
        try:
            raise ValueError("card declined")
        except ValueError as exc:
            assert record.nack(exc) is State.PENDING
        job = q.job(job_id)
        assert job.error == "card declined" and job.error_type == "ValueError"
        assert 'raise ValueError("card declined")' in job.traceback

        clock.advance(2)
        record = q.get(0)
        clock.advance(4)
        try:
            raise PaymentDeclined("gave up for good")
        except PaymentDeclined as exc:
            assert record.nack(exc) is State.FAILED

    with make_queue() as q:
        job = q.job(job_id)
        assert job.state is State.FAILED
        assert job.payload == {"order": 7, "blob": b"\x00\x01"}
        assert (job.name, job.queue) == ("shop.charge", "payments")
        assert job.error == "gave up for good"
        assert job.error_type == f"{__name__}.PaymentDeclined"
        assert 'raise PaymentDeclined("gave up for good")' in job.traceback
        assert "PaymentDeclined: gave up for good" in job.traceback
        assert job.retries == 2 and job.max_retries == 1
        assert job.enqueued_at == pytest.approx(t0, abs=1e-6)
        assert job.started_at == pytest.approx(t0 + 3, abs=1e-6)
        assert job.finished_at == pytest.approx(t0 + 7, abs=1e-6)
        assert q.dead_letters() == [job]
        assert q.verify() == []


@pytest.mark.contract
@pytest.mark.rule_dead_letters
def test_dead_letter_from_error_text(queue: Queue) -> None:
    """rule_dead_letters: nack("text") keeps the text; there is no type or traceback to keep."""
    job_id = queue.put("x", max_retries=0)
    queue.get(0).nack("upstream returned 503")
    job = queue.job(job_id)
    assert job.state is State.FAILED
    assert job.error == "upstream returned 503"
    assert job.error_type is None and job.traceback is None


@pytest.mark.contract
@pytest.mark.rule_dead_letters
def test_dead_letter_without_error_still_says_something(queue: Queue) -> None:
    """rule_dead_letters: nack() with no error still leaves a non-empty error on the failed job."""
    job_id = queue.put("x", max_retries=0)
    queue.get(0).nack()
    job = queue.job(job_id)
    assert job.state is State.FAILED
    assert isinstance(job.error, str) and job.error
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_dead_letters
def test_dead_letters_stay_until_requeued_or_purged(queue: Queue, clock: FakeClock) -> None:
    """rule_dead_letters: vacuum and recovery never touch failed jobs, however old."""
    job_id = queue.put("x", max_retries=0)
    queue.get(0).nack("bad")
    clock.advance(10 * 365 * 86400)
    assert queue.vacuum() == 0 and queue.vacuum(older_than=0) == 0
    assert queue.recover() == 0
    assert queue.job(job_id).state is State.FAILED
    assert queue.purge(State.FAILED) == 1
    assert queue.job(job_id) is None


# --------------------------------------------------------------------------------------------- RFC-RC


@pytest.mark.contract
@pytest.mark.rfc_rc_01
def test_no_expired_running_leases_after_recover(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """RFC-RC-01: after recover(), every running job has a lease in the future, in the lease index."""
    for i in range(6):
        queue.put(i)
    early = [queue.get(0) for _ in range(3)]
    clock.advance(20)
    late = [queue.get(0) for _ in range(3)]
    clock.advance(15)  # the early leases expired 5 s ago; the late ones have 15 s left

    assert queue.recover() == 3

    now_us = keys.micros(clock.now)
    running = queue.jobs(State.RUNNING)
    assert sorted(j.job_id for j in running) == sorted(r.job_id for r in late)
    entries = probe(queue).leases()
    assert set(entries) == {j.job_id for j in running}
    for job in running:
        assert job.lease_until > clock.now
        assert entries[job.job_id] > now_us
    for record in early:
        assert queue.job(record.job_id).state is State.PENDING
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_rc_02
def test_running_without_lease_recovered(queue: Queue, probe: Probe) -> None:
    """RFC-RC-02: a running job whose lease entry is missing is recovered at once (no clock change)."""
    job_id = queue.put("orphan")
    other = queue.put("held")
    records = {r.job_id: r for r in (queue.get(0), queue.get(0))}
    probe(queue).drop_lease(job_id)
    assert queue.verify() != []  # the store really is inconsistent now

    assert queue.recover() == 1

    job = queue.job(job_id)
    assert job.state is State.PENDING and job.retries == 1 and job.error_type == "LeaseExpired"
    assert queue.job(other).state is State.RUNNING
    assert queue.verify() == []
    with pytest.raises(QueueCorrupted):
        records[job_id].ack()
    records[other].ack()


@pytest.mark.contract
@pytest.mark.rfc_rc_02
def test_running_without_lease_recovered_by_daemon(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """RFC-RC-02: the background recovery thread fixes a running job whose lease entry is missing."""
    q = make_queue(do_recover=True, recover_interval=0.02, retry_backoff=1.0)
    try:
        job_id = q.put("orphan")
        q.get(0)
        probe(q).drop_lease(job_id)
        deadline = time.monotonic() + 5.0
        while q.job(job_id).state is State.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        job = q.job(job_id)
        assert job.state is not State.RUNNING
        assert job.retries == 1 and job.error_type == "LeaseExpired"
        assert q.verify() == []
    finally:
        q.close()


@pytest.mark.contract
@pytest.mark.rfc_inv_03
def test_no_running_job_keeps_expired_or_absent_lease_after_recovery(
    queue: Queue,
    clock: FakeClock,
    probe: Probe,
) -> None:
    """RFC-INV-03: expired and missing leases are all recovered; live ones stay untouched."""
    for i in range(4):
        queue.put(i)
    expired = [queue.get(0), queue.get(0)]
    clock.advance(20)
    orphan, live = queue.get(0), queue.get(0)
    probe(queue).drop_lease(orphan.job_id)
    clock.advance(15)

    assert queue.recover() == 3

    entries = probe(queue).leases()
    running = queue.jobs(State.RUNNING)
    assert [j.job_id for j in running] == [live.job_id]
    assert entries == {live.job_id: keys.micros(running[0].lease_until)}
    assert running[0].lease_until > clock.now
    for record in [*expired, orphan]:
        assert queue.job(record.job_id).state is State.PENDING
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_inv_09
def test_recover_is_idempotent(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """RFC-INV-09: a second recover() finds nothing and changes no byte of the store."""
    for i in range(5):
        queue.put(i, max_retries=1)
    records = [queue.get(0) for _ in range(4)]
    probe(queue).drop_lease(records[0].job_id)
    clock.advance(LEASE + 1)
    assert queue.recover() == 4
    before = probe(queue).snapshot(), queue.stats()

    assert queue.recover() == 0

    assert (probe(queue).snapshot(), queue.stats()) == before
    assert all(queue.job(r.job_id).retries == 1 for r in records)
    assert queue.stats()["pending"] == 5


# --------------------------------------------------------------------------------------------- RFC-CL


@pytest.mark.contract
@pytest.mark.rfc_cl_01
@pytest.mark.parametrize("size", [10, 5000], ids=["small-payload", "large-payload"])
def test_claim_on_missing_payload_raises_queue_corrupted(queue: Queue, size: int, probe: Probe) -> None:
    """RFC-CL-01: a claimable job without its payload makes get() raise QueueCorrupted once; the job goes to
    the dead letters with error_type "Corrupted"; the next get() serves the other jobs."""
    broken = queue.put("b" * size, priority=10)
    good = queue.put("good", priority=0)
    probe(queue).drop_payload(broken)

    with pytest.raises(QueueCorrupted, match=str(broken)):
        queue.get(0)

    job = queue.job(broken)
    assert job.state is State.FAILED
    assert job.error_type == "Corrupted"
    assert "payload" in job.error
    assert [j.job_id for j in queue.dead_letters()] == [broken]
    record = queue.get(0)
    assert record.job_id == good and record.payload == "good"
    record.ack()
    with pytest.raises(QueueEmpty):
        queue.get(0)
    stats = queue.stats()
    assert (stats["failed"], stats["done"], stats["pending"], stats["running"]) == (1, 1, 0, 0)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_cl_01
def test_claim_on_undecodable_record_raises_queue_corrupted(queue: Queue, probe: Probe) -> None:
    """RFC-CL-01: a claimable job whose record bytes are garbage is quarantined the same way."""
    broken = queue.put("x", priority=5)
    good = queue.put("good")
    probe(queue).break_record(broken, "garbage-record")  # bytes that are not msgpack

    with pytest.raises(QueueCorrupted):
        queue.get(0)

    job = queue.job(broken)
    assert job.state is State.FAILED and job.error_type == "Corrupted"
    assert queue.get(0).job_id == good
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_backoff
def test_a_retry_that_became_due_is_claimed_before_lower_priority_jobs(
    clock: FakeClock, make_queue: Callable[..., Queue]
) -> None:
    """rule_backoff (and the priority rule): once a retried job's ETA has passed, the next claim takes it
    before any pending job of lower priority, even though the consumer's view of the store last saw it
    running (a claim promotes due jobs in its own transaction). Found by test_stateful."""
    with make_queue(shards=3, rng=random.Random(0)) as q:
        first = q.put({"n": 1}, priority=0, queue="alpha")
        q.put({"n": 2}, priority=0, queue="beta")
        q.put({"n": 3}, priority=-3, queue="alpha")
        lower = q.put({"n": 4}, priority=-1, queue="alpha")
        record = q.get(timeout=0, queues=["alpha"])
        assert record.job_id == first
        record.nack(RuntimeError("boom"), delay=0.5)
        assert q.job(first).state is State.SCHEDULED
        clock.advance(1.0)

        again = q.get(timeout=0, queues=["alpha"])

        assert again.job_id == first
        assert q.job(first).state is State.RUNNING
        assert q.job(lower).state is State.PENDING
