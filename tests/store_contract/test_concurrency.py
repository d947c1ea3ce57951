"""Concurrency limits (``engine/stores/contract/concurrency.py``): limited jobs wait as pending jobs, only the
limited claim starts them, group by group in turn, and the jobs running per key are counted by the
transactions that start and end jobs."""

from __future__ import annotations

from typing import Any

import pytest

from queue_max_django.engine.concurrency import group_of
from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.concurrency import LimitedClaim
from queue_max_django.engine.stores.types import Claimed, NewJobs
from queue_max_django.engine.tokens import new_token
from tests.store_contract.conftest import LEASE, T0, claim, job, pack, put, spec


def lput(store: Store, now: float, *payloads: Any, limits: Any, **options: Any) -> list[int]:
    """Enqueue ``payloads`` as one batch of limited jobs (``limits``: ((key, n), ...)) to shard 0."""
    options.setdefault("name", "t")
    limited = spec(**options)
    limited.concurrency = tuple(limits)
    batch = NewJobs([pack(p) for p in payloads or ("job",)], limited, None)
    return store.enqueue(now, 0, [batch], False)


class One:
    """A ``LimitedClaim`` of at most one job: ``claimed`` is that job or None."""

    def __init__(self, outcome: LimitedClaim) -> None:
        assert len(outcome.claimed) <= 1
        self.claimed = outcome.claimed[0] if outcome.claimed else None
        self.waiting = outcome.waiting


def lclaim(store: Store, now: float, *, queues: tuple[str, ...] | None = None,
           min_priority: int | None = None) -> One:  # fmt: skip
    return One(store.concurrency.claim(0, now, queues, LEASE, new_token(), "w1", min_priority, 1))


def started(store: Store, now: float, count: int) -> list[Claimed]:
    """Up to ``count`` limited claims; -> what they took."""
    out = []
    for _ in range(count):
        taken = lclaim(store, now).claimed
        if taken is not None:
            out.append(taken)
    return out


@pytest.mark.sc_concurrency_pending
def test_a_limited_job_is_pending_everywhere_but_only_the_limited_claim_starts_it(store: Store) -> None:
    [held] = lput(store, T0, "limited", limits=[("task:t", 1)])
    assert job(store, T0, held).state is State.PENDING
    assert store.counts()["pending"] == 1
    assert store.queue_counts(T0)["default"]["pending"] == 1
    assert [j.job_id for j in store.list_jobs(T0, State.PENDING, queue=None, name=None, after=None, limit=10,
                                              newest_first=False, shard=None)] == [held]  # fmt: skip
    listed = store.list_jobs(T0, State.PENDING, queue="default", name=None, after=None, limit=10,
                             newest_first=False, shard=None)  # fmt: skip
    assert [j.job_id for j in listed] == [held]
    assert store.oldest_pending(T0) == {"default": pytest.approx(T0, abs=1e-6)}
    head = store.head(0, T0, None)
    assert head.priority is None and head.limited
    assert not store.head(0, T0, ("other",)).limited
    assert claim(store, T0 + 1, limit=10) == []
    assert store.find_admissible(0, T0 + 1, None, frozenset(), frozenset())[0] is None
    [plain] = put(store, T0 + 2, "plain")
    assert [c.job_id for c in claim(store, T0 + 3, limit=10)] == [plain]
    outcome = lclaim(store, T0 + 4)
    assert outcome.claimed is not None and outcome.claimed.job_id == held and not outcome.waiting
    assert job(store, T0 + 4, held).state is State.RUNNING
    assert store.verify() == []


@pytest.mark.sc_concurrency_pending
def test_a_waiting_limited_job_can_be_cancelled_and_deleted(store: Store) -> None:
    a, b = lput(store, T0, "a", "b", limits=[("task:t", 1)])
    assert store.cancel(T0, a).value == "removed"
    assert store.delete(T0, b, None)
    assert store.counts()["pending"] == 0 and store.concurrency.waiting() == {}
    assert lclaim(store, T0).claimed is None
    assert not store.head(0, T0, None).limited
    assert store.verify() == []


@pytest.mark.sc_concurrency_claim
def test_no_more_than_n_start_and_the_count_is_stored(store: Store) -> None:
    ids = lput(store, T0, *range(5), limits=[("task:t", 2)])
    taken = started(store, T0, 5)
    assert [c.job_id for c in taken] == ids[:2]
    assert [job(store, T0, i).state for i in ids] == [State.RUNNING] * 2 + [State.PENDING] * 3
    assert store.concurrency.running() == {"task:t": 2}
    outcome = lclaim(store, T0)
    assert outcome.claimed is None and outcome.waiting


@pytest.mark.sc_concurrency_claim
def test_every_limit_of_a_job_must_have_room(store: Store) -> None:
    a = lput(store, T0, "a", limits=[("queue:default", 1), ("task:t:A", 5)])[0]
    b = lput(store, T0, "b", limits=[("queue:default", 1), ("task:t:B", 5)])[0]
    assert [c.job_id for c in started(store, T0, 3)] == [a]
    assert job(store, T0, b).state is State.PENDING
    assert store.concurrency.running() == {"queue:default": 1, "task:t:A": 1}


@pytest.mark.sc_concurrency_count
def test_every_end_of_a_job_gives_its_slot_back(store: Store) -> None:
    lput(store, T0, *range(6), limits=[("task:t", 1)])

    def one() -> Claimed:
        taken = lclaim(store, T0).claimed
        assert taken is not None
        assert lclaim(store, T0).claimed is None  # the limit is full
        assert store.concurrency.running() == {"task:t": 1}
        return taken

    first = one()
    store.complete(T0, first.job_id, first.token, None, False)
    second = one()
    store.fail(T0, second.job_id, second.token, ("boom", "E", None), None, False)
    third = one()
    store.release(T0, third.job_id, third.token)
    fourth = one()
    store.fail(T0, fourth.job_id, fourth.token, ("boom", "E", None), T0 + 60, False)
    fifth = one()
    assert store.complete_many(T0, [(fifth.job_id, fifth.token, None)], False) == {}
    sixth = one()
    recovered = store.recover_expired(T0 + LEASE + 1)
    assert [r.job_id for r in recovered] == [sixth.job_id]
    assert store.concurrency.running() == {}
    assert lclaim(store, T0 + LEASE + 2).claimed is not None
    assert store.verify() == []


@pytest.mark.sc_concurrency_claim_job
def test_claim_job_respects_a_full_limit(store: Store) -> None:
    a, b = lput(store, T0, "a", "b", limits=[("task:t", 1)])
    first = store.claim_job(T0, a, LEASE, new_token(), None, False)
    assert first is not None
    assert store.concurrency.running() == {"task:t": 1}
    assert store.claim_job(T0, b, LEASE, new_token(), None, False) is None
    assert job(store, T0, b).state is State.PENDING
    store.complete(T0, a, first.token, None, False)
    assert store.claim_job(T0, b, LEASE, new_token(), None, False) is not None


@pytest.mark.sc_concurrency_turns
def test_one_keys_many_jobs_do_not_starve_another_keys_one(store: Store) -> None:
    lput(store, T0, *range(100_000), limits=[("task:t:A", 1000)])
    [b] = lput(store, T0 + 1, "b", limits=[("task:t:B", 1000)])
    taken = [c.job_id for c in started(store, T0 + 2, 2)]
    assert b in taken
    assert store.concurrency.waiting() == {group_of("default", (("task:t:A", 1),)): 99_999}


@pytest.mark.sc_concurrency_turns
def test_groups_take_turns(store: Store) -> None:
    a = lput(store, T0, "a1", "a2", "a3", limits=[("task:t:A", 9)])
    b = lput(store, T0 + 1, "b1", "b2", limits=[("task:t:B", 9)])
    c = lput(store, T0 + 2, "c1", limits=[("task:t:C", 9)])
    order = [x.job_id for x in started(store, T0 + 3, 6)]
    assert order == [a[0], b[0], c[0], a[1], b[1], a[2]]


@pytest.mark.sc_concurrency_held
def test_a_held_job_stays_uncharged_and_holds_back_nothing_else(store: Store) -> None:
    [a1, a2] = lput(store, T0, "a1", "a2", limits=[("task:t:A", 1)])
    [b] = lput(store, T0 + 1, "b", limits=[("task:t:B", 1)])
    assert lclaim(store, T0 + 2).claimed.job_id == a1  # type: ignore[union-attr]
    assert lclaim(store, T0 + 2).claimed.job_id == b  # type: ignore[union-attr]  # a2 is held: passed over
    held = job(store, T0 + 2, a2)
    assert held.state is State.PENDING and held.attempts == 0 and held.retries == 0
    assert lclaim(store, T0 + 2).claimed is None


@pytest.mark.sc_concurrency_priority
def test_a_group_below_the_callers_floor_keeps_its_turn(store: Store) -> None:
    [low] = lput(store, T0, "low", limits=[("task:t:A", 1)], priority=-5)
    [high] = lput(store, T0 + 1, "high", limits=[("task:t:B", 1)], priority=5)
    outcome = lclaim(store, T0 + 2, min_priority=0)
    assert outcome.claimed is not None and outcome.claimed.job_id == high and outcome.waiting
    assert lclaim(store, T0 + 2, min_priority=0).claimed is None
    assert lclaim(store, T0 + 2).claimed.job_id == low  # type: ignore[union-attr]


@pytest.mark.sc_concurrency_stats
def test_running_and_waiting_counts(store: Store) -> None:
    lput(store, T0, "a", "a", "a", limits=[("task:t:A", 2)])
    lput(store, T0, "b", limits=[("task:t:B", 2)], queue="other")
    assert store.concurrency.waiting() == {"default\x1ftask:t:A": 3, "other\x1ftask:t:B": 1}
    started(store, T0, 4)
    assert store.concurrency.running() == {"task:t:A": 2, "task:t:B": 1}
    assert store.concurrency.waiting() == {"default\x1ftask:t:A": 1}


@pytest.mark.sc_concurrency_batch
@pytest.mark.sc_concurrency_turns
def test_a_batch_goes_round_the_groups_and_its_expiry_is_uncharged(store: Store) -> None:
    a = lput(store, T0, "a1", "a2", "a3", limits=[("task:t:A", 2)])
    b = lput(store, T0 + 1, "b1", limits=[("task:t:B", 2)])
    outcome = store.concurrency.claim(0, T0 + 2, None, LEASE, new_token(), "w1", None, 10)
    assert [c.job_id for c in outcome.claimed] == [a[0], b[0], a[1]]  # A's third is held by its limit
    assert outcome.waiting and not any(c.alone for c in outcome.claimed)
    recovered = store.recover_expired(T0 + 2 + LEASE + 1)
    assert sorted(r.job_id for r in recovered) == sorted(c.job_id for c in outcome.claimed)
    assert not any(r.charged for r in recovered)
    assert [job(store, T0, i).retries for i in (a[0], b[0], a[1])] == [0, 0, 0]
    assert store.concurrency.running() == {}
    # each of them is now claimed alone: first, and by itself
    again = store.concurrency.claim(0, T0 + 100, None, LEASE, new_token(), "w1", None, 10)
    assert len(again.claimed) == 1 and again.claimed[0].alone


@pytest.mark.sc_concurrency_paused
def test_the_claim_passes_over_the_paused_tasks_of_a_queue(store: Store) -> None:
    """A queue's limit (one group for every task of it): the paused task's jobs at the group's head are
    passed over, the other task's job starts; a group with only the paused task's jobs keeps its turn."""
    if not getattr(store.concurrency, "passes_paused_tasks", False):
        pytest.skip("this store's limited claim takes no skip: the engine leaves such a queue out")
    queue_limit = [("queue:mail", 5)]
    paused = lput(store, T0, "send 1", "send 2", queue="mail", name="app.send", limits=queue_limit)
    [digest] = lput(store, T0 + 1, "digest", queue="mail", name="app.digest", limits=queue_limit)
    [alone] = lput(store, T0 + 2, "alone", queue="mail", name="app.send", limits=[("task:app.send", 5)])
    skip = {"mail": frozenset({"app.send"})}

    def claim_past(now: float) -> LimitedClaim:
        return store.concurrency.claim(0, now, None, LEASE, new_token(), "w1", None, 10, skip=skip)  # type: ignore[call-arg]

    outcome = claim_past(T0 + 3)
    assert [c.job_id for c in outcome.claimed] == [digest] and outcome.waiting
    assert claim_past(T0 + 4).claimed == []
    assert [job(store, T0, i).state for i in [*paused, alone]] == [State.PENDING] * 3
    rest = store.concurrency.claim(0, T0 + 5, None, LEASE, new_token(), "w1", None, 10)
    assert sorted(c.job_id for c in rest.claimed) == sorted([*paused, alone])
    assert store.verify() == []
