"""Retry backoff and the retry decision: pure functions, testable exactly with a seeded random source. The
store applies a decision; it never decides (so that a store is given a time, not a policy)."""

from __future__ import annotations

import random as _random
from typing import Protocol

JITTER = 0.2  # +-20 %


class _Uniform(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


def backoff_delay(
    retries: int,
    base: float,
    cap: float = 3600.0,
    *,
    jitter: float = JITTER,
    rng: _Uniform | None = None,
) -> float:
    """Seconds to wait before the next attempt after the ``retries``-th failed one (1 for the first).

    ``base * 2 ** (retries - 1)``, times a random factor in ``[1 - jitter, 1 + jitter]``, capped at ``cap``.
    ``base == 0`` means retry at once.
    """
    if base <= 0:
        return 0.0
    exponent = max(retries, 1) - 1
    # Past 2**64 the float is already far over any sane cap; avoid OverflowError on huge retry counts.
    raw = base * 2.0 ** min(exponent, 64)
    factor = (rng or _random).uniform(1.0 - jitter, 1.0 + jitter)
    return min(raw * factor, cap)


def decide(
    retries: int,
    max_retries: int,
    now: float,
    *,
    delay: float | None = None,
    permanent: bool = False,
    base: float = 0.0,
    cap: float = 3600.0,
    rng: _Uniform | None = None,
) -> float | None:
    """When a job runs again after its ``retries``-th failed attempt (1 for the first): unix seconds (``now``
    itself for at once), or None for a dead letter. Dead when ``permanent`` or once ``retries`` exceeds
    ``max_retries``; else after ``delay`` seconds if given, or ``backoff_delay(retries, base, cap)``."""
    if permanent or retries > max_retries:
        return None
    wait = backoff_delay(retries, base, cap, rng=rng) if delay is None else delay
    return now + wait if wait > 0 else now
