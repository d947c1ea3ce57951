"""The circuit-breaker policy (engine/breaker.py): every transition, on a fake clock, and the state bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_max_django.engine.breaker import (
    MAX_FAILURES,
    STATE_SIZE,
    Breaker,
    BreakerPolicy,
    BreakerState,
    InvalidBreakerPolicy,
    allow,
    peek,
    record_failure,
    record_success,
    seconds_to_trial,
    success_changes,
)
from queue_max_django.engine.errors import QueueCorrupted, QueueError
from tests.engine.conftest import FakeClock

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
POLICY = BreakerPolicy(threshold=3, recovery_timeout=10.0)
T0 = 1_700_000_000.0
T0_US = 1_700_000_000_000_000


def us(seconds_after_t0: float) -> int:
    return T0_US + round(seconds_after_t0 * 1_000_000)


def opened(at: float = 0.0, failures: int = 3) -> Breaker:
    return Breaker(OPEN, failures, us(at), None)


def half_open(trial_at: float | None = 10.0, opened_at: float = 0.0, failures: int = 3) -> Breaker:
    return Breaker(HALF_OPEN, failures, us(opened_at), None if trial_at is None else us(trial_at))


# ------------------------------------------------------------------ policy


def test_policy_defaults() -> None:
    policy = BreakerPolicy()
    assert (policy.threshold, policy.recovery_timeout) == (5, 60.0)


@pytest.mark.parametrize("threshold", [0, -1, 1.5, True, "5", None, 2**32])
def test_bad_threshold_raises(threshold: Any) -> None:
    with pytest.raises(InvalidBreakerPolicy, match="threshold") as info:
        BreakerPolicy(threshold=threshold)
    assert repr(threshold) in str(info.value)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "60", None, 1e12])
def test_bad_recovery_timeout_raises(timeout: Any) -> None:
    with pytest.raises(InvalidBreakerPolicy, match="recovery_timeout") as info:
        BreakerPolicy(recovery_timeout=timeout)
    assert repr(timeout) in str(info.value)


def test_invalid_policy_is_a_queue_error_and_a_value_error() -> None:
    assert issubclass(InvalidBreakerPolicy, QueueError)
    assert issubclass(InvalidBreakerPolicy, ValueError)


# ------------------------------------------------------------------ CLOSED


def test_initial_value_is_closed_with_no_failures() -> None:
    breaker = Breaker.closed()
    assert breaker == Breaker(CLOSED, 0, None, None)
    assert breaker.opened_at is None
    assert peek(breaker, POLICY, T0) is CLOSED
    assert seconds_to_trial(breaker, POLICY, T0) is None


def test_closed_allows_without_change() -> None:
    breaker = Breaker(CLOSED, 2)
    allowed, after = allow(breaker, POLICY, T0)
    assert allowed
    assert after is breaker


def test_closed_counts_consecutive_failures_and_opens_at_the_threshold() -> None:
    breaker = Breaker.closed()
    breaker = record_failure(breaker, POLICY, T0)
    assert breaker == Breaker(CLOSED, 1)
    breaker = record_failure(breaker, POLICY, T0 + 1)
    assert breaker == Breaker(CLOSED, 2)
    breaker = record_failure(breaker, POLICY, T0 + 2)
    assert breaker == Breaker(OPEN, 3, us(2), None)
    assert breaker.opened_at == T0 + 2


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = record_failure(record_failure(Breaker.closed(), POLICY, T0), POLICY, T0)
    breaker = record_success(breaker, POLICY, T0)
    assert breaker == Breaker.closed()
    breaker = record_failure(record_failure(breaker, POLICY, T0), POLICY, T0)
    assert breaker.state is CLOSED  # 2 consecutive, not 4


def test_threshold_one_opens_on_the_first_failure() -> None:
    assert record_failure(Breaker.closed(), BreakerPolicy(threshold=1), T0) == Breaker(OPEN, 1, T0_US, None)


def test_a_lowered_threshold_opens_on_the_next_failure() -> None:
    breaker = Breaker(CLOSED, 4)
    assert record_failure(breaker, BreakerPolicy(threshold=2), T0).state is OPEN


def test_success_on_a_clean_closed_breaker_changes_nothing() -> None:
    breaker = Breaker.closed()
    assert record_success(breaker, POLICY, T0) is breaker


# ------------------------------------------------------------------ OPEN


def test_open_denies_until_the_recovery_timeout() -> None:
    breaker = opened(at=0)
    for when in (0, 5, 10 - 1e-6):
        allowed, after = allow(breaker, POLICY, T0 + when)
        assert not allowed
        assert after is breaker
        assert peek(breaker, POLICY, T0 + when) is OPEN


def test_open_hands_out_one_trial_after_the_timeout() -> None:
    breaker = opened(at=0)
    assert peek(breaker, POLICY, T0 + 10) is HALF_OPEN
    allowed, after = allow(breaker, POLICY, T0 + 10)
    assert allowed
    assert after == Breaker(HALF_OPEN, 3, us(0), us(10))
    allowed, again = allow(after, POLICY, T0 + 10)
    assert not allowed
    assert again is after


def test_open_long_past_its_timeout_hands_out_one_trial() -> None:
    allowed, after = allow(opened(at=0), POLICY, T0 + 3600)
    assert allowed
    assert after.trial_started_us == us(3600)
    assert not allow(after, POLICY, T0 + 3600.5)[0]


def test_peek_hands_out_nothing() -> None:
    breaker = opened(at=0)
    assert peek(breaker, POLICY, T0 + 11) is HALF_OPEN
    assert peek(breaker, POLICY, T0 + 11) is HALF_OPEN
    assert allow(breaker, POLICY, T0 + 11)[0]  # the trial is still there


def test_a_failure_while_open_counts_but_does_not_extend_the_timeout() -> None:
    breaker = record_failure(opened(at=0), POLICY, T0 + 9)
    assert breaker == Breaker(OPEN, 4, us(0), None)
    assert allow(breaker, POLICY, T0 + 10)[0]


def test_a_success_while_open_changes_nothing() -> None:
    breaker = opened(at=0)
    assert record_success(breaker, POLICY, T0 + 1) is breaker
    assert record_success(breaker, POLICY, T0 + 100) is breaker  # past the timeout: only a trial may close it


def test_seconds_to_trial_while_open() -> None:
    breaker = opened(at=0)
    assert seconds_to_trial(breaker, POLICY, T0) == 10
    assert seconds_to_trial(breaker, POLICY, T0 + 7.25) == 2.75
    assert seconds_to_trial(breaker, POLICY, T0 + 10) == 0
    assert seconds_to_trial(breaker, POLICY, T0 + 100) == 0


# ------------------------------------------------------------------ HALF_OPEN


def test_half_open_denies_while_the_trial_is_out() -> None:
    breaker = half_open(trial_at=10)
    for when in (10, 15, 20 - 1e-6):
        allowed, after = allow(breaker, POLICY, T0 + when)
        assert not allowed
        assert after is breaker
    assert peek(breaker, POLICY, T0 + 15) is HALF_OPEN


def test_a_lost_trial_is_replaced_after_the_recovery_timeout() -> None:
    breaker = half_open(trial_at=10)
    allowed, after = allow(breaker, POLICY, T0 + 20)
    assert allowed
    assert after == Breaker(HALF_OPEN, 3, us(0), us(20))
    assert not allow(after, POLICY, T0 + 29)[0]


def test_half_open_without_a_trial_out_hands_one_out() -> None:
    breaker = half_open(trial_at=None)
    assert seconds_to_trial(breaker, POLICY, T0 + 12) == 0
    allowed, after = allow(breaker, POLICY, T0 + 12)
    assert allowed
    assert after.trial_started_us == us(12)


def test_half_open_success_closes() -> None:
    breaker = record_success(half_open(trial_at=10), POLICY, T0 + 11)
    assert breaker == Breaker.closed()
    assert allow(breaker, POLICY, T0 + 11) == (True, breaker)


def test_half_open_failure_opens_again_from_now() -> None:
    breaker = record_failure(half_open(trial_at=10), POLICY, T0 + 12)
    assert breaker == Breaker(OPEN, 4, us(12), None)
    assert not allow(breaker, POLICY, T0 + 21.999999)[0]
    assert allow(breaker, POLICY, T0 + 22)[0]


def test_seconds_to_trial_while_half_open() -> None:
    breaker = half_open(trial_at=10)
    assert seconds_to_trial(breaker, POLICY, T0 + 10) == 10
    assert seconds_to_trial(breaker, POLICY, T0 + 12.5) == 7.5
    assert seconds_to_trial(breaker, POLICY, T0 + 25) == 0


# ------------------------------------------------------------------ the hot-path helper


@pytest.mark.parametrize(
    ("breaker", "changes"),
    [
        (Breaker.closed(), False),
        (Breaker(CLOSED, 0), False),
        (Breaker(CLOSED, 2), True),
        (opened(), False),
        (half_open(), True),
        (half_open(trial_at=None), True),
    ],
)
def test_success_changes_tells_whether_a_write_is_needed(breaker: Breaker, changes: bool) -> None:
    assert success_changes(breaker) is changes
    assert (record_success(breaker, POLICY, T0 + 50) != breaker) is changes


# ------------------------------------------------------------------ a whole cycle


def test_a_whole_cycle_on_the_fake_clock(clock: FakeClock) -> None:
    policy = BreakerPolicy(threshold=2, recovery_timeout=30)
    breaker = Breaker.closed()
    for _ in range(2):
        assert allow(breaker, policy, clock())[0]
        breaker = record_failure(breaker, policy, clock())
        clock.advance(1)
    assert breaker.state is OPEN
    clock.advance(28)  # 29 s after opening
    assert not allow(breaker, policy, clock())[0]
    clock.advance(1)
    allowed, breaker = allow(breaker, policy, clock())
    assert allowed
    assert not allow(breaker, policy, clock())[0]  # one trial only
    breaker = record_failure(breaker, policy, clock())  # the trial failed
    assert seconds_to_trial(breaker, policy, clock()) == 30
    clock.advance(30)
    allowed, breaker = allow(breaker, policy, clock())
    assert allowed
    breaker = record_success(breaker, policy, clock())
    assert breaker == Breaker.closed()


# ------------------------------------------------------------------ bytes


def test_encoded_size() -> None:
    assert STATE_SIZE == 21
    assert len(Breaker.closed().encode()) == 21
    assert len(half_open().encode()) == 21


breakers = st.one_of(
    st.builds(Breaker, st.just(CLOSED), st.integers(0, MAX_FAILURES)),
    st.builds(
        Breaker,
        st.just(OPEN),
        st.integers(0, MAX_FAILURES),
        st.integers(-(2**63) + 1, 2**63 - 1),
        st.none(),
    ),
    st.builds(
        Breaker,
        st.just(HALF_OPEN),
        st.integers(0, MAX_FAILURES),
        st.integers(-(2**63) + 1, 2**63 - 1),
        st.none() | st.integers(-(2**63) + 1, 2**63 - 1),
    ),
)


@given(breaker=breakers)
def test_round_trips_through_bytes(breaker: Breaker) -> None:
    data = breaker.encode()
    assert isinstance(data, bytes)
    assert len(data) == STATE_SIZE
    assert Breaker.decode(data) == breaker


def test_the_failure_count_saturates() -> None:
    breaker = Breaker(OPEN, MAX_FAILURES, us(0), None)
    after = record_failure(breaker, POLICY, T0)
    assert after.failures == MAX_FAILURES
    assert Breaker.decode(after.encode()) == after
    assert Breaker.decode(Breaker(CLOSED, 2**40).encode()).failures == MAX_FAILURES


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 20,
        b"\x00" * 22,
        b"\x03" + Breaker.closed().encode()[1:],  # unknown state code
        Breaker(CLOSED, 0, us(0), None).encode(),  # closed with an opening time
        Breaker(OPEN, 3, None, None).encode(),  # open without one
        Breaker(OPEN, 3, us(0), us(1)).encode(),  # a trial while open
        Breaker(CLOSED, 1, None, us(1)).encode(),
    ],
)
def test_decode_refuses_bytes_encode_cannot_have_written(data: bytes) -> None:
    with pytest.raises(QueueCorrupted):
        Breaker.decode(data)
