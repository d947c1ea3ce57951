"""Operators' writes: ``requeue``, ``cancel``, ``cancel_requested``, ``delete``."""

from __future__ import annotations

import pytest

from queue_max_django.engine.cancels import CancelOutcome
from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from tests.store_contract.conftest import T0, claim, job, probe, put

ERROR = ("boom", "ValueError", None)
MISSING = 10**15 << 8


def dead_letter(store: Store, now: float = T0) -> int:
    [job_id] = put(store, now, "x")
    [held] = claim(store, now)
    store.fail(now + 1, job_id, held.token, ERROR, None, False)
    return job_id


@pytest.mark.sc_requeue
def test_requeue_brings_a_dead_letter_back_behind_the_waiting_jobs(store: Store) -> None:
    job_id = dead_letter(store)
    [waiting] = put(store, T0 + 2, "waiting")
    assert store.requeue(T0 + 3, job_id) is True
    back = job(store, T0 + 3, job_id)
    assert (back.state, back.retries, back.error, back.error_type, back.finished_at) == (
        State.PENDING, 0, None, None, None,
    )  # fmt: skip
    assert back.attempts == 1 and back.errors == (("ValueError", "boom"),)
    assert [c.job_id for c in claim(store, T0 + 4, limit=2)] == [waiting, job_id]
    assert store.requeue(T0 + 5, job_id) is False and store.requeue(T0 + 5, MISSING) is False


@pytest.mark.sc_requeue
@pytest.mark.sc_cancel_mark
def test_requeue_drops_the_cancel_mark(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    assert store.cancel(T0 + 1, job_id) is CancelOutcome.REQUESTED
    store.fail(T0 + 2, job_id, held.token, ("cancelled", "Cancelled", None), None, False)
    assert store.requeue(T0 + 3, job_id) and not store.cancel_requested(job_id)


@pytest.mark.sc_cancel
def test_cancel_removes_waiting_jobs_marks_running_ones_and_leaves_the_rest(store: Store) -> None:
    pending, running = put(store, T0, "p", "r")
    [scheduled] = put(store, T0, "s", ready_at=T0 + 60)
    done = put(store, T0, "d", queue="other")[0]
    store.claim(0, T0, ("other",), 30.0, b"x" * 16, None, None, 1)
    store.complete(T0, done, b"x" * 16, None, False)
    [held] = claim(store, T0)
    assert held.job_id == pending
    assert store.cancel(T0 + 1, scheduled) is CancelOutcome.REMOVED
    assert store.cancel(T0 + 1, running) is CancelOutcome.REMOVED
    assert store.cancel(T0 + 1, pending) is CancelOutcome.REQUESTED
    assert store.cancel(T0 + 1, done) is CancelOutcome.FINISHED
    assert store.cancel(T0 + 1, MISSING) is CancelOutcome.MISSING
    assert store.job(T0, scheduled) is None and store.job(T0, running) is None
    assert job(store, T0, pending).state is State.RUNNING and store.cancel_requested(pending)
    assert not store.cancel_requested(done)
    assert (store.counts()["pending"], store.counts()["scheduled"]) == (0, 0)


@pytest.mark.sc_cancel_mark
def test_a_mark_outlives_a_release_and_a_completion_and_goes_with_a_delete(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    store.cancel(T0 + 1, job_id)
    store.release(T0 + 2, job_id, held.token)
    assert store.cancel_requested(job_id)
    [again] = claim(store, T0 + 3)
    assert store.heartbeat(T0 + 4, job_id, again.token, 30.0)[1] is True
    store.complete(T0 + 5, job_id, again.token, None, False)
    assert store.cancel_requested(job_id)
    assert store.delete(T0 + 6, job_id, None)
    assert not store.cancel_requested(job_id)


@pytest.mark.sc_delete
def test_delete_removes_a_job_in_the_given_states_never_a_running_one(store: Store) -> None:
    failed = dead_letter(store, T0)
    pending, running = put(store, T0 + 1, "p", "r")
    store.claim(0, T0 + 2, None, 30.0, b"r" * 16, None, None, 1)  # takes ``pending``: FIFO
    assert job(store, T0, pending).state is State.RUNNING
    assert store.delete(T0 + 3, pending, None) is False  # running: never
    assert store.delete(T0 + 3, running, (State.FAILED,)) is False
    assert store.delete(T0 + 3, running, (State.PENDING,)) is True
    assert store.delete(T0 + 3, failed, None) is True
    assert store.job(T0, running) is None and store.job(T0, failed) is None
    assert store.delete(T0 + 3, MISSING, None) is False
    counts = store.counts()
    assert (counts["pending"], counts["running"], counts["failed"]) == (0, 1, 0)
    assert store.verify() == [] and probe(store).places(failed) == []
