"""Named locks: ``Store.locks`` (``LockOps``), leases on the store's clock."""

from __future__ import annotations

import logging

import pytest

from queue_max_django.engine.errors import InvalidJob
from queue_max_django.engine.stores.base import Store
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import T0, probe


@pytest.mark.sc_lock_acquire
def test_one_holder_at_a_time_renewals_keep_since(store: Store, clock: FakeClock) -> None:
    locks = store.locks
    assert locks.lock_holder("sched") is None
    assert locks.acquire_lock("sched", "a", 10.0) and not locks.acquire_lock("sched", "b", 10.0)
    clock.advance(5)
    assert locks.acquire_lock("sched", "a", 10.0)
    holder = locks.lock_holder("sched")
    assert holder is not None and (holder.owner, holder.since) == ("a", pytest.approx(T0))
    assert holder.expires_at == pytest.approx(T0 + 15)
    clock.advance(15)
    assert locks.lock_holder("sched") is None
    assert locks.acquire_lock("sched", "b", 10.0)
    taken = locks.lock_holder("sched")
    assert taken is not None and taken.owner == "b" and taken.since == pytest.approx(T0 + 20)


@pytest.mark.sc_lock_release
def test_release_frees_the_lock_and_keeps_its_last_holder(store: Store, clock: FakeClock) -> None:
    locks = store.locks
    assert locks.last_lock_holder("l") is None
    locks.acquire_lock("l", "a", 10.0)
    assert not locks.release_lock("l", "b")
    clock.advance(1)
    assert locks.release_lock("l", "a") and not locks.release_lock("l", "a")
    last = locks.last_lock_holder("l")
    assert locks.lock_holder("l") is None and last is not None
    assert (last.owner, last.expires_at) == ("a", pytest.approx(T0 + 1))
    assert locks.acquire_lock("l", "b", 10.0)


@pytest.mark.sc_lock_names
@pytest.mark.parametrize(
    "bad", ["", "x" * 201, "\U0001f600" * 150, "\ud800"], ids=["empty", "long", "bytes", "surrogate"]
)
def test_bad_names_and_owners_are_refused_before_writing(store: Store, bad: str) -> None:
    with pytest.raises(InvalidJob):
        store.locks.acquire_lock(bad, "a", 1.0)
    with pytest.raises(InvalidJob):
        store.locks.acquire_lock("l", bad, 1.0)
    with pytest.raises(InvalidJob):
        store.locks.report_worker(bad, stale_after=1.0)
    assert store.locks.lock_holder("l") is None and store.locks.workers(include_dead=True) == []


@pytest.mark.sc_lock_damage
def test_a_lock_record_that_does_not_decode_is_held_by_nobody_known_for_one_ttl(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    probe(store).break_control("locks", "sched")
    assert store.locks.verify() != [] or store.locks.lock_holder("sched") is None
    with caplog.at_level(logging.ERROR, logger="queue_max_django.engine"):
        assert not store.locks.acquire_lock("sched", "a", 10.0)
    assert any("does not decode" in r.getMessage() for r in caplog.records)
    assert store.locks.lock_holder("sched") is None
    assert not store.locks.acquire_lock("sched", "a", 10.0)
    clock.advance(10)
    assert store.locks.acquire_lock("sched", "a", 10.0)
