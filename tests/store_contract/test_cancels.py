"""A cancel is its own outcome: who asked and when (the note in the job's metadata), the dead letters that are
cancels counted apart (``counts()["cancelled"]``, ``cancel_counts``), and a "cancel requested" mark that lives
as long as its job is stored and goes with it."""

from __future__ import annotations

import pytest

from queue_max_django.engine.cancels import CancelOutcome
from queue_max_django.engine.job import CANCEL_KEY, CANCELLED, CancelNote, State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import Claimed
from tests.store_contract.conftest import T0, claim, job, probe, put

CANCEL_ERROR = ("job was cancelled", CANCELLED, None)


def marked(store: Store, now: float = T0) -> Claimed:
    """A running job marked "cancel requested". -> its claim."""
    put(store, now, "x")
    [held] = claim(store, now)
    assert store.cancel(now + 1, held.job_id) is CancelOutcome.REQUESTED
    return held


def cancelled(store: Store, now: float = T0) -> int:
    """A dead letter that is a cancel, as a holder that saw the mark ends it. -> its id."""
    held = marked(store, now)
    assert store.fail(now + 2, held.job_id, held.token, CANCEL_ERROR, None, False) is State.FAILED
    return held.job_id


@pytest.mark.sc_cancel_note
def test_a_cancel_notes_who_and_when_in_the_running_jobs_metadata(store: Store) -> None:
    put(store, T0, "a", "b", metadata=b'{"step": 0}')
    first, second = claim(store, T0, limit=2)
    [waiting] = put(store, T0, "waiting")
    assert store.cancel(T0 + 1.5, first.job_id, by="alice") is CancelOutcome.REQUESTED
    assert store.cancel(T0 + 2, second.job_id) is CancelOutcome.REQUESTED
    assert job(store, T0, first.job_id).metadata == {"step": 0, CANCEL_KEY: {"by": "alice", "at": T0 + 1.5}}
    assert job(store, T0, second.job_id).metadata == {"step": 0, CANCEL_KEY: {"by": None, "at": T0 + 2}}
    assert store.cancel(T0 + 3, second.job_id, by="bob") is CancelOutcome.REQUESTED  # a later note wins
    assert job(store, T0, second.job_id).metadata[CANCEL_KEY] == {"by": "bob", "at": T0 + 3}
    # The holder's saves replace its own metadata and keep the note; a job left as it is gets none.
    store.save_metadata(T0 + 4, first.job_id, first.token, b'{"step": 7}')
    store.save_metadata(T0 + 4, second.job_id, second.token, None)
    assert job(store, T0, first.job_id).metadata == {"step": 7, CANCEL_KEY: {"by": "alice", "at": T0 + 1.5}}
    assert job(store, T0, second.job_id).metadata == {CANCEL_KEY: {"by": "bob", "at": T0 + 3}}
    store.complete(T0 + 5, second.job_id, second.token, None, False)
    assert store.cancel(T0 + 6, second.job_id, by="carol") is CancelOutcome.FINISHED
    assert job(store, T0, second.job_id).metadata == {CANCEL_KEY: {"by": "bob", "at": T0 + 3}}
    assert store.fail(T0 + 7, first.job_id, first.token, CANCEL_ERROR, None, False) is State.FAILED
    assert job(store, T0, first.job_id).cancel_note == CancelNote("alice", T0 + 1.5)
    assert job(store, T0, waiting).metadata == {} and job(store, T0, waiting).cancel_note is None
    assert store.verify() == []


@pytest.mark.sc_cancel_counts
@pytest.mark.sc_counts
def test_dead_letters_that_are_cancels_are_counted_within_failed_until_they_leave(store: Store) -> None:
    held = marked(store, T0)
    store.fail(T0 + 2, held.job_id, held.token, CANCEL_ERROR, T0 + 60, False)  # retried: not a dead letter
    assert store.counts()["cancelled"] == 0 and store.cancel_counts() == (0, 0)
    assert store.delete(T0 + 3, held.job_id, None)
    first, second, third, fourth = (cancelled(store, T0 + 10 * i) for i in range(1, 5))
    put(store, T0 + 50, "boom")
    [failing] = claim(store, T0 + 50)
    store.fail(T0 + 51, failing.job_id, failing.token, ("boom", "ValueError", None), None, False)
    counts = store.counts()
    assert (counts["failed"], counts["cancelled"]) == (5, 4)
    assert sum(store.counts(shard)["cancelled"] for shard in range(store.shards)) == 4
    assert store.cancel_counts() == (4, 4)
    assert store.vacuum(T0 + 100, T0 + 100, 0.0) == 0  # dead letters stay, and so do their counts
    assert store.requeue(T0 + 100, first) and store.cancel_counts() == (3, 4)  # it runs again: no longer one
    assert store.delete(T0 + 100, second, None) and store.cancel_counts() == (2, 4)
    assert store.purge(T0 + 100, State.FAILED, T0 + 35) == 1 and store.cancel_counts() == (1, 4)  # third
    assert store.purge(T0 + 100, State.FAILED, None) == 2  # fourth and the failure
    assert store.counts()["cancelled"] == 0 and store.cancel_counts() == (0, 4)  # ever: it only grows
    [again] = claim(store, T0 + 200)
    assert again.job_id == first
    store.fail(T0 + 201, first, again.token, ("boom", "ValueError", None), None, False)
    assert store.counts()["cancelled"] == 0 and store.cancel_counts() == (0, 4)
    assert third and fourth and store.verify() == []


@pytest.mark.sc_cancel_mark
def test_a_mark_stays_while_its_job_is_stored_and_goes_with_it(store: Store) -> None:
    released = marked(store, T0)
    store.release(T0 + 2, released.job_id, released.token)
    assert store.cancel_requested(released.job_id)  # its next holder sees it
    assert store.cancel(T0 + 3, released.job_id) is CancelOutcome.REMOVED
    assert not store.cancel_requested(released.job_id)  # removed: its mark with it
    done = marked(store, T0 + 10)
    store.complete(T0 + 12, done.job_id, done.token, None, False)
    dead = cancelled(store, T0 + 20)
    assert store.vacuum(T0 + 30, T0 + 11, 0.0) == 0  # neither job goes: both keep their marks
    assert store.cancel_requested(done.job_id) and store.cancel_requested(dead)
    assert probe(store).cancel_marks() == {done.job_id, dead}
    assert store.vacuum(T0 + 30, T0 + 12, 0.0) == 1 and not store.cancel_requested(done.job_id)
    assert store.delete(T0 + 30, dead, None) and not store.cancel_requested(dead)
    assert probe(store).cancel_marks() == set()


@pytest.mark.sc_cancel_mark
@pytest.mark.sc_purge
def test_a_purge_takes_the_marks_of_the_jobs_it_removes(store: Store) -> None:
    running = marked(store, T0)
    dead = cancelled(store, T0 + 10)
    done = marked(store, T0 + 20)
    store.complete(T0 + 22, done.job_id, done.token, None, False)
    waiting = marked(store, T0 + 30)
    store.release(T0 + 32, waiting.job_id, waiting.token)
    assert probe(store).cancel_marks() == {dead, done.job_id, waiting.job_id, running.job_id}
    assert store.purge(T0 + 40, State.FAILED, None) == 1
    assert store.purge(T0 + 40, State.DONE, None) == 1
    assert store.purge(T0 + 40, State.PENDING, None) == 1
    assert probe(store).cancel_marks() == {running.job_id} and store.cancel_requested(running.job_id)
    assert store.verify() == []
