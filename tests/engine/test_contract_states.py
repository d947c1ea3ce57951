"""Contract tests of the state machine: who may complete a job, and how each operation moves it.

EQueue RFC rules RFC-SM-*, RFC-REC-*, RFC-ID-*, RFC-INV-04 and RFC-INV-08, and DESIGN.md's rules on states,
completion through the record, release/touch, management (cancel/requeue/purge) and ``processing()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import (
    InvalidJob,
    Queue,
    QueueCorrupted,
    QueueEmpty,
    Record,
    State,
)
from tests.engine.conftest import FakeClock
from tests.engine.probes import Stored, StoreProbe

Probe = Callable[[Queue], StoreProbe]

LEASE = 30.0  # the fixture queue's lease_time


def snapshot(q: Queue, probe: Probe, job_id: int) -> tuple[Any, Stored | None, dict[str, Any]]:
    """Everything a refused completion must leave alone: the Job, its record as stored, the counts."""
    return q.job(job_id), probe(q).stored(job_id), q.stats()


# ---------------------------------------------------------------------------------------------- RFC-SM


@pytest.mark.contract
@pytest.mark.rfc_sm_01
def test_ack_requires_running_state(queue: Queue, probe: Probe) -> None:
    """RFC-SM-01: a job that is pending again (its record released it) cannot be acked."""
    job_id = queue.put("work")
    record = queue.get(0)
    record.release()
    before = snapshot(queue, probe, job_id)
    assert before[0] is not None and before[0].state is State.PENDING

    with pytest.raises(QueueCorrupted, match="not running"):
        record.ack("result")

    assert snapshot(queue, probe, job_id) == before
    assert queue.job(job_id).result is None
    assert queue.stats()["done"] == 0
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_sm_02
def test_nack_requires_running_state(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """RFC-SM-02: a job that went back to pending (lease expired, recovered) cannot be nacked."""
    job_id = queue.put("work")
    record = queue.get(0)
    clock.advance(LEASE + 1)
    assert queue.recover() == 1
    before = snapshot(queue, probe, job_id)
    assert before[0].state is State.PENDING and before[0].retries == 1

    with pytest.raises(QueueCorrupted):
        record.nack(ValueError("late"))

    assert snapshot(queue, probe, job_id) == before  # retries not bumped a second time, error not replaced
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_sm_03
def test_nack_on_failed_is_rejected(queue: Queue, probe: Probe) -> None:
    """RFC-SM-03: once a nack made the job failed, another nack through the same record is refused."""
    job_id = queue.put("work", max_retries=0)
    record = queue.get(0)
    assert record.nack("first failure") is State.FAILED
    before = snapshot(queue, probe, job_id)
    assert before[0].state is State.FAILED and before[0].retries == 1

    with pytest.raises(QueueCorrupted, match="failed"):
        record.nack("second failure")

    after = snapshot(queue, probe, job_id)
    assert after == before
    assert after[0].error == "first failure" and after[0].retries == 1
    assert queue.verify() == []


# --------------------------------------------------------------------------------------------- RFC-REC


@pytest.mark.contract
@pytest.mark.rfc_rec_01
def test_stale_record_after_reclaim_is_rejected(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """RFC-REC-01: after the lease expired and another holder claimed the job, the old record cannot ack."""
    job_id = queue.put("work")
    stale = queue.get(0)
    clock.advance(LEASE + 1)
    assert queue.recover() == 1
    fresh = queue.get(0)
    assert fresh.job_id == job_id
    before = snapshot(queue, probe, job_id)

    with pytest.raises(QueueCorrupted, match="another claim"):
        stale.ack("stale result")

    assert snapshot(queue, probe, job_id) == before
    assert queue.job(job_id).state is State.RUNNING
    fresh.ack("fresh result")
    assert queue.job(job_id).result == "fresh result"
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_rec_02
def test_wrong_token_raises_queue_corrupted(queue: Queue, probe: Probe) -> None:
    """RFC-REC-02: the token stored with the running job must match the record's; a mismatch is refused."""
    job_id = queue.put("work")
    record = queue.get(0)
    assert probe(queue).stored(job_id).token == record._token
    stored_token = probe(queue).steal_claim(job_id)  # another holder's token, as if it had claimed the job
    before = snapshot(queue, probe, job_id)

    for complete in (lambda: record.ack(), lambda: record.nack("x"), record.release, record.touch):
        with pytest.raises(QueueCorrupted):
            complete()
        assert snapshot(queue, probe, job_id) == before

    # The same record with the token on disk goes through: the token alone made the difference.
    record._token = stored_token
    record.ack()
    assert queue.job(job_id).state is State.DONE


# ---------------------------------------------------------------------------------------------- RFC-ID


@pytest.mark.contract
@pytest.mark.rfc_id_01
def test_double_ack_raises_queue_corrupted(queue: Queue, probe: Probe) -> None:
    """RFC-ID-01: the second ack of one record raises and keeps the first result."""
    job_id = queue.put("work")
    record = queue.get(0)
    record.ack("first")
    before = snapshot(queue, probe, job_id)

    with pytest.raises(QueueCorrupted):
        record.ack("second")

    assert snapshot(queue, probe, job_id) == before
    assert queue.job(job_id).result == "first"
    assert queue.stats()["done"] == 1


@pytest.mark.contract
@pytest.mark.rfc_id_02
def test_ack_after_vacuumed_job_raises(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """RFC-ID-02: a stale record whose job was finished by another holder and vacuumed cannot ack."""
    job_id = queue.put("work")
    stale = queue.get(0)
    clock.advance(LEASE + 1)
    queue.recover()
    queue.get(0).ack()
    assert queue.vacuum(older_than=0) == 1
    assert queue.job(job_id) is None

    with pytest.raises(QueueCorrupted, match="no longer exists"):
        stale.ack()
    with pytest.raises(QueueCorrupted):
        stale.nack("late")

    assert queue.job(job_id) is None
    assert probe(queue).stored(job_id) is None and probe(queue).places(job_id) == []
    stats = queue.stats()
    assert (stats["done"], stats["pending"], stats["failed"], stats["total"]) == (0, 0, 0, 1)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_inv_04
def test_second_ack_is_never_accepted_silently(queue: Queue, clock: FakeClock) -> None:
    """RFC-INV-04: a second ack raises QueueCorrupted; the finish time of the first one stays."""
    job_id = queue.put("work")
    record = queue.get(0)
    record.ack()
    finished_at = queue.job(job_id).finished_at
    clock.advance(60)

    with pytest.raises(QueueCorrupted):
        record.ack()

    job = queue.job(job_id)
    assert job.state is State.DONE and job.finished_at == finished_at
    assert queue.stats()["done"] == 1


# ------------------------------------------------------------------------------------------ completion


def _ack(record: Record) -> Any:
    return record.ack("result")


def _nack(record: Record) -> Any:
    return record.nack(ValueError("boom"))


def _release(record: Record) -> Any:
    return record.release()


def _touch(record: Record) -> Any:
    return record.touch()


COMPLETIONS = {"ack": _ack, "nack": _nack, "release": _release, "touch": _touch}


@pytest.mark.contract
@pytest.mark.rule_completion
@pytest.mark.parametrize("finish", ["ack", "nack", "release"])
@pytest.mark.parametrize("operation", sorted(COMPLETIONS))
def test_completion_after_finish_raises_and_changes_nothing(
    queue: Queue,
    finish: str,
    operation: str,
    probe: Probe,
) -> None:
    """rule_completion: once a record acked/nacked/released, every further use of it is refused."""
    job_id = queue.put("work", max_retries=0)
    record = queue.get(0)
    COMPLETIONS[finish](record)
    before = snapshot(queue, probe, job_id)

    with pytest.raises(QueueCorrupted):
        COMPLETIONS[operation](record)

    assert snapshot(queue, probe, job_id) == before
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_completion
@pytest.mark.parametrize("operation", sorted(COMPLETIONS))
def test_completion_with_stale_record_raises_and_changes_nothing(
    queue: Queue,
    clock: FakeClock,
    operation: str,
    probe: Probe,
) -> None:
    """rule_completion: a record whose lease expired and whose job was claimed again changes nothing."""
    job_id = queue.put("work")
    stale = queue.get(0)
    clock.advance(LEASE + 1)
    queue.recover()
    fresh = queue.get(0)
    before = snapshot(queue, probe, job_id)

    with pytest.raises(QueueCorrupted):
        COMPLETIONS[operation](stale)

    assert snapshot(queue, probe, job_id) == before
    assert queue.job(job_id).lease_until == pytest.approx(fresh.lease_until)
    fresh.ack()
    assert queue.job(job_id).state is State.DONE


@pytest.mark.contract
@pytest.mark.rule_completion
def test_completion_of_cancelled_or_purged_job_is_refused(queue: Queue) -> None:
    """rule_completion: a released job that was then cancelled cannot be completed by its old record."""
    job_id = queue.put("work")
    record = queue.get(0)
    record.release()
    assert queue.cancel(job_id) is True

    for operation in COMPLETIONS.values():
        with pytest.raises(QueueCorrupted):
            operation(record)
    assert queue.job(job_id) is None
    assert queue.stats()["done"] == 0 and queue.stats()["failed"] == 0


# ------------------------------------------------------------------------------------------------ states


@pytest.mark.contract
@pytest.mark.rule_states
def test_state_values_are_the_stats_keys_and_what_jobs_and_purge_take(queue: Queue) -> None:
    """rule_states: one vocabulary: the same strings are the stats keys and what jobs()/purge() take."""
    assert [state.value for state in State] == ["pending", "scheduled", "running", "done", "failed"]
    assert all(isinstance(state, str) for state in State)
    stats = queue.stats()
    assert {state.value for state in State} <= set(stats)

    ids = {
        state: queue.put(state.value) for state in (State.PENDING, State.RUNNING, State.DONE, State.FAILED)
    }
    ids[State.SCHEDULED] = queue.put("scheduled", delay=60)
    # Claim the jobs meant for running, done and failed (order of claims across shards is free).
    held = {}
    for _ in range(4):
        record = queue.get(0)
        held[record.job_id] = record
    assert set(held) == {ids[s] for s in (State.PENDING, State.RUNNING, State.DONE, State.FAILED)}
    held.pop(ids[State.PENDING]).release()
    held.pop(ids[State.DONE]).ack()
    held.pop(ids[State.FAILED]).nack("bad", permanent=True)

    stats = queue.stats()
    for state in State:
        assert stats[state.value] == 1, state
        job = queue.job(ids[state])
        assert job.state is state and isinstance(job.state, State)
        assert [j.job_id for j in queue.jobs(state.value)] == [ids[state]]
        assert queue.jobs(state.value) == queue.jobs(state)
    assert queue.purge("done") == 1 and queue.purge(State.FAILED) == 1
    assert queue.stats()["done"] == 0 and queue.stats()["failed"] == 0
    with pytest.raises(InvalidJob, match="unknown state"):
        queue.jobs("waiting")
    with pytest.raises(InvalidJob, match="unknown state"):
        queue.purge("dead")


# ---------------------------------------------------------------------------------- holders and leases


@pytest.mark.contract
@pytest.mark.inv_2
def test_one_holder_at_a_time(queue: Queue) -> None:
    """inv_2: a claimed job is not delivered again while its lease holds."""
    job_id = queue.put("only")
    record = queue.get(0)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert queue.recover() == 0
    assert queue.job(job_id).state is State.RUNNING
    record.ack()


@pytest.mark.contract
@pytest.mark.inv_2
def test_touch_extends_lease_past_old_expiry(queue: Queue, clock: FakeClock) -> None:
    """inv_2: touch() extends lease_until; recovery past the OLD expiry leaves the job with its holder."""
    job_id = queue.put("long job")
    start = clock.now
    record = queue.get(0)
    assert queue.job(job_id).lease_until == pytest.approx(start + LEASE)

    clock.advance(20)
    new_expiry = record.touch()
    assert new_expiry == pytest.approx(start + 20 + LEASE)
    assert queue.job(job_id).lease_until == pytest.approx(start + 20 + LEASE)
    assert record.lease_until == pytest.approx(new_expiry)

    clock.advance(15)  # past the old expiry (start + 30), before the new one (start + 50)
    assert queue.recover() == 0
    assert queue.job(job_id).state is State.RUNNING
    assert queue.job(job_id).retries == 0
    assert queue.verify() == []

    clock.advance(16)  # past the new expiry: now recovery takes it
    assert queue.recover() == 1
    assert queue.job(job_id).state is State.PENDING
    with pytest.raises(QueueCorrupted):
        record.ack()


@pytest.mark.contract
@pytest.mark.rule_release
def test_release_returns_job_to_front_without_counting_attempt(queue: Queue, clock: FakeClock) -> None:
    """rule_release: release() -> pending, retries unchanged, ahead of jobs put while it ran."""
    first = queue.put("first", partition_key="p")
    record = queue.get(0)
    assert record.job_id == first
    clock.advance(5)
    later = queue.put("later", partition_key="p")

    record.release()

    job = queue.job(first)
    assert job.state is State.PENDING
    assert job.retries == 0 and job.error is None
    assert job.started_at is None and job.lease_until is None
    stats = queue.stats()
    assert (stats["pending"], stats["running"]) == (2, 0)
    again = queue.get(0)
    assert again.job_id == first and again.retries == 0
    assert queue.get(0).job_id == later
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_release
def test_release_after_retries_keeps_retry_count(queue: Queue) -> None:
    """rule_release: a job that already failed once keeps retries == 1 across a release."""
    job_id = queue.put("flaky")
    queue.get(0).nack("first try failed")
    record = queue.get(0)
    assert record.retries == 1
    record.release()
    assert queue.job(job_id).retries == 1
    assert queue.get(0).retries == 1


@pytest.mark.contract
@pytest.mark.rule_release
def test_release_with_delay_schedules_without_counting_attempt(queue: Queue, clock: FakeClock) -> None:
    """rule_release: release(delay=) -> scheduled until then, retries and attempts as before the claim,
    no error recorded; then it is claimed like any due job."""
    job_id = queue.put("not yet", max_retries=0)
    record = queue.get(0)
    attempts = record.attempts

    record.release(delay=60)

    job = queue.job(job_id)
    assert job.state is State.SCHEDULED
    assert job.retries == 0 and job.error is None and job.lease_until is None
    assert job.eta == pytest.approx(clock() + 60)
    stats = queue.stats()
    assert (stats["scheduled"], stats["running"], stats["pending"]) == (1, 0, 0)
    assert queue.verify() == []
    with pytest.raises(QueueEmpty):
        queue.get(0)
    clock.advance(61)
    again = queue.get(0)
    assert again.job_id == job_id and again.retries == 0 and again.attempts == attempts
    assert again.nack("fails now") is State.FAILED  # max_retries=0 still allows its one attempt
    queue.put("bad delay")
    held = queue.get(0)
    with pytest.raises(InvalidJob):
        held.release(delay=-1)
    assert queue.job(held.job_id).state is State.RUNNING


# ------------------------------------------------------------------------------------------ management


@pytest.mark.contract
@pytest.mark.rule_management
def test_cancel_removes_pending_and_scheduled_only(queue: Queue, probe: Probe) -> None:
    """rule_management: cancel() deletes pending and scheduled jobs; running, done and failed stay."""
    pending = queue.put("pending")
    scheduled = queue.put("scheduled", delay=30)
    assert queue.cancel(pending) is True
    assert queue.cancel(scheduled) is True
    assert queue.job(pending) is None and queue.job(scheduled) is None
    assert probe(queue).places(pending) == []  # nor its payload, nor an index entry

    running_id = queue.put("running")
    record = queue.get(0)
    assert queue.cancel(running_id) is False
    assert queue.job(running_id).state is State.RUNNING
    record.ack()
    assert queue.cancel(running_id) is False
    assert queue.job(running_id).state is State.DONE
    assert queue.cancel(pending) is False  # already gone

    stats = queue.stats()
    assert (stats["pending"], stats["scheduled"], stats["done"], stats["total"]) == (0, 0, 1, 3)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_management
def test_requeue_failed_job_resets_retries(queue: Queue) -> None:
    """rule_management: requeue() takes a failed job back to pending with retries reset, nothing else."""
    job_id = queue.put({"n": 1}, max_retries=1)
    queue.get(0).nack("one")
    queue.get(0).nack("two")
    assert queue.job(job_id).state is State.FAILED

    assert queue.requeue(job_id) is True

    job = queue.job(job_id)
    assert job.state is State.PENDING and job.retries == 0
    assert job.error is None and job.error_type is None and job.finished_at is None
    assert job.payload == {"n": 1} and job.max_retries == 1
    assert queue.stats()["failed"] == 0 and queue.stats()["pending"] == 1
    assert queue.requeue(job_id) is False  # pending: not failed
    record = queue.get(0)
    assert record.job_id == job_id and record.retries == 0
    assert queue.requeue(job_id) is False  # running
    record.ack()
    assert queue.requeue(job_id) is False  # done
    assert queue.job(job_id).state is State.DONE
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_management
def test_purge_running_is_refused(queue: Queue) -> None:
    """rule_management: purge(State.RUNNING) raises and deletes nothing."""
    job_id = queue.put("running")
    record = queue.get(0)
    with pytest.raises(InvalidJob, match="running"):
        queue.purge(State.RUNNING)
    with pytest.raises(InvalidJob):
        queue.purge("running")
    assert queue.job(job_id).state is State.RUNNING
    record.ack()


@pytest.mark.contract
@pytest.mark.rule_management
def test_purge_deletes_one_state_only(queue: Queue) -> None:
    """rule_management: purge(state) deletes every job in that state and returns how many."""
    failed = queue.put("x", max_retries=0)
    queue.get(0).nack("bad")
    pending = [queue.put(i) for i in range(5)]
    scheduled = [queue.put(i, delay=100) for i in range(3)]

    assert queue.purge(State.SCHEDULED) == 3
    assert all(queue.job(j) is None for j in scheduled)
    assert queue.purge(State.PENDING) == 5
    assert all(queue.job(j) is None for j in pending)
    assert queue.job(failed).state is State.FAILED
    assert queue.purge(State.PENDING) == 0
    stats = queue.stats()
    assert (stats["pending"], stats["scheduled"], stats["failed"], stats["total"]) == (0, 0, 1, 9)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_management
def test_purge_older_than_uses_finish_time(queue: Queue, clock: FakeClock) -> None:
    """rule_management: purge(done/failed, older_than=s) deletes the jobs that FINISHED over s ago."""
    first = queue.put("enqueued first, finishes last", partition_key="p", max_retries=0)
    second = queue.put("enqueued second, finishes first", partition_key="p", max_retries=0)
    r_first, r_second = queue.get(0), queue.get(0)
    assert (r_first.job_id, r_second.job_id) == (first, second)
    r_second.nack("old failure")
    clock.advance(100)
    r_first.nack("recent failure")
    clock.advance(10)

    assert queue.purge(State.FAILED, older_than=50) == 1
    assert queue.job(second) is None
    assert queue.job(first).state is State.FAILED
    assert queue.purge(State.FAILED, older_than=50) == 0
    assert queue.purge(State.FAILED, older_than=5) == 1
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_management
def test_purge_older_than_reaches_old_jobs_behind_many_newer_ones(
    clock: FakeClock,
    make_queue: Callable[..., Queue],
) -> None:
    """rule_management: purge(older_than=) finds every old enough job however many newer ones (by finish
    time) come before it in id order: 1,000+ recent failures must not hide 5 old ones."""
    with make_queue(shards=1, max_retries=0) as q:
        ids = q.put_many(range(1005))
        records = [q.get(0) for _ in ids]
        assert [r.job_id for r in records] == ids
        for record in records[-5:]:  # enqueued last, failed first
            record.nack("old failure")
        clock.advance(100)
        for record in records[:-5]:
            record.nack("recent failure")

        assert q.purge(State.FAILED, older_than=50) == 5
        assert all(q.job(j) is None for j in ids[-5:])
        assert q.stats()["failed"] == 1000
        assert q.verify() == []


# ------------------------------------------------------------------------------------------ processing


@pytest.mark.contract
@pytest.mark.rule_processing
def test_processing_acks_on_success(queue: Queue) -> None:
    """rule_processing: leaving the block normally acks the job."""
    job_id = queue.put("ok")
    with queue.processing(timeout=0) as record:
        assert record.job_id == job_id
        assert queue.job(job_id).state is State.RUNNING
    assert queue.job(job_id).state is State.DONE
    assert queue.stats()["done"] == 1


@pytest.mark.contract
@pytest.mark.rule_results
def test_a_job_done_after_a_failed_attempt_keeps_that_attempt_s_error(queue: Queue) -> None:
    """rule_results: a job that succeeds after a failed attempt is done with its result, and keeps the last
    failed attempt's error, type and traceback (the admin shows them as an earlier attempt's), on every
    store alike."""
    job_id = queue.put("flaky")
    try:
        raise ConnectionError("upstream reset")
    except ConnectionError as exc:
        queue.get(0).nack(exc)
    queue.get(0).ack("fine")
    job = queue.job(job_id)
    assert (job.state, job.result, job.attempts, job.retries) == (State.DONE, "fine", 2, 1)
    assert job.error == "upstream reset" and job.error_type == "ConnectionError"
    assert 'raise ConnectionError("upstream reset")' in job.traceback
    assert job.errors == (("ConnectionError", "upstream reset"),)


@pytest.mark.contract
@pytest.mark.rule_processing
def test_processing_nacks_and_reraises_on_exception(queue: Queue) -> None:
    """rule_processing: an exception nacks the job with that error, then propagates unchanged."""
    job_id = queue.put("fails")
    with pytest.raises(ValueError, match="handler failed"), queue.processing(timeout=0):
        raise ValueError("handler failed")
    job = queue.job(job_id)
    assert job.state is State.PENDING  # retries left, backoff 0: straight back
    assert job.retries == 1
    assert job.error == "handler failed" and job.error_type == "ValueError"
    assert "raise ValueError" in job.traceback


@pytest.mark.contract
@pytest.mark.rule_processing
def test_processing_releases_on_keyboard_interrupt(queue: Queue) -> None:
    """rule_processing: KeyboardInterrupt is not the job's fault: release, no attempt counted."""
    job_id = queue.put("interrupted")
    with pytest.raises(KeyboardInterrupt), queue.processing(timeout=0):
        raise KeyboardInterrupt
    job = queue.job(job_id)
    assert job.state is State.PENDING and job.retries == 0 and job.error is None
    assert queue.stats()["running"] == 0


@pytest.mark.contract
@pytest.mark.rule_processing
def test_processing_leaves_an_explicit_completion_alone(queue: Queue) -> None:
    """rule_processing: a block that nacked the record itself is not acked on the way out."""
    job_id = queue.put("explicit", max_retries=0)
    with queue.processing(timeout=0) as record:
        record.nack("gave up", permanent=True)
    job = queue.job(job_id)
    assert job.state is State.FAILED and job.error == "gave up"


@pytest.mark.contract
@pytest.mark.rule_processing
def test_processing_on_empty_queue_raises_queue_empty(queue: Queue) -> None:
    """rule_processing: nothing to take within the timeout -> QueueEmpty, and the block never runs."""
    ran = []
    with pytest.raises(QueueEmpty), queue.processing(timeout=0):
        ran.append(True)
    assert ran == []


# -------------------------------------------------------------------------------------- wait_until_empty


@pytest.mark.contract
@pytest.mark.rule_wait_until_empty
def test_wait_until_empty_true_when_nothing_waits_or_runs(queue: Queue) -> None:
    """rule_wait_until_empty: True at once for an empty queue, and once every job is done or failed."""
    assert queue.wait_until_empty(timeout=0) is True
    queue.put("a", partition_key="same shard: FIFO")
    queue.put("b", max_retries=0, partition_key="same shard: FIFO")
    first = queue.get(0)
    assert first.payload == "a"
    first.ack()
    queue.get(0).nack("x")
    assert queue.wait_until_empty(timeout=0) is True


@pytest.mark.contract
@pytest.mark.rule_wait_until_empty
@pytest.mark.parametrize("state", ["pending", "scheduled", "running"])
def test_wait_until_empty_false_while_a_job_waits_or_runs(queue: Queue, state: str) -> None:
    """rule_wait_until_empty: a pending, scheduled or running job makes it return False at the timeout."""
    queue.put("job", delay=60 if state == "scheduled" else None)
    if state == "running":
        queue.get(0)
    assert queue.stats()[state] == 1
    assert queue.wait_until_empty(timeout=0.02) is False


# ---------------------------------------------------------------------------------------- RFC-INV-08


@pytest.mark.contract
@pytest.mark.rfc_inv_08
def test_claim_index_follows_every_move_into_and_out_of_pending(
    queue: Queue,
    clock: FakeClock,
    probe: Probe,
) -> None:
    """RFC-INV-08: after every operation the claim index holds exactly the pending jobs, once each."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    held: list[Record] = []
    steps.append(("put", lambda: [queue.put(i, max_retries=1) for i in range(6)]))
    steps.append(("put_many", lambda: queue.put_many(["a", "b", "c"])))
    steps.append(("put scheduled", lambda: queue.put("later", delay=10)))
    steps.append(("get", lambda: held.extend(queue.get(0) for _ in range(5))))
    steps.append(("ack", lambda: held.pop().ack()))
    steps.append(("nack -> pending", lambda: held.pop().nack("retry")))
    steps.append(("release", lambda: held.pop().release()))
    steps.append(("nack -> scheduled", lambda: held.pop().nack("later", delay=5)))
    steps.append(("advance", lambda: (clock.advance(LEASE + 1), held.clear())))
    steps.append(("recover", queue.recover))
    steps.append(("recover again", queue.recover))
    steps.append(("promote", queue.promote))
    steps.append(("get all", lambda: held.extend(queue.get(0) for _ in range(queue.stats()["pending"]))))
    steps.append(("nack -> failed", lambda: [r.nack("fatal", permanent=True) for r in held[:3]]))
    steps.append(("requeue", lambda: [queue.requeue(j.job_id) for j in queue.jobs(State.FAILED)]))
    steps.append(("cancel", lambda: queue.cancel(queue.jobs(State.PENDING)[0].job_id)))
    steps.append(("purge pending", lambda: queue.purge(State.PENDING)))

    for name, step in steps:
        step()
        assert probe(queue).index_problems() == [], name
        assert queue.verify() == [], name
