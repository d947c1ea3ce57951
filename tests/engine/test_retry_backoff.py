"""backoff_delay(): the pure function behind nack()'s retry schedule.

``retry_backoff * 2**(retries-1)`` seconds, +-20 % jitter, capped at ``retry_backoff_max``; 0 retries at once.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_max_django.engine import backoff_delay
from queue_max_django.engine.retry import decide

pytestmark = [pytest.mark.contract, pytest.mark.rule_backoff]

INF = math.inf


class FixedUniform:
    """An rng stub whose uniform(a, b) returns a chosen point of [a, b] and records the bounds."""

    def __init__(self, where: float) -> None:
        self.where = where
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return a + (b - a) * self.where


def test_exact_value_for_a_seed() -> None:
    """Random(0).random() is 0.8444218515250481, so the factor is 0.8 + 0.4 * that."""
    assert backoff_delay(1, 1.0, rng=random.Random(0)) == pytest.approx(1.1377687406100193, rel=1e-12)
    assert backoff_delay(3, 2.0, rng=random.Random(0)) == pytest.approx(8 * 1.1377687406100193, rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("retries", [1, 2, 5, 10])
def test_value_is_base_doubling_times_one_seeded_jitter_draw(seed: int, retries: int) -> None:
    """Exactly min(base * 2**(retries-1) * Random(seed).uniform(0.8, 1.2), cap)."""
    expected = min(1.5 * 2 ** (retries - 1) * random.Random(seed).uniform(0.8, 1.2), 600.0)
    assert backoff_delay(retries, 1.5, 600.0, rng=random.Random(seed)) == pytest.approx(expected, rel=1e-12)


def test_same_seed_gives_the_same_schedule() -> None:
    one, two = random.Random(99), random.Random(99)
    first = [backoff_delay(n, 0.5, rng=one) for n in range(1, 12)]
    second = [backoff_delay(n, 0.5, rng=two) for n in range(1, 12)]
    assert first == second
    assert len(set(first)) == len(first)  # the jitter really varies


@pytest.mark.parametrize(("where", "factor"), [(0.0, 0.8), (0.5, 1.0), (1.0, 1.2)])
def test_jitter_is_plus_minus_20_percent(where: float, factor: float) -> None:
    rng = FixedUniform(where)
    for retries in range(1, 8):
        assert backoff_delay(retries, 3.0, INF, rng=rng) == pytest.approx(3.0 * 2 ** (retries - 1) * factor)
    assert all(a == pytest.approx(0.8) and b == pytest.approx(1.2) for a, b in rng.calls)


def test_zero_jitter_is_exact_doubling() -> None:
    assert [backoff_delay(n, 1.0, INF, jitter=0, rng=random.Random(1)) for n in range(1, 6)] == [
        1,
        2,
        4,
        8,
        16,
    ]


@given(
    retries=st.integers(min_value=1, max_value=60),
    base=st.floats(min_value=0.001, max_value=1000),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_within_20_percent_of_nominal_without_cap(retries: int, base: float, seed: int) -> None:
    nominal = base * 2.0 ** (retries - 1)
    delay = backoff_delay(retries, base, INF, rng=random.Random(seed))
    assert nominal * 0.8 * (1 - 1e-12) <= delay <= nominal * 1.2 * (1 + 1e-12)


@given(
    retries=st.integers(min_value=1, max_value=10**6),
    base=st.floats(min_value=0, max_value=1e6),
    cap=st.floats(min_value=0, max_value=1e7),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_never_over_the_cap_never_negative(retries: int, base: float, cap: float, seed: int) -> None:
    delay = backoff_delay(retries, base, cap, rng=random.Random(seed))
    assert 0 <= delay <= cap
    assert math.isfinite(delay)


def test_capped_at_retry_backoff_max() -> None:
    assert backoff_delay(20, 1.0, 3600.0, rng=random.Random(3)) == 3600.0
    # 4 s +-20 % is always over a cap of 3: exactly the cap
    assert all(backoff_delay(3, 1.0, 3.0, rng=random.Random(s)) == 3.0 for s in range(50))


@pytest.mark.parametrize("retries", [1, 2, 10, 1000, 10**9])
def test_base_zero_retries_at_once(retries: int) -> None:
    assert backoff_delay(retries, 0.0, rng=random.Random(1)) == 0.0
    assert backoff_delay(retries, 0, 10.0) == 0.0


@pytest.mark.parametrize("retries", [64, 65, 1024, 10**6, 10**18, 2**100])
def test_huge_retry_counts_do_not_overflow(retries: int) -> None:
    assert backoff_delay(retries, 1.0, 3600.0, rng=random.Random(1)) == 3600.0
    uncapped = backoff_delay(retries, 1.0, INF, rng=random.Random(1))
    assert math.isfinite(uncapped) and uncapped > 0


def test_seeded_rng_leaves_the_global_random_alone() -> None:
    state = random.getstate()
    backoff_delay(4, 1.0, rng=random.Random(5))
    assert random.getstate() == state


def test_without_rng_uses_module_random_within_bounds() -> None:
    delays = [backoff_delay(2, 1.0) for _ in range(200)]
    assert all(1.6 <= d <= 2.4 for d in delays)
    assert len(set(delays)) > 1


def test_decide_is_the_retry_rule_of_design_md() -> None:
    """rule_backoff: a job fails for good on the nack that makes retries exceed max_retries (or at once when
    permanent); otherwise it runs again after the delay given, or the backoff, or at once with base 0."""
    now = 1_000.0
    assert decide(1, 0, now) is None  # max_retries 0: one attempt only
    assert decide(4, 3, now) is None and decide(3, 3, now) == now
    assert decide(1, 5, now, permanent=True) is None
    assert decide(1, 5, now, delay=7.5) == now + 7.5
    assert decide(1, 5, now, delay=0) == now
    seeded, again = random.Random(3), random.Random(3)
    assert decide(3, 5, now, base=2.0, rng=seeded) == now + backoff_delay(3, 2.0, rng=again)
    assert decide(30, 50, now, base=2.0, cap=10.0, rng=seeded) == now + 10.0
