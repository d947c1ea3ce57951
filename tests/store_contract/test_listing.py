"""Reads: ``job``, ``list_jobs``, ``counts``, ``queue_counts``, ``oldest_pending``, samples, ``verify``."""

from __future__ import annotations

from typing import Any

import pytest

from queue_max_django.engine.errors import InvalidJob
from queue_max_django.engine.job import State, shard_of
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import Sample
from tests.store_contract.conftest import T0, claim, job, probe, put


def listed(store: Store, state: State, **options: Any) -> list[int]:
    args: dict[str, Any] = {"queue": None, "name": None, "after": None, "limit": 50, "newest_first": False,
                            "shard": None} | options  # fmt: skip
    return [j.job_id for j in store.list_jobs(T0 + 500, state, **args)]


@pytest.mark.sc_job
def test_a_result_that_does_not_decode_reads_as_damage(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    store.complete(T0, job_id, held.token, b"\xc1", False)  # not msgpack
    found = job(store, T0, job_id)
    assert found.state is State.DONE and found.damage and isinstance(found.result, bytes)
    assert store.job(T0, 10**15 << 8) is None


@pytest.mark.sc_list_order
def test_each_state_lists_in_its_order_across_shards(store: Store) -> None:
    last = store.shards - 1
    low = put(store, T0, "low", priority=-1)[0]
    a = put(store, T0 + 1, "a", shard=last)[0]
    b = put(store, T0 + 2, "b")[0]
    high = put(store, T0 + 3, "high", priority=5, shard=last)[0]
    assert listed(store, State.PENDING) == [high, a, b, low]
    assert listed(store, State.PENDING, newest_first=True) == [low, b, a, high]
    s2 = put(store, T0, "s2", ready_at=T0 + 20)[0]
    s1 = put(store, T0, "s1", ready_at=T0 + 10, shard=last)[0]
    assert listed(store, State.SCHEDULED) == [s1, s2]
    everything = listed(store, State.PENDING)
    assert listed(store, State.PENDING, shard=last) == [i for i in everything if shard_of(i) == last]


@pytest.mark.sc_list_order
def test_filters_by_queue_and_name(store: Store) -> None:
    [mail] = put(store, T0, "m", queue="mail", name="t.send")
    put(store, T0, "other", queue="mail", name="t.other")
    put(store, T0, "d")
    assert listed(store, State.PENDING, queue="mail", name="t.send") == [mail]
    assert len(listed(store, State.PENDING, queue="mail")) == 2


@pytest.mark.sc_list_after
def test_pages_go_on_strictly_after_a_job_that_still_exists(store: Store) -> None:
    ids = put(store, T0, *range(5))
    assert listed(store, State.PENDING, after=ids[1], limit=2) == ids[2:4]
    assert listed(store, State.PENDING, after=ids[1], newest_first=True) == ids[:1]
    store.delete(T0, ids[1], None)
    with pytest.raises(InvalidJob, match="no longer exists"):
        listed(store, State.PENDING, after=ids[1])
    assert listed(store, State.FAILED, after=ids[1]) == []  # by id: any id will do


@pytest.mark.sc_counts
@pytest.mark.sc_queue_counts
def test_counts_per_state_and_queue(store: Store) -> None:
    put(store, T0, "a", "b", queue="q1")
    put(store, T0, "c", queue="q2", ready_at=T0 + 60)
    put(store, T0, "d", queue="q2", shard=store.shards - 1)
    claim(store, T0, queues=("q1",))
    counts = store.counts()
    assert set(counts) == {*(s.value for s in State), "cancelled", "total"}
    assert (counts["pending"], counts["scheduled"], counts["running"], counts["total"]) == (2, 1, 1, 4)
    assert store.pending_count() == 2
    assert sum(store.counts(s)["total"] for s in range(store.shards)) == 4
    assert store.queue_counts(T0) == {
        "q1": {"pending": 1, "scheduled": 0, "running": 1},
        "q2": {"pending": 1, "scheduled": 1, "running": 0},
    }


@pytest.mark.sc_oldest_pending
def test_oldest_pending_is_when_each_queues_longest_waiting_job_became_ready(store: Store) -> None:
    put(store, T0 + 1, "early", queue="b", priority=-9)
    put(store, T0 + 3, "a", queue="a")
    put(store, T0 + 5, "urgent", queue="b", priority=9)
    put(store, T0, "later", queue="c", ready_at=T0 + 60)
    oldest = store.oldest_pending(T0 + 10)
    assert list(oldest) == ["a", "b"]
    assert oldest["a"] == pytest.approx(T0 + 3, abs=1e-6) and oldest["b"] == pytest.approx(T0 + 1, abs=1e-6)


@pytest.mark.sc_samples
def test_the_first_sample_of_a_minute_wins_and_old_ones_go(store: Store) -> None:
    assert store.save_sample(Sample(100, 1, 0, 0.0), keep=10)
    assert not store.save_sample(Sample(100, 9, 9, 9.0), keep=10)
    assert store.save_sample(Sample(105, 2, 1, 0.5), keep=10)
    assert store.samples(0) == [Sample(100, 1, 0, 0.0), Sample(105, 2, 1, 0.5)]
    assert store.save_sample(Sample(120, 3, 1, 0.0), keep=10)
    assert [s.minute for s in store.samples(0)] == [120]
    assert store.samples(121) == []


@pytest.mark.sc_verify
def test_verify_is_empty_for_a_consistent_store_and_names_damage(store: Store) -> None:
    put(store, T0, "a", "b")
    assert store.verify() == []
    probe(store).break_control("limits", "queue:x")
    assert any("queue:x" in problem for problem in store.verify())
