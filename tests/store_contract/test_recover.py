"""Recovery: ``recover_expired`` takes back the jobs whose lease expired, charged or not."""

from __future__ import annotations

import pytest

from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from tests.store_contract.conftest import LEASE, T0, claim, job, put


@pytest.mark.sc_recover_charged
@pytest.mark.sc_recover_result
def test_an_expired_job_claimed_alone_is_charged_and_runs_again_at_once(store: Store) -> None:
    [job_id] = put(store, T0, "x", max_retries=1, queue="q", name="t.x")
    put(store, T0 + 1, "waiting")
    claim(store, T0 + 2, worker="w-9")
    assert store.recover_expired(T0 + 2 + LEASE - 1) == []  # not expired yet
    [got] = store.recover_expired(T0 + 2 + LEASE)  # expired at or before now
    assert (got.job_id, got.queue, got.name, got.state, got.charged) == (
        job_id,
        "q",
        "t.x",
        State.PENDING,
        True,
    )
    assert (got.attempt, got.attempts_allowed, got.worker) == (1, 2, "w-9")
    back = job(store, T0 + 40, job_id)
    assert back.state is State.PENDING and back.retries == 1 and back.error_type == "LeaseExpired"
    assert back.lease_until is None
    assert store.recover_expired(T0 + 100) == []  # idempotent
    assert store.counts()["running"] == 0 and store.verify() == []


@pytest.mark.sc_recover_charged
def test_an_expired_job_out_of_retries_becomes_a_dead_letter(store: Store) -> None:
    [job_id] = put(store, T0, "x", max_retries=0)
    claim(store, T0)
    [got] = store.recover_expired(T0 + LEASE + 1)
    assert got.state is State.FAILED and got.charged and (got.attempt, got.attempts_allowed) == (1, 1)
    dead = job(store, T0 + LEASE + 1, job_id)
    assert dead.state is State.FAILED and dead.retries == 1 and dead.error_type == "LeaseExpired"
    assert dead.finished_at == pytest.approx(T0 + LEASE + 1, abs=1e-6)


@pytest.mark.sc_recover_batch
@pytest.mark.sc_recover_result
def test_expired_jobs_of_a_batch_go_back_uncharged_at_their_place(store: Store) -> None:
    first, second = put(store, T0, "a", "b")
    claim(store, T0 + 1, limit=2)
    recovered = store.recover_expired(T0 + 1 + LEASE)
    assert sorted(r.job_id for r in recovered) == [first, second]
    assert all(r.state is State.PENDING and not r.charged and r.attempt == 1 for r in recovered)
    for job_id in (first, second):
        back = job(store, T0 + 40, job_id)
        assert (back.state, back.retries, back.attempts, back.error) == (State.PENDING, 0, 1, None)


@pytest.mark.sc_recover_alone
def test_a_recovered_job_is_claimed_alone_next_time(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    claim(store, T0)
    store.recover_expired(T0 + LEASE)
    put(store, T0 + LEASE, "next")
    [again] = claim(store, T0 + LEASE + 1, limit=5)
    assert again.job_id == job_id and again.alone and again.attempts == 2
