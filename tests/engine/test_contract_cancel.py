"""Contract tests of cancelling (issue 20, "Cancelling"), on both stores: ``Queue.request_cancel`` removes a
waiting or scheduled job, marks a running one "cancel requested" apart from its record, the holder's
heartbeat reports the mark, a job failed with ``Cancelled`` is a dead letter that is not retried, and
requeue brings it back without the mark. A finished job is left as it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from queue_max_django.engine import (
    CANCELLED,
    JOB_CANCELLED,
    JOB_FAILED,
    Cancelled,
    CancelNote,
    CancelOutcome,
    InvalidJob,
    Queue,
    QueueEmpty,
    State,
)
from tests.engine.conftest import FakeClock
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]
CANCELLED_TYPE = "queue_max_django.engine.cancels.Cancelled"


@pytest.mark.contract
def test_a_waiting_or_scheduled_job_is_removed(queue: Queue, probe: Probe) -> None:
    waiting, scheduled = queue.put("now"), queue.put("later", delay=60)
    assert queue.request_cancel(waiting) is CancelOutcome.REMOVED
    assert queue.request_cancel(scheduled) is CancelOutcome.REMOVED
    assert queue.job(waiting) is None and queue.job(scheduled) is None
    assert probe(queue).stored(waiting) is None and probe(queue).cancel_marks() == set()
    stats = queue.stats()
    assert stats["pending"] == stats["scheduled"] == 0
    with pytest.raises(QueueEmpty):
        queue.get(0)


@pytest.mark.contract
def test_a_running_job_is_marked_apart_and_the_heartbeat_reports_it(queue: Queue, probe: Probe) -> None:
    job_id = queue.put("long")
    other = queue.put("other")
    claimed = {record.job_id: record for record in (queue.get(0), queue.get(0))}  # any order across shards
    record, other_record = claimed[job_id], claimed[other]
    before = probe(queue).stored(job_id)
    assert queue.request_cancel(job_id) is CancelOutcome.REQUESTED
    assert probe(queue).cancel_marks() == {job_id}
    # The mark lives apart; the record only gains the note of who asked and when, in its metadata.
    note = {"_cancel": {"by": None, "at": queue.now()}}
    assert probe(queue).stored(job_id) == dataclasses.replace(before, metadata=note)
    assert queue.job(job_id).cancel_note == CancelNote(None, queue.now())
    assert queue.job(job_id).state is State.RUNNING  # still its holder's
    assert record.cancel_requested is False  # the holder learns at its next heartbeat
    record.touch()
    other_record.touch()
    assert record.cancel_requested is True and other_record.cancel_requested is False
    assert queue.request_cancel(job_id) is CancelOutcome.REQUESTED  # again: the same mark
    assert probe(queue).cancel_marks() == {job_id}
    assert queue.cancel_requested(job_id) and not queue.cancel_requested(other)  # what the admin shows


@pytest.mark.contract
def test_cancelled_is_a_dead_letter_not_retried_and_requeue_brings_it_back(
    queue: Queue, probe: Probe, clock: FakeClock
) -> None:
    job_id = queue.put("long", max_retries=5)
    record = queue.get(0)
    queue.request_cancel(job_id)
    record.touch()
    assert record.cancel_requested
    assert record.nack(Cancelled(f"job {job_id} was cancelled"), permanent=True) is State.FAILED
    job = queue.job(job_id)
    assert job.state is State.FAILED and job.error_type == CANCELLED_TYPE
    assert job.error == f"job {job_id} was cancelled" and job.retries == 1
    assert [j.job_id for j in queue.dead_letters()] == [job_id]
    clock.advance(3600)
    queue.recover()
    queue.promote()
    assert queue.job(job_id).state is State.FAILED  # never retried
    assert queue.request_cancel(job_id) is CancelOutcome.FINISHED  # nothing to cancel, nothing changed
    assert queue.job(job_id).state is State.FAILED
    assert queue.requeue(job_id)
    assert probe(queue).cancel_marks() == set()  # requeued: it runs afresh
    again = queue.get(0)
    assert again.job_id == job_id
    again.touch()
    assert not again.cancel_requested
    again.ack("done")
    assert queue.job(job_id).state is State.DONE


@pytest.mark.contract
def test_a_released_job_keeps_its_mark_for_its_next_holder(queue: Queue, probe: Probe) -> None:
    job_id = queue.put("long")
    record = queue.get(0)
    queue.request_cancel(job_id)
    record.release()  # its worker stopped before a heartbeat told it
    assert queue.job(job_id).state is State.PENDING and probe(queue).cancel_marks() == {job_id}
    next_holder = queue.get(0)
    next_holder.touch()
    assert next_holder.cancel_requested


@pytest.mark.contract
def test_finished_and_missing_jobs_are_left_as_they_are(queue: Queue, probe: Probe) -> None:
    job_id = queue.put("quick")
    queue.get(0).ack({"answer": 42})
    assert queue.request_cancel(job_id) is CancelOutcome.FINISHED
    job = queue.job(job_id)
    assert job.state is State.DONE and job.result == {"answer": 42}
    assert probe(queue).cancel_marks() == set()
    assert queue.request_cancel(job_id + (1 << 20) * 256) is CancelOutcome.MISSING
    with pytest.raises(InvalidJob):
        queue.request_cancel(0)


@pytest.mark.contract
def test_marks_of_ended_jobs_are_dropped_when_the_job_goes(queue: Queue, probe: Probe) -> None:
    """A job that finished anyway (done despite its mark) leaves a mark that goes with the job: vacuum."""
    job_id = queue.put("quick")
    record = queue.get(0)
    queue.request_cancel(job_id)
    record.ack()
    queue.vacuum(older_than=0)
    assert queue.job(job_id) is None and probe(queue).cancel_marks() == set()


@pytest.mark.contract
def test_who_cancelled_and_when_is_noted_in_the_metadata_and_kept(queue: Queue, clock: FakeClock) -> None:
    """Issue 29: who asked and when go with the job, in its metadata, written with the mark; the holder's own
    metadata saves keep the note; the ended job reads as cancelled (``Job.cancelled``), not as a failure."""
    job_id = queue.put("long", metadata={"step": 0})
    record = queue.get(0)
    asked_at = queue.now()
    assert queue.request_cancel(job_id, by="alice") is CancelOutcome.REQUESTED
    assert queue.job(job_id).metadata == {"step": 0, "_cancel": {"by": "alice", "at": asked_at}}
    record.save_metadata({"step": 7})  # the task saves its progress, knowing nothing of the note
    assert record.metadata == {"step": 7}
    assert queue.job(job_id).metadata == {"step": 7, "_cancel": {"by": "alice", "at": asked_at}}
    clock.advance(5)
    record.nack(Cancelled(f"job {job_id} was cancelled"), permanent=True)
    job = queue.job(job_id)
    assert job.state is State.FAILED and job.error_type == CANCELLED and job.cancelled
    assert job.cancel_note == CancelNote("alice", asked_at)
    assert queue.request_cancel(job_id, by="bob") is CancelOutcome.FINISHED
    assert queue.job(job_id).cancel_note == CancelNote("alice", asked_at)  # a finished job is left as it is
    with pytest.raises(InvalidJob):
        queue.request_cancel(job_id, by=42)  # type: ignore[arg-type]
    failed = queue.put("boom")
    queue.get(0).nack(ValueError("boom"), permanent=True)
    assert not queue.job(failed).cancelled and queue.job(failed).cancel_note is None


@pytest.mark.contract
def test_a_cancel_is_not_a_failure_to_breakers_or_listeners(queue: Queue) -> None:
    """Issue 29: a cancelled job emits ``job_cancelled`` (not ``job_failed``, which dead-letter alerts hear),
    and no circuit breaker counts it as a failure."""
    queue.set_circuit_breaker("name:t", threshold=1, recovery_timeout=60)
    heard: list[tuple[str, int]] = []
    queue.events.on(JOB_CANCELLED, lambda **fields: heard.append((JOB_CANCELLED, fields["job_id"])))
    queue.events.on(JOB_FAILED, lambda **fields: heard.append((JOB_FAILED, fields["job_id"])))
    job_id = queue.put("long", name="t")
    record = queue.get(0)
    queue.request_cancel(job_id, by="queue_cancel command")
    record.nack(Cancelled("cancelled"), permanent=True)
    assert heard == [(JOB_CANCELLED, job_id)]
    assert queue.stats()["circuit_breakers"]["name:t"]["state"] == "closed"  # threshold 1: a failure opens it
    other = queue.put("next", name="t")
    queue.get(0).nack(ValueError("boom"), permanent=True)
    assert heard[-1] == (JOB_FAILED, other)
    assert queue.stats()["circuit_breakers"]["name:t"]["state"] == "open"


@pytest.mark.contract
def test_cancelled_dead_letters_are_counted_within_failed_until_they_leave(queue: Queue) -> None:
    """Issue 29: ``stats()["cancelled"]`` counts the dead letters that are cancels, within ``failed``; the
    store's ``cancel_counts`` (the metrics' counter) counts every cancel ever, as the failed totals do."""

    def cancel_one() -> int:
        job_id = queue.put("c")
        record = queue.get(0)
        queue.request_cancel(job_id)
        record.nack(Cancelled("cancelled"), permanent=True)
        return job_id

    first, second, _third, _fourth = (cancel_one() for _ in range(4))
    queue.put("f")
    queue.get(0).nack(ValueError("boom"), permanent=True)
    stats = queue.stats()
    assert (stats["failed"], stats["cancelled"]) == (5, 4)
    assert sum(stats[state.value] for state in State) <= stats["total"]  # cancelled is within failed
    assert queue._live().cancel_counts() == (4, 4)
    assert queue.requeue(first)  # runs again: no longer a cancel
    assert queue.delete(second)
    assert queue.purge(State.FAILED) == 3  # third, fourth and the failure
    assert queue.stats()["cancelled"] == 0
    assert queue._live().cancel_counts() == (0, 4)  # ever: it only grows
    again = queue.get(0)
    assert again.job_id == first
    again.nack(ValueError("a failure this time"), permanent=True)
    assert queue.stats()["cancelled"] == 0 and queue._live().cancel_counts() == (0, 4)
