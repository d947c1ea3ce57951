"""Enqueue: ``Store.enqueue`` and ``put_one``: job ids, times, counts, unique keys, the caller's
transaction."""

from __future__ import annotations

import pytest

from queue_max_django.engine.job import State, shard_of
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.uniqueness import HOLD_REMEMBERED, ON_DUPLICATE_SKIP, UniqueRule
from queue_max_django.engine.stores.types import NewJobs
from tests.store_contract.conftest import T0, job, pack, put, spec


@pytest.mark.sc_ids
def test_ids_are_positive_unique_growing_and_name_their_shard(store: Store) -> None:
    ids = put(store, T0, "a", "b", "c") + put(store, T0 + 1, "d")
    last = store.shards - 1
    ids += put(store, T0 + 2, "e", shard=last)
    assert all(i > 0 for i in ids) and len(set(ids)) == len(ids)
    assert ids[:4] == sorted(ids[:4])
    assert [shard_of(i) for i in ids] == [0, 0, 0, 0, last]


@pytest.mark.sc_time
@pytest.mark.sc_enqueue_state
def test_a_job_takes_its_options_and_the_callers_now(store: Store) -> None:
    [job_id] = put(store, T0 + 5, {"x": 1}, queue="mail", name="t.send", priority=7, max_retries=2,
                   timeout=9.5, partition_key=["k", 1], metadata=b'{"a": 1}')  # fmt: skip
    found = job(store, T0 + 6, job_id)
    assert (found.state, found.queue, found.name, found.priority, found.max_retries) == (
        State.PENDING, "mail", "t.send", 7, 2,
    )  # fmt: skip
    assert (found.timeout, found.partition_key, found.metadata) == (9.5, ["k", 1], {"a": 1})
    assert (found.payload, found.retries, found.attempts) == ({"x": 1}, 0, 0)
    assert found.enqueued_at == pytest.approx(T0 + 5, abs=1e-6)
    assert found.started_at is None and found.finished_at is None and found.error is None


@pytest.mark.sc_enqueue_state
def test_a_job_ready_later_is_scheduled_until_then(store: Store) -> None:
    [later] = put(store, T0, "later", ready_at=T0 + 60)
    [now] = put(store, T0, "now", ready_at=T0)
    assert job(store, T0, later).state is State.SCHEDULED
    assert job(store, T0, later).eta == pytest.approx(T0 + 60, abs=1e-6)
    assert job(store, T0, now).state is State.PENDING


@pytest.mark.sc_enqueue_fifo
def test_a_clock_stepping_back_keeps_fifo(store: Store) -> None:
    first = put(store, T0 + 10, "first")[0]
    second = put(store, T0, "second")[0]  # the clock stepped back 10 s
    claimed = store.claim(0, T0 + 20, None, 30.0, b"t" * 16, None, None, 2).claimed
    assert [c.job_id for c in claimed] == [first, second]


@pytest.mark.sc_enqueue_counts
def test_counts_and_enqueued_totals_grow_with_the_jobs_written(store: Store) -> None:
    put(store, T0, "a", "b", queue="q1")
    put(store, T0, "c", queue="q2", ready_at=T0 + 60)
    counts = store.counts()
    assert (counts["pending"], counts["scheduled"], counts["total"]) == (2, 1, 3)
    assert store.enqueued_totals() == {"q1": 2, "q2": 1}
    assert store.counts(0)["total"] == 3


@pytest.mark.sc_enqueue_unique
def test_a_seen_unique_key_writes_nothing_and_gives_the_earlier_id(store: Store) -> None:
    first = NewJobs([pack("a")], spec(), remembered(b"tick:1"))
    [job_id] = store.enqueue(T0, 0, [first], False)
    assert not first.unique_hit
    again = NewJobs([pack("b")], spec(), remembered(b"tick:1"))
    assert store.enqueue(T0 + 1, 0, [again], False) == [job_id]
    assert again.unique_hit
    assert store.counts()["total"] == 1 and job(store, T0, job_id).payload == "a"


@pytest.mark.sc_enqueue_state
def test_batches_of_one_enqueue_are_written_together_in_order(store: Store) -> None:
    batches = [NewJobs([pack(1), pack(2)], spec("q1")), NewJobs([pack(3)], spec("q2", priority=5))]
    ids = store.enqueue(T0, 0, batches, False)
    assert [job(store, T0, i).payload for i in ids] == [1, 2, 3]
    assert [job(store, T0, i).queue for i in ids] == ["q1", "q1", "q2"]
    assert store.counts()["total"] == 3


@pytest.mark.sc_put_one
def test_put_one_is_an_enqueue_of_one_job(store: Store) -> None:
    options = spec("mail", name="t.x", priority=3)
    first = store.put_one(T0, 0, pack("a"), options)
    second = store.put_one(T0, 0, pack("b"), options)  # the same spec again: a store may have cached it
    assert second > first and store.counts()["pending"] == 2
    jobs = (job(store, T0, first), job(store, T0, second))
    assert [(j.queue, j.name, j.priority, j.payload) for j in jobs] == [
        ("mail", "t.x", 3, "a"), ("mail", "t.x", 3, "b"),
    ]  # fmt: skip


@pytest.mark.sc_enqueue_connection
def test_jobs_put_in_the_callers_transaction_exist_only_if_it_commits(store: Store) -> None:
    if not store.transactional_enqueue:
        pytest.skip(f"the {store.kind} store cannot join a caller's transaction (transactional_enqueue)")
    import psycopg

    with psycopg.connect(store.url) as conn:  # type: ignore[attr-defined]
        with pytest.raises(ZeroDivisionError), conn.transaction():
            store.enqueue(T0, 0, [NewJobs([pack("gone")], spec())], False, conn)
            1 / 0  # noqa: B018
        with conn.transaction():
            [kept] = store.enqueue(T0, 0, [NewJobs([pack("kept")], spec())], False, conn)
    assert store.counts()["total"] == 1 and job(store, T0, kept).payload == "kept"


@pytest.mark.sc_info
def test_info_says_kind_location_and_shards(store: Store) -> None:
    info = store.info()
    assert (info.kind, info.shards) == (store.kind, store.shards) and info.location == store.path
    assert "password" not in info.location


def remembered(key: bytes) -> UniqueRule:
    """The periodic ticks' rule: held until vacuum forgets the key."""
    return UniqueRule(key, HOLD_REMEMBERED, 0, ON_DUPLICATE_SKIP)
