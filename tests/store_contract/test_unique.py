"""Unique keys: ``contract/uniqueness.py``'s rules, on every store: when a key's holder holds it, what a
duplicate does by ``on_duplicate`` (skip, replace, raise), several batches of one key in one enqueue, the
duplicate counts, the vacuum, and two transactions racing on one key (PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from queue_max_django.engine.errors import DuplicateJob
from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.uniqueness import (
    HOLD_FINISHED,
    HOLD_STARTED,
    HOLD_WINDOW,
    ON_DUPLICATE_RAISE,
    ON_DUPLICATE_REPLACE,
    ON_DUPLICATE_SKIP,
    UniqueRule,
)
from queue_max_django.engine.stores.types import UNIQUE_KEY_MIN_TTL, NewJobs
from tests.store_contract.conftest import T0, claim, job, pack, probe, spec

SKIP, REPLACE, RAISE = ON_DUPLICATE_SKIP, ON_DUPLICATE_REPLACE, ON_DUPLICATE_RAISE


def rule(
    hold: int = HOLD_STARTED, on_duplicate: int = SKIP, *, key: bytes = b"sync:42", window: float = 0.0
) -> UniqueRule:
    return UniqueRule(key, hold, int(window * 1_000_000), on_duplicate)


def put(store: Store, now: float, payload: Any, unique: UniqueRule, **options: Any) -> tuple[int, NewJobs]:
    batch = NewJobs([pack(payload)], spec(**options), unique)
    [job_id] = store.enqueue(now, 0, [batch], False)
    return job_id, batch


@pytest.mark.sc_unique_take
@pytest.mark.sc_unique_skip
def test_a_held_key_skips_the_duplicate_and_writes_nothing(store: Store) -> None:
    first, batch = put(store, T0, "a", rule())
    assert not batch.unique_hit
    assert probe(store).unique_keys() == {"sync:42": first}
    again, batch = put(store, T0 + 1, "b", rule(), queue="other", priority=5)
    assert (again, batch.unique_hit, batch.replaced) == (first, True, False)
    assert store.counts()["total"] == 1 and job(store, T0, first).payload == "a"
    other, batch = put(store, T0 + 2, "c", rule(key=b"sync:43"))
    assert other != first and not batch.unique_hit


@pytest.mark.sc_unique_hold
def test_started_holds_while_the_job_waits_and_frees_when_it_starts(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_STARTED), ready_at=T0 + 60)  # scheduled: waiting too
    assert put(store, T0 + 1, "b", rule(HOLD_STARTED))[0] == first
    [held] = claim(store, T0 + 61)
    assert held.job_id == first
    second, batch = put(store, T0 + 62, "c", rule(HOLD_STARTED))  # it runs: the key is free
    assert second != first and not batch.unique_hit
    assert probe(store).unique_keys() == {"sync:42": second}


@pytest.mark.sc_unique_hold
def test_finished_holds_while_the_job_runs_and_frees_when_it_ends(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_FINISHED))
    [held] = claim(store, T0 + 1)
    assert put(store, T0 + 2, "b", rule(HOLD_FINISHED))[0] == first
    store.complete(T0 + 3, held.job_id, held.token, None, False)
    second, batch = put(store, T0 + 4, "c", rule(HOLD_FINISHED))
    assert second != first and not batch.unique_hit


@pytest.mark.sc_unique_hold
@pytest.mark.parametrize("end", ["dead letter", "cancelled", "deleted"])
def test_a_job_that_ends_frees_its_key(store: Store, end: str) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_FINISHED))
    if end == "dead letter":
        [held] = claim(store, T0 + 1)
        store.fail(T0 + 1, held.job_id, held.token, ("boom", "E", None), None, False)
    elif end == "cancelled":
        store.cancel(T0 + 1, first)
    else:
        store.delete(T0 + 1, first, None)
    second, batch = put(store, T0 + 2, "b", rule(HOLD_FINISHED))
    assert second != first and not batch.unique_hit


@pytest.mark.sc_unique_hold
def test_a_retried_holder_holds_its_key_again(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_STARTED))
    [held] = claim(store, T0 + 1)
    store.fail(T0 + 2, held.job_id, held.token, ("boom", "E", None), T0 + 30, False)  # scheduled again
    assert put(store, T0 + 3, "b", rule(HOLD_STARTED))[0] == first


@pytest.mark.sc_unique_hold
def test_a_window_holds_from_the_first_put_whatever_became_of_the_job(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_WINDOW, window=60))
    [held] = claim(store, T0 + 1)
    store.complete(T0 + 2, held.job_id, held.token, None, False)
    assert put(store, T0 + 59, "b", rule(HOLD_WINDOW, window=60))[0] == first  # done, still in the window
    second, batch = put(store, T0 + 60, "c", rule(HOLD_WINDOW, window=60))  # the window ended
    assert second != first and not batch.unique_hit
    assert put(store, T0 + 119, "d", rule(HOLD_WINDOW, window=60))[0] == second


@pytest.mark.sc_unique_raise
def test_raise_refuses_the_whole_enqueue_and_names_the_holder(store: Store) -> None:
    first, _ = put(store, T0, "a", rule())
    before = store.counts()
    batches = [
        NewJobs([pack("other")], spec(), rule(key=b"free")),
        NewJobs([pack("b")], spec(), rule(on_duplicate=RAISE)),
    ]
    with pytest.raises(DuplicateJob) as raised:
        store.enqueue(T0 + 1, 0, batches, False)
    assert (raised.value.job_id, raised.value.key) == (first, "sync:42")
    assert store.counts() == before and probe(store).unique_keys() == {"sync:42": first}
    assert store.unique_counts() == (0, 0)


@pytest.mark.sc_unique_replace
def test_replace_gives_the_waiting_job_the_new_payload_metadata_and_eta(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(on_duplicate=REPLACE), queue="mail", priority=3, metadata=b'{"v": 1}')
    again, batch = put(store, T0 + 5, "b", rule(on_duplicate=REPLACE), queue="other", priority=9,
                       ready_at=T0 + 60, metadata=b'{"v": 2}')  # fmt: skip
    assert (again, batch.unique_hit, batch.replaced) == (first, True, True)
    found = job(store, T0 + 5, first)
    assert (found.payload, found.metadata, found.state) == ("b", {"v": 2}, State.SCHEDULED)
    assert found.eta == pytest.approx(T0 + 60, abs=1e-6)
    assert (found.queue, found.priority) == ("mail", 3)  # kept, as its enqueue time
    assert found.enqueued_at == pytest.approx(T0, abs=1e-6)
    counts = store.counts()
    assert (counts["pending"], counts["scheduled"], counts["total"]) == (0, 1, 1)
    put(store, T0 + 6, "c" * 5000, rule(on_duplicate=REPLACE))  # pending again, a large payload
    found = job(store, T0 + 6, first)
    assert (found.payload, found.state, found.metadata) == ("c" * 5000, State.PENDING, {})
    assert (store.counts()["pending"], store.counts()["scheduled"]) == (1, 0)
    [held] = claim(store, T0 + 7)
    assert (held.job_id, held.payload) == (first, "c" * 5000)
    assert store.unique_counts() == (0, 2)
    assert store.verify() == []


@pytest.mark.sc_unique_replace
def test_replace_leaves_a_running_holder_alone_and_stores_a_new_job(store: Store) -> None:
    first, _ = put(store, T0, "a", rule(HOLD_FINISHED, REPLACE))
    [held] = claim(store, T0 + 1)
    second, batch = put(store, T0 + 2, "b", rule(HOLD_FINISHED, REPLACE))
    assert second != first and not batch.unique_hit and not batch.replaced
    assert job(store, T0, first).payload == "a" and job(store, T0, first).state is State.RUNNING
    assert probe(store).unique_keys() == {"sync:42": second}  # the new job took the key
    assert put(store, T0 + 3, "c", rule(HOLD_FINISHED, REPLACE))[0] == second
    assert job(store, T0, second).payload == "c"
    store.complete(T0 + 4, held.job_id, held.token, None, False)


@pytest.mark.sc_unique_batches
def test_batches_of_one_key_in_one_enqueue_the_first_stores(store: Store) -> None:
    batches = [NewJobs([pack(n)], spec(), rule()) for n in range(3)]
    ids = store.enqueue(T0, 0, batches, False)
    assert len(set(ids)) == 1 and [b.unique_hit for b in batches] == [False, True, True]
    assert job(store, T0, ids[0]).payload == 0 and store.counts()["total"] == 1
    replacing = [NewJobs([pack(n)], spec(), rule(key=b"debounce", on_duplicate=REPLACE)) for n in range(3)]
    ids = store.enqueue(T0 + 1, 0, replacing, False)
    assert len(set(ids)) == 1 and job(store, T0, ids[0]).payload == 2  # the last one's arguments


@pytest.mark.sc_unique_counts
def test_duplicates_are_counted_in_the_store(store: Store) -> None:
    assert store.unique_counts() == (0, 0)
    put(store, T0, "a", rule())
    put(store, T0, "b", rule())
    put(store, T0, "c", rule())
    put(store, T0, "d", rule(on_duplicate=REPLACE))
    tick = UniqueRule(b"tick", 0, 0, SKIP)  # remembered (periodic ticks): not counted
    put(store, T0, "t", tick)
    put(store, T0, "t", tick)
    assert store.unique_counts() == (2, 1)


@pytest.mark.sc_unique_vacuum
def test_vacuum_forgets_the_keys_that_hold_nothing(store: Store) -> None:
    ran, _ = put(store, T0, "b", rule(key=b"ran"))
    assert [held.job_id for held in claim(store, T0 + 1)] == [ran]
    waiting, _ = put(store, T0 + 1, "a", rule(key=b"waiting"))
    put(store, T0, "c", rule(HOLD_WINDOW, key=b"window", window=100))
    assert store.vacuum(T0 + 2, T0, 0.0) == 0
    assert set(probe(store).unique_keys()) == {"waiting", "window"}  # "ran" started: it holds nothing
    store.vacuum(T0 + 100, T0, 0.0)
    assert set(probe(store).unique_keys()) == {"waiting"}
    store.vacuum(T0 + UNIQUE_KEY_MIN_TTL * 3, T0, 0.0)  # a waiting job keeps its key, whatever its age
    assert probe(store).unique_keys() == {"waiting": waiting}


@pytest.mark.sc_unique_caller_txn
def test_two_transactions_racing_on_one_key_store_one_job(store: Store) -> None:
    if not store.transactional_enqueue:
        pytest.skip(f"the {store.kind} store cannot join a caller's transaction (transactional_enqueue)")
    import psycopg

    url = store.url  # type: ignore[attr-defined]
    outcome: dict[str, Any] = {}
    inserted = threading.Event()
    with psycopg.connect(url) as first, psycopg.connect(url) as second:
        with first.transaction():
            one = NewJobs([pack("first")], spec(), rule())
            [outcome["first"]] = store.enqueue(T0, 0, [one], False, first)

            def race() -> None:
                with second.transaction():
                    two = NewJobs([pack("second")], spec(), rule())
                    inserted.set()
                    [outcome["second"]] = store.enqueue(T0 + 1, 0, [two], False, second)
                    outcome["hit"] = two.unique_hit

            racer = threading.Thread(target=race)
            racer.start()
            assert inserted.wait(5)
            racer.join(0.5)
            assert racer.is_alive(), "the second put waits for the first transaction"
        racer.join(10)
    assert outcome == {"first": outcome["first"], "second": outcome["first"], "hit": True}
    assert store.counts()["total"] == 1 and store.unique_counts() == (1, 0)


@pytest.mark.sc_unique_caller_txn
def test_a_rolled_back_put_leaves_the_key_free(store: Store) -> None:
    if not store.transactional_enqueue:
        pytest.skip(f"the {store.kind} store cannot join a caller's transaction (transactional_enqueue)")
    import psycopg

    with psycopg.connect(store.url) as conn, pytest.raises(ZeroDivisionError), conn.transaction():  # type: ignore[attr-defined]
        store.enqueue(T0, 0, [NewJobs([pack("gone")], spec(), rule())], False, conn)
        1 / 0  # noqa: B018
    kept, batch = put(store, T0 + 1, "kept", rule())
    assert not batch.unique_hit and store.counts()["total"] == 1 and job(store, T0, kept).payload == "kept"
