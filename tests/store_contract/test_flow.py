"""Rate limits and circuit breakers: ``Store.control`` (``FlowOps``), on the store's clock."""

from __future__ import annotations

import pytest

from queue_max_django.engine.breaker import BreakerPolicy, BreakerState
from queue_max_django.engine.ratelimit import Rate
from queue_max_django.engine.stores.base import Store
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import probe

KEYS = ("*", "queue:default")


def tokens(store: Store, key: str, clock: FakeClock) -> float:
    from queue_max_django.engine import ratelimit

    limit = store.control.state().limits[key]
    return float(ratelimit.remaining(limit.bucket, limit.rate, clock()))


@pytest.mark.sc_flow_limits
@pytest.mark.sc_flow_state
@pytest.mark.sc_flow_version
def test_a_new_limit_starts_full_and_a_change_keeps_its_tokens(store: Store, clock: FakeClock) -> None:
    version = store.control.version()
    store.control.set_limit("queue:default", Rate(10, 1.0, 4))
    assert store.control.version() != version
    assert tokens(store, "queue:default", clock) == 4
    assert store.control.take(KEYS, 3) == (True, 0.0)
    store.control.set_limit("queue:default", Rate(10, 1.0, 8))
    assert tokens(store, "queue:default", clock) == 1
    assert store.control.reset_limit("queue:default") and tokens(store, "queue:default", clock) == 8


@pytest.mark.sc_flow_take
@pytest.mark.sc_flow_atomic
def test_take_is_all_or_none_on_the_stores_clock(store: Store, clock: FakeClock) -> None:
    store.control.set_limit("*", Rate(1, 1.0, 5))
    store.control.set_limit("queue:default", Rate(1, 1.0, 2))
    assert store.control.take(KEYS, 2)[0]
    granted, wait = store.control.take(KEYS, 1)
    assert not granted and wait > 0
    assert tokens(store, "*", clock) == 3  # the refusal took nothing
    clock.advance(1.0)
    assert store.control.take(KEYS, 1)[0]
    assert store.control.take(("queue:unlimited",), 1000) == (True, 0.0)


@pytest.mark.sc_flow_take_up_to
def test_take_up_to_returns_then_takes_whole_tokens(store: Store, clock: FakeClock) -> None:
    store.control.set_limit("queue:default", Rate(1, 1.0, 5))
    assert store.control.take_up_to("queue:default", 3) == 3
    assert store.control.take_up_to("queue:default", 9, give_back=2) == 4
    assert store.control.take_up_to("queue:none", 7) == 7


@pytest.mark.sc_flow_admit
@pytest.mark.sc_flow_give_back
@pytest.mark.sc_flow_breaker
def test_admit_hands_out_one_half_open_trial_and_give_back_returns_it(store: Store, clock: FakeClock) -> None:
    store.control.set_breaker("queue:default", BreakerPolicy(threshold=2, recovery_timeout=10.0))
    store.control.set_limit("queue:default", Rate(1, 1.0, 1))
    store.control.record(KEYS, False)
    assert store.control.state().breakers["queue:default"].breaker.state is BreakerState.CLOSED
    store.control.record(KEYS, False)
    assert store.control.state().breakers["queue:default"].breaker.state is BreakerState.OPEN
    admitted, wait = store.control.admit(KEYS)
    assert not admitted and wait > 0 and tokens(store, "queue:default", clock) == 1
    clock.advance(10.0)
    assert store.control.admit(KEYS)[0]  # the one trial, and the token
    assert not store.control.admit(KEYS)[0]
    store.control.give_back(KEYS)
    assert tokens(store, "queue:default", clock) == 1 and store.control.admit(KEYS)[0]
    store.control.record(KEYS, True)
    assert store.control.state().breakers["queue:default"].breaker.state is BreakerState.CLOSED
    assert store.control.reset_breaker("queue:default") and not store.control.reset_breaker("queue:x")


@pytest.mark.sc_flow_remove
def test_remove_says_whether_there_was_one(store: Store) -> None:
    store.control.set_limit("name:t", Rate(1, 1.0, 1))
    store.control.set_breaker("name:t", BreakerPolicy())
    assert store.control.remove_limit("name:t") and not store.control.remove_limit("name:t")
    assert store.control.remove_breaker("name:t") and not store.control.remove_breaker("name:t")
    assert not store.control.reset_limit("name:t")
    state = store.control.state()
    assert "name:t" not in state.limits and "name:t" not in state.breakers


@pytest.mark.sc_flow_damage
def test_a_value_that_does_not_decode_is_ignored_named_and_replaced_by_setting_it(store: Store) -> None:
    probe(store).break_control("limits", "queue:default")
    probe(store).break_control("breakers", "queue:default")
    state = store.control.state()
    assert "queue:default" in state.damaged_limits and "queue:default" in state.damaged_breakers
    assert "queue:default" not in state.limits and "queue:default" not in state.breakers
    assert store.control.admit(KEYS, 100)[0] and store.control.take(KEYS, 100)[0]  # fail open
    assert len(store.control.verify()) == 2
    store.control.set_limit("queue:default", Rate(1, 1.0, 1))
    store.control.set_breaker("queue:default", BreakerPolicy())
    assert store.control.verify() == [] and not store.control.state().damaged_limits
