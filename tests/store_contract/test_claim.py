"""Claims: ``head``, ``claim``, ``claim_job``, ``find_admissible``, ``promote_due``, and the quarantine of a
job whose payload does not decode."""

from __future__ import annotations

import pytest

from queue_max_django.engine.job import CORRUPTED, State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import CorruptedJobQuarantined
from queue_max_django.engine.tokens import new_token
from tests.store_contract.conftest import LEASE, T0, claim, job, probe, put


@pytest.mark.sc_head
def test_head_reads_the_best_priority_and_the_earliest_eta(store: Store) -> None:
    assert (store.head(0, T0, None).priority, store.head(0, T0, None).next_eta) == (None, None)
    put(store, T0, "low", priority=-5)
    put(store, T0, "high", priority=5, queue="other")
    put(store, T0, "later", ready_at=T0 + 60)
    before = store.counts()
    head = store.head(0, T0, None)
    assert head.priority == 5 and head.next_eta == pytest.approx(T0 + 60, abs=1e-6)
    assert store.head(0, T0, ("default",)).priority == -5
    assert store.counts() == before


@pytest.mark.sc_claim_order
def test_a_claim_takes_higher_priority_then_earlier_ready_then_smaller_id(store: Store) -> None:
    a = put(store, T0, "a")[0]
    b, c = put(store, T0 + 1, "b", "c")
    d = put(store, T0 + 2, "d", priority=9)[0]
    put(store, T0, "elsewhere", queue="other", priority=50)
    claimed = claim(store, T0 + 3, limit=10, queues=("default",))
    assert [x.job_id for x in claimed] == [d, a, b, c]


@pytest.mark.sc_claim_marks
def test_a_claimed_job_is_running_under_the_token_and_lease(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    token = new_token()
    [got] = store.claim(0, T0 + 1, None, LEASE, token, None, "worker-1", 1).claimed
    assert (got.job_id, got.token, got.payload, got.attempts, got.retries) == (job_id, token, "x", 1, 0)
    assert got.lease_until == pytest.approx(T0 + 1 + LEASE, abs=1e-6) and got.worker_ids == ("worker-1",)
    found = job(store, T0 + 1, job_id)
    assert found.state is State.RUNNING and found.attempts == 1 and found.retries == 0
    assert found.started_at == pytest.approx(T0 + 1, abs=1e-6) and found.worker_ids == ("worker-1",)
    assert found.lease_until == pytest.approx(T0 + 1 + LEASE, abs=1e-6)
    assert (store.counts()["pending"], store.counts()["running"]) == (0, 1)


@pytest.mark.sc_claim_promotes
def test_a_claim_promotes_due_jobs_first(store: Store) -> None:
    put(store, T0, "low", priority=0)
    [due] = put(store, T0, "due", priority=5, ready_at=T0 + 10)
    [got] = claim(store, T0 + 10)
    assert got.job_id == due


@pytest.mark.sc_claim_outranked
@pytest.mark.sc_claim_outcome
def test_a_claim_stops_below_min_priority_and_says_what_comes_next(store: Store) -> None:
    put(store, T0, "low", priority=1)
    put(store, T0, "later", ready_at=T0 + 60)
    outcome = store.claim(0, T0, None, LEASE, new_token(), 2, None, 5)
    assert outcome.claimed == [] and outcome.head_priority == 1
    assert outcome.next_eta == pytest.approx(T0 + 60, abs=1e-6)
    assert store.counts()["pending"] == 1
    outcome = store.claim(0, T0, None, LEASE, new_token(), None, None, 5)
    assert len(outcome.claimed) == 1 and outcome.head_priority is None
    assert isinstance(outcome.contended, bool)


@pytest.mark.sc_claim_batch
def test_a_job_whose_lease_expired_in_a_batch_is_claimed_alone(store: Store) -> None:
    first, second = put(store, T0, "a", "b")
    third = put(store, T0 + 1, "c")[0]
    assert len(claim(store, T0 + 2, limit=2)) == 2
    store.recover_expired(T0 + 2 + LEASE)  # both back uncharged, each to be claimed alone
    assert [c.job_id for c in claim(store, T0 + 100, limit=5)] == [first]
    [alone] = claim(store, T0 + 100, limit=5)
    assert alone.job_id == second and alone.alone
    assert [c.job_id for c in claim(store, T0 + 100, limit=5)] == [third]


@pytest.mark.sc_claim_quarantine
@pytest.mark.sc_quarantine
def test_a_payload_that_does_not_decode_is_quarantined_by_the_claim(store: Store) -> None:
    bad, good = put(store, T0, "bad", "good")
    probe(store).break_payload(bad)
    with pytest.raises(CorruptedJobQuarantined) as caught:
        claim(store, T0 + 1)
    assert caught.value.job_id == bad
    dead = job(store, T0 + 1, bad)
    assert dead.state is State.FAILED and dead.error_type == CORRUPTED and dead.corrupted
    assert (dead.error or "").startswith("corrupted: ") and dead.finished_at is not None
    assert [c.job_id for c in claim(store, T0 + 2)] == [good]
    assert store.requeue(T0 + 3, bad) is False
    assert store.verify() == []


@pytest.mark.sc_claim_quarantine
def test_a_claim_keeps_the_jobs_before_a_broken_one(store: Store) -> None:
    good, bad, after = put(store, T0, "good", "bad", "after")
    probe(store).break_payload(bad)
    assert [c.job_id for c in claim(store, T0 + 1, limit=3)] == [good]
    assert job(store, T0 + 1, bad).corrupted
    after_job = job(store, T0 + 1, after)
    assert after_job.state is State.PENDING and after_job.attempts == 0 and after_job.retries == 0


@pytest.mark.sc_claim_job
def test_claim_job_takes_exactly_that_job_or_nothing(store: Store) -> None:
    first, wanted = put(store, T0, "first", "wanted")
    [later] = put(store, T0, "later", ready_at=T0 + 60)
    got = store.claim_job(T0, wanted, LEASE, new_token(), "w", False)
    assert got is not None and got.job_id == wanted and not got.alone
    assert job(store, T0, first).state is State.PENDING
    assert store.claim_job(T0, wanted, LEASE, new_token(), "w", False) is None  # running now
    assert store.claim_job(T0, later, LEASE, new_token(), "w", False) is None
    assert store.claim_job(T0, 10**15 << 8, LEASE, new_token(), "w", False) is None  # missing
    early = store.claim_job(T0, later, LEASE, new_token(), "w", True)
    assert early is not None and job(store, T0, later).state is State.RUNNING


@pytest.mark.sc_claim_job
@pytest.mark.sc_quarantine
def test_claim_job_quarantines_a_payload_that_does_not_decode(store: Store) -> None:
    [bad] = put(store, T0, "bad")
    probe(store).break_payload(bad)
    assert store.claim_job(T0, bad, LEASE, new_token(), None, False) is None
    assert job(store, T0, bad).corrupted


@pytest.mark.sc_find_admissible
def test_find_admissible_skips_held_back_queues_and_names(store: Store) -> None:
    put(store, T0, "held", queue="slow", priority=9)
    put(store, T0, "named", name="t.held", priority=8)
    [free] = put(store, T0, "free", priority=1)
    put(store, T0, "anon", priority=0)
    put(store, T0, "later", ready_at=T0 + 60)
    before = store.counts()
    candidate, eta = store.find_admissible(0, T0, None, frozenset({"slow"}), frozenset({"t.held"}))
    assert candidate is not None and candidate.job_id == free and candidate.shard == 0
    assert (candidate.queue, candidate.name) == ("default", None)
    assert candidate.order[0] == -1 and candidate.order[2] == free
    assert eta == pytest.approx(T0 + 60, abs=1e-6) and store.counts() == before
    none, _ = store.find_admissible(0, T0, ("nothing",), frozenset(), frozenset())
    assert none is None


@pytest.mark.sc_promote
def test_promote_due_makes_due_jobs_pending_fifo_by_eta(store: Store) -> None:
    [late] = put(store, T0, "late", ready_at=T0 + 20)
    [early] = put(store, T0, "early", ready_at=T0 + 10)
    put(store, T0, "not yet", ready_at=T0 + 60)
    assert store.promote_due(None, T0 + 20) == 2
    assert store.counts()["pending"] == 2 and store.counts()["scheduled"] == 1
    assert [c.job_id for c in claim(store, T0 + 21, limit=2)] == [early, late]
    assert store.promote_due(0, T0 + 21) == 0
