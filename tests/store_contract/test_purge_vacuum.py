"""Removing jobs in bulk: ``purge`` and ``vacuum`` (with unique keys), and ``finished_totals``."""

from __future__ import annotations

import pytest

from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import UNIQUE_KEY_MIN_TTL, NewJobs
from tests.store_contract.conftest import T0, claim, pack, put, spec
from tests.store_contract.test_enqueue import remembered


def finish(store: Store, now: float, count: int = 1, *, dead: bool = False) -> list[int]:
    ids = put(store, now, *range(count))
    for held in claim(store, now, limit=count):
        if dead:
            store.fail(now, held.job_id, held.token, ("e", "E", None), None, False)
        else:
            store.complete(now, held.job_id, held.token, None, False)
    return ids


@pytest.mark.sc_purge
def test_purge_removes_a_states_jobs_by_enqueue_or_finish_time(store: Store) -> None:
    old_done = finish(store, T0)
    new_done = finish(store, T0 + 100)
    put(store, T0 + 200, "old pending")
    [new_pending] = put(store, T0 + 300, "new pending")
    assert store.purge(T0 + 400, State.DONE, T0 + 50) == 1
    assert store.job(T0, old_done[0]) is None and store.job(T0, new_done[0]) is not None
    assert store.purge(T0 + 400, State.PENDING, T0 + 250) == 1
    left = store.list_jobs(T0, State.PENDING, queue=None, name=None, after=None, limit=10,
                           newest_first=False, shard=None)  # fmt: skip
    assert [j.job_id for j in left] == [new_pending]
    assert store.purge(T0 + 400, State.DONE, None) == 1
    counts = store.counts()
    assert (counts["done"], counts["pending"], counts["total"]) == (0, 1, 4)
    assert store.verify() == []


@pytest.mark.sc_vacuum
def test_vacuum_removes_done_jobs_finished_by_the_cutoff_never_dead_letters(store: Store) -> None:
    [old] = finish(store, T0)
    [dead] = finish(store, T0, dead=True)
    [new] = finish(store, T0 + 100)
    assert store.vacuum(T0 + 200, T0 + 50, 0.0) == 1
    assert store.job(T0, old) is None and store.job(T0, dead) is not None and store.job(T0, new) is not None
    assert (store.counts()["done"], store.counts()["failed"]) == (1, 1)


@pytest.mark.sc_vacuum_unique
def test_vacuum_forgets_unique_keys_no_sooner_than_the_minimum_ttl(store: Store) -> None:
    def put_unique(now: float) -> tuple[int, bool]:
        batch = NewJobs([pack("tick")], spec(), remembered(b"tick:1"))
        [job_id] = store.enqueue(now, 0, [batch], False)
        return job_id, batch.unique_hit

    first, _ = put_unique(T0)
    store.vacuum(T0 + UNIQUE_KEY_MIN_TTL - 1, T0, 0.0)  # ttl 0, but the key lives a day at least
    assert put_unique(T0 + UNIQUE_KEY_MIN_TTL - 1) == (first, True)
    store.vacuum(T0 + UNIQUE_KEY_MIN_TTL + 1, T0, 0.0)
    second, hit = put_unique(T0 + UNIQUE_KEY_MIN_TTL + 2)
    assert not hit and second != first


@pytest.mark.sc_finished_totals
def test_finished_totals_only_grow_as_jobs_leave(store: Store) -> None:
    finish(store, T0, 3)
    finish(store, T0, 2, dead=True)
    assert store.finished_totals() == (3, 2)
    store.vacuum(T0 + 10, T0 + 5, 0.0)
    store.purge(T0 + 10, State.FAILED, None)
    assert store.finished_totals() == (3, 2)
    assert (store.counts()["done"], store.counts()["failed"]) == (0, 0)
