"""The token-bucket policy (engine/ratelimit.py): parsing, exact arithmetic on a fake clock, the state bytes.

Times are built from integer microseconds (``at(us)``) so that every expectation is exact.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_max_django.engine.errors import QueueCorrupted, QueueError
from queue_max_django.engine.ratelimit import (
    CLOCK_STEP_TOLERANCE_US,
    STATE_SIZE,
    BucketState,
    InvalidRate,
    Rate,
    change_rate,
    full_bucket,
    give_back,
    parse_rate,
    refill,
    remaining,
    retry_after,
    try_take,
)

START = 1_700_000_000.0
START_US = 1_700_000_000_000_000


def at(us: int) -> float:
    """The unix time ``us`` microseconds after START."""
    return START + us / 1_000_000


def drained(rate: Rate, us: int = 0) -> BucketState:
    """An empty bucket as of ``at(us)``."""
    return BucketState(0, START_US + us)


def test_at_converts_exactly() -> None:
    """The helper the other tests rely on: at(us) is the microsecond it names."""
    rate = parse_rate("1/s")
    for us in (0, 1, 7, 999_999, 123_456_789, 10**12 + 3):
        assert full_bucket(rate, at(us)).updated_us == START_US + us


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("spec", "count", "seconds", "burst"),
    [
        ("160/m", 160, 60, 160),
        ("10/s", 10, 1, 10),
        ("5000/h", 5000, 3600, 5000),
        ("100/d", 100, 86400, 100),
        ("10/5s", 10, 5, 10),
        ("10/2m", 10, 120, 10),
        ("3/1.5h", 3, 5400, 3),
        (" 7 / minute ", 7, 60, 7),
        ("2/hours", 2, 3600, 2),
        ("1e3/s", 1000, 1, 1000),
        ("0.5/s", 0.5, 1, 1),  # the burst is at least one whole token
        (160, 160, 60, 160),  # a bare number is per minute
        (2.5, 2.5, 60, 2.5),
        ((10, 60), 10, 60, 10),
        ((3, 0.5), 3, 0.5, 3),
    ],
)
def test_parse_rate(spec: Any, count: float, seconds: float, burst: float) -> None:
    rate = parse_rate(spec)
    assert (rate.count, rate.seconds, rate.burst) == (count, seconds, burst)
    assert rate.per_second == count / seconds


def test_burst_overrides_the_default() -> None:
    assert parse_rate("160/m", burst=20) == Rate(160, 60, 20)
    assert parse_rate((1, 1), burst=1.5).burst == 1.5


def test_a_rate_passes_through_and_burst_replaces_its_burst() -> None:
    rate = Rate(5, 1, 8)
    assert parse_rate(rate) == rate
    assert parse_rate(rate, burst=2) == Rate(5, 1, 2)


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (Rate(160, 60, 160), "160/m"),
        (Rate(10, 1, 10), "10/s"),
        (Rate(5000, 3600, 5000), "5000/h"),
        (Rate(100, 86400, 100), "100/d"),
        (Rate(10, 5, 10), "10/5s"),
        (Rate(10, 120, 10), "10/2m"),
        (Rate(1, 90, 1), "1/90s"),
        (Rate(0.5, 1, 1), "0.5/s"),
        (Rate(3, 0.25, 3), "3/0.25s"),
        (Rate(160, 60, 20), "160/m (burst 20)"),
    ],
)
def test_str_is_a_readable_spec_that_parses_back(rate: Rate, text: str) -> None:
    assert str(rate) == text
    assert parse_rate(text.split(" (")[0], burst=rate.burst) == rate


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "abc",
        "10",
        "10/",
        "/s",
        "10/ms",
        "10/M",
        "-1/s",
        "0/s",
        "10/0s",
        "1e400/s",
        "ten/s",
        "10/s/s",
        0,
        -5,
        float("nan"),
        float("inf"),
        True,
        None,
        [10, 60],
        (10,),
        (10, 60, 5),
        (0, 60),
        (10, 0),
        (10, -1),
        (10, float("inf")),
        ("10", 60),
        (True, 60),
        (10, 1e-9),
        (10, 1e12),
        1e13,
        b"10/s",
    ],
)
def test_bad_specs_raise_invalid_rate_naming_them(spec: Any) -> None:
    with pytest.raises(InvalidRate) as info:
        parse_rate(spec)
    assert repr(spec) in str(info.value)


@pytest.mark.parametrize("burst", [0, 0.5, -1, float("nan"), float("inf"), True, "5", 1e13])
def test_bad_bursts_raise(burst: Any) -> None:
    with pytest.raises(InvalidRate, match="burst"):
        parse_rate("10/s", burst=burst)


def test_invalid_rate_is_a_queue_error_and_a_value_error() -> None:
    assert issubclass(InvalidRate, QueueError)
    assert issubclass(InvalidRate, ValueError)


def test_rate_validates_when_built_directly() -> None:
    with pytest.raises(InvalidRate, match="period"):
        Rate(10, 0, 10)
    with pytest.raises(InvalidRate, match="burst"):
        Rate(10, 1, 0)


# ------------------------------------------------------------------ state bytes


def test_new_bucket_starts_full() -> None:
    rate = parse_rate("160/m")
    bucket = full_bucket(rate, at(0))
    assert bucket == BucketState.full(rate, at(0))
    assert bucket.tokens == 160
    assert remaining(bucket, rate, at(0)) == 160


@given(tokens=st.integers(0, 2**63 - 1), updated=st.integers(-(2**63), 2**63 - 1))
def test_state_round_trips_through_fixed_size_bytes(tokens: int, updated: int) -> None:
    state = BucketState(tokens, updated)
    data = state.encode()
    assert isinstance(data, bytes)
    assert len(data) == STATE_SIZE == 16
    assert BucketState.decode(data) == state


@pytest.mark.parametrize("data", [b"", b"\x00" * 15, b"\x00" * 17, BucketState(-1, 0).encode()])
def test_decode_refuses_bytes_encode_cannot_write(data: bytes) -> None:
    with pytest.raises(QueueCorrupted):
        BucketState.decode(data)


# ------------------------------------------------------------------ refill


def test_refill_is_exact() -> None:
    rate = parse_rate("10/s")
    assert remaining(drained(rate), rate, at(350_000)) == 3.5
    assert remaining(drained(rate), rate, at(1)) == 0.00001
    slow = parse_rate("160/m")  # 8/3 tokens per second
    assert refill(drained(slow), slow, at(3_000_000)).tokens_micro == 8_000_000
    assert refill(drained(slow), slow, at(1)).tokens_micro == 2  # floor(8/3)


def test_refill_caps_at_burst() -> None:
    rate = parse_rate("10/s", burst=4)
    assert remaining(drained(rate), rate, at(399_999)) == pytest.approx(3.99999)
    assert remaining(drained(rate), rate, at(400_000)) == 4
    assert remaining(drained(rate), rate, at(10**12)) == 4
    full = full_bucket(rate, at(0))
    assert refill(full, rate, at(5_000_000)) == BucketState(4_000_000, START_US + 5_000_000)


def test_refill_keeps_the_unearned_fraction_as_time() -> None:
    """1 token per day: each microsecond earns 1/86400 of a micro-token. A thousand refills 86,400 us apart
    earn exactly one micro-token each; none is lost to rounding."""
    rate = parse_rate("1/d")
    state = drained(rate)
    for step in range(1, 1001):
        state = refill(state, rate, at(step * 86_400 - 1))
        assert state.tokens_micro == step - 1
        state = refill(state, rate, at(step * 86_400))
        assert state.tokens_micro == step


@given(
    count=st.integers(1, 10_000),
    seconds=st.sampled_from([0.5, 1, 3, 7, 60, 3600, 86400]),
    steps=st.lists(st.integers(0, 2_000_000), min_size=1, max_size=60),
)
def test_many_refills_lose_less_than_a_micro_token_each(count: int, seconds: float, steps: list[int]) -> None:
    rate = Rate(count, seconds, 10**9)  # a burst too large to reach: only accrual is measured
    state = drained(rate)
    now = 0
    for step in steps:
        now += step
        state = refill(state, rate, at(now))
    exact = Fraction(count) / Fraction(seconds) * now  # micro-tokens
    assert exact - len(steps) <= state.tokens_micro <= exact


def test_a_stale_now_adds_nothing_and_removes_nothing() -> None:
    """A time up to CLOCK_STEP_TOLERANCE_US behind the bucket's (a process that read its clock before it
    got the write lock) changes nothing, and the time already accrued is not accrued twice."""
    rate = parse_rate("10/s")
    state = BucketState(2_000_000, START_US + 1_000_000)
    assert refill(state, rate, at(1_000_000 - CLOCK_STEP_TOLERANCE_US)) is state
    ok, taken = try_take(state, rate, at(500_000))
    assert ok
    assert taken == BucketState(1_000_000, START_US + 1_000_000)
    assert remaining(taken, rate, at(1_100_000)) == 2.0  # accrues from the bucket's time, not the stale one


def test_a_clock_set_back_keeps_the_tokens_and_accrues_from_the_new_time() -> None:
    rate = parse_rate("10/s")
    state = BucketState(2_000_000, START_US + 10_000_000)
    back = refill(state, rate, at(0))
    assert back == BucketState(2_000_000, START_US)
    assert remaining(back, rate, at(300_000)) == 5.0


# ------------------------------------------------------------------ take, retry_after


def test_try_take_grants_the_burst_then_refuses() -> None:
    rate = parse_rate("10/s")
    state = full_bucket(rate, at(0))
    for expected in range(9, -1, -1):
        ok, state = try_take(state, rate, at(0))
        assert ok
        assert state.tokens_micro == expected * 1_000_000
    ok, after = try_take(state, rate, at(0))
    assert not ok
    assert after is state  # nothing to write
    ok, state = try_take(state, rate, at(99_999))
    assert not ok
    ok, state = try_take(state, rate, at(100_000))
    assert ok
    assert state.tokens_micro == 0


def test_try_take_several_tokens_at_once() -> None:
    rate = parse_rate("10/s")
    ok, state = try_take(full_bucket(rate, at(0)), rate, at(0), n=7)
    assert ok
    assert state.tokens_micro == 3_000_000
    ok, same = try_take(state, rate, at(0), n=4)
    assert not ok
    assert same.tokens_micro == 3_000_000
    ok, state = try_take(state, rate, at(0), n=2.5)
    assert ok
    assert state.tokens_micro == 500_000


def test_a_fraction_of_a_micro_token_counts_as_a_whole_one() -> None:
    rate = parse_rate("10/s")
    assert not try_take(drained(rate), rate, at(0), n=1e-7)[0]
    ok, state = try_take(BucketState(5, START_US), rate, at(0), n=4.1e-6)
    assert ok
    assert state.tokens_micro == 0


def test_more_than_the_burst_is_never_granted() -> None:
    rate = parse_rate("10/s", burst=3)
    state = full_bucket(rate, at(0))
    assert try_take(state, rate, at(10**12), n=4)[0] is False
    assert retry_after(state, rate, at(0), n=4) == math.inf
    assert retry_after(state, rate, at(0), n=3) == 0


@pytest.mark.parametrize("n", [0, -1, float("nan"), float("inf"), True, "1", None])
def test_bad_token_counts_raise(n: Any) -> None:
    rate = parse_rate("10/s")
    state = full_bucket(rate, at(0))
    with pytest.raises(InvalidRate, match="number of tokens"):
        try_take(state, rate, at(0), n=n)
    with pytest.raises(InvalidRate, match="number of tokens"):
        retry_after(state, rate, at(0), n=n)


def test_retry_after_is_exact() -> None:
    rate = parse_rate("10/s")
    assert retry_after(full_bucket(rate, at(0)), rate, at(0)) == 0
    assert retry_after(drained(rate), rate, at(0)) == 0.1
    assert retry_after(drained(rate), rate, at(0), n=3) == 0.3
    assert retry_after(drained(rate), rate, at(40_000)) == 0.06
    assert retry_after(drained(rate), rate, at(100_000)) == 0
    slow = parse_rate("160/m")
    assert retry_after(drained(slow), slow, at(0)) == 0.375  # 60 / 160
    daily = parse_rate("1/d")
    assert retry_after(drained(daily), daily, at(0)) == 86_400
    assert retry_after(BucketState(0, START_US + 500_000), rate, at(0)) == 0.6  # a stale now


def test_retry_after_a_clock_set_back_counts_from_the_new_time() -> None:
    rate = parse_rate("10/s")
    state = BucketState(0, START_US + 60_000_000)
    assert retry_after(state, rate, at(0)) == 0.1
    rebased = refill(state, rate, at(0))
    assert try_take(rebased, rate, at(100_000))[0]
    assert not try_take(rebased, rate, at(99_999))[0]


rates = st.builds(
    Rate,
    count=st.integers(1, 5000) | st.floats(0.01, 5000),
    seconds=st.sampled_from([1, 2.5, 60, 3600, 86400]) | st.floats(0.001, 100_000),
    burst=st.integers(1, 100) | st.floats(1, 100),
)


@settings(max_examples=300)
@given(
    rate=rates,
    tokens=st.integers(0, 100_000_000),
    updated=st.integers(-2_000_000, 10**9),
    now=st.integers(0, 10**9),
    n=st.integers(1, 100) | st.floats(0.001, 100),
)
def test_retry_after_is_the_first_microsecond_take_succeeds(
    rate: Rate, tokens: int, updated: int, now: int, n: float
) -> None:
    state = BucketState(tokens, START_US + updated)
    wait = retry_after(state, rate, at(now), n)
    if wait == math.inf:
        assert math.ceil(Fraction(n) * 1_000_000) > math.floor(Fraction(rate.burst) * 1_000_000)
        assert not try_take(state, rate, at(now + 10**12), n)[0]
        return
    wait_us = round(wait * 1_000_000)
    assert wait == wait_us / 1_000_000 >= 0
    base = (
        state
        if state.updated_us - START_US - now <= CLOCK_STEP_TOLERANCE_US
        else refill(state, rate, at(now))
    )
    assert try_take(base, rate, at(now + wait_us), n)[0]
    if wait_us > 0:
        assert not try_take(base, rate, at(now + wait_us - 1), n)[0]


@settings(max_examples=200)
@given(
    count=st.integers(1, 2000),
    seconds=st.sampled_from([1, 3, 60, 3600]) | st.floats(0.01, 1000),
    burst=st.integers(1, 50),
    ops=st.lists(
        st.tuples(st.integers(0, 500_000), st.integers(1, 5), st.booleans()), min_size=1, max_size=300
    ),
)
def test_never_more_than_rate_times_time_plus_burst(
    count: int, seconds: float, burst: int, ops: list[tuple[int, int, bool]]
) -> None:
    """Over any sequence of takes on a moving clock (with stale readings mixed in), the tokens granted never
    exceed rate x elapsed + burst: exactly, in fractions."""
    rate = Rate(count, seconds, burst)
    state = full_bucket(rate, at(0))
    now = 0
    granted = 0
    per_us = Fraction(count) / Fraction(seconds) / 1_000_000  # tokens per microsecond
    for step, n, stale in ops:
        now += step
        when = max(0, now - 1000) if stale else now
        ok, state = try_take(state, rate, at(when), n)
        if ok:
            granted += n
        assert granted <= per_us * now + burst
    assert granted + Fraction(state.tokens_micro, 1_000_000) <= per_us * now + burst


@settings(max_examples=30, deadline=None)
@given(count=st.integers(1, 100), burst=st.integers(2, 20), takers=st.integers(2, 4))
def test_a_greedy_consumer_gets_the_full_rate(count: int, burst: int, takers: int) -> None:
    """Trying more than once every 10 ms for 20 s: the bucket grants rate x time + burst, to within one
    token. (A burst of 2 or more: with a burst of 1, what accrues between a token and the next try is lost.)
    """
    rate = Rate(count, 1, burst)
    state = full_bucket(rate, at(0))
    granted = 0
    for tick in range(0, 20 * 100 + 1):
        for _ in range(takers):
            ok, state = try_take(state, rate, at(tick * 10_000))
            granted += ok
    assert count * 20 + burst - 1 <= granted <= count * 20 + burst


def test_a_burst_of_one_wastes_what_arrives_while_full() -> None:
    rate = parse_rate("3/s", burst=1)
    state = drained(rate)
    assert remaining(state, rate, at(340_000)) == 1  # 1.02 tokens earned, 1 kept
    ok, state = try_take(state, rate, at(340_000))
    assert ok
    assert remaining(state, rate, at(666_667)) == pytest.approx(0.980001, abs=1e-9)  # not 1: 0.02 was lost


# ------------------------------------------------------------------ changing the rate, giving back


def test_a_lower_burst_caps_the_tokens_there_are() -> None:
    old = parse_rate("100/s")
    new = parse_rate("10/s")
    state = full_bucket(old, at(0))
    assert remaining(state, new, at(0)) == 10
    assert try_take(state, new, at(0), 10)[0]
    assert not try_take(state, new, at(0), 11)[0]
    assert change_rate(state, old, new, at(0)) == BucketState(10_000_000, START_US)


def test_change_rate_accrues_the_past_at_the_old_rate() -> None:
    slow = parse_rate("1/s", burst=100)
    fast = parse_rate("1000/s", burst=100)
    state = drained(slow)
    changed = change_rate(state, slow, fast, at(2_500_000))
    assert changed == BucketState(2_500_000, START_US + 2_500_000)
    assert remaining(changed, fast, at(2_510_000)) == 12.5
    # For contrast: refill at the new rate alone counts the past 2.5 s at 1000/s (capped at the burst).
    assert remaining(state, fast, at(2_500_000)) == 100


def test_change_rate_drops_the_unearned_fraction() -> None:
    daily = parse_rate("1/d")
    fast = parse_rate("1000000/s", burst=1000)
    state = refill(drained(daily), daily, at(86_399))  # 86,399 us earned nothing yet
    assert state.updated_us == START_US
    changed = change_rate(state, daily, fast, at(86_399))
    assert changed == BucketState(0, START_US + 86_399)


def test_give_back_returns_tokens_up_to_the_burst() -> None:
    rate = parse_rate("10/s")
    ok, state = try_take(full_bucket(rate, at(0)), rate, at(0), n=3)
    assert ok
    assert give_back(state, rate, at(0), 2).tokens_micro == 9_000_000
    assert give_back(state, rate, at(0), 5).tokens_micro == 10_000_000
    assert give_back(state, rate, at(200_000), 1).tokens_micro == 10_000_000
