"""Flow-control state as a consumer reads it, in any store: the keys a job falls under, each limit's token
bucket and each breaker's state, and whether a job would be held back now.

Limits and breakers are keyed: ``"*"`` (store-wide), ``"queue:<name>"`` and ``"name:<job name>"``. The
policies are pure (``ratelimit``, ``breaker``); the store keeps their state, shared by every process (the
LMDB store: ``stores/lmdb/control.py``; PostgreSQL: ``stores/postgres/control.py``), each value encoded by
``pack_limit`` and ``pack_breaker`` here, the same bytes in every store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from . import breaker as breakers
from . import ratelimit
from .breaker import Breaker, BreakerPolicy, BreakerState
from .ratelimit import BucketState, Rate

GLOBAL_KEY = "*"
QUEUE_KEY_PREFIX = "queue:"
NAME_KEY_PREFIX = "name:"


def job_keys(queue: str, name: str | None) -> tuple[str, ...]:
    """The limit/breaker keys a job falls under: store-wide, its queue, and its name (task)."""
    if name is None:
        return (GLOBAL_KEY, QUEUE_KEY_PREFIX + queue)
    return (GLOBAL_KEY, QUEUE_KEY_PREFIX + queue, NAME_KEY_PREFIX + name)


@dataclass(frozen=True, slots=True)
class Limit:
    rate: Rate
    bucket: BucketState


@dataclass(frozen=True, slots=True)
class BreakerEntry:
    policy: BreakerPolicy
    breaker: Breaker


def pack_limit(limit: Limit) -> bytes:
    """A limit as a store keeps it: msgpack of [count, seconds, burst, the bucket's 16 bytes]."""
    rate = limit.rate
    return bytes(
        msgpack.packb([rate.count, rate.seconds, rate.burst, limit.bucket.encode()], use_bin_type=True)
    )


def unpack_limit(raw: bytes) -> Limit:
    count, seconds, burst, bucket = msgpack.unpackb(raw, raw=False)
    return Limit(Rate(count=count, seconds=seconds, burst=burst), BucketState.decode(bucket))


def pack_breaker(entry: BreakerEntry) -> bytes:
    """A breaker as a store keeps it: msgpack of [threshold, recovery timeout, the state's 21 bytes]."""
    policy = entry.policy
    return bytes(
        msgpack.packb([policy.threshold, policy.recovery_timeout, entry.breaker.encode()], use_bin_type=True)
    )


def unpack_breaker(raw: bytes) -> BreakerEntry:
    threshold, recovery_timeout, state = msgpack.unpackb(raw, raw=False)
    return BreakerEntry(BreakerPolicy(threshold, recovery_timeout), Breaker.decode(state))


@dataclass(frozen=True, slots=True)
class FlowState:
    """One consistent read of every limit and breaker, with what the hot path asks of it precomputed."""

    limits: dict[str, Limit]
    breakers: dict[str, BreakerEntry]
    all_closed: bool = field(init=False)  # every breaker closed: nothing held back by a breaker
    success_matters: bool = field(init=False)  # would an ack change some breaker (failures to forget)?

    def __post_init__(self) -> None:
        entries = self.breakers.values()
        object.__setattr__(self, "all_closed", all(e.breaker.state is BreakerState.CLOSED for e in entries))
        object.__setattr__(self, "success_matters", any(breakers.success_changes(e.breaker) for e in entries))

    def blocked(self, keys: Iterable[str], now: float) -> tuple[bool, float | None]:
        """Would a job under ``keys`` be held back now? -> (blocked, seconds until it might not be).
        A breaker that is open (or half-open with its one trial out) blocks; so does an empty bucket."""
        wait: float | None = None
        blocked = False
        for key in keys:
            entry = self.breakers.get(key)
            if entry is not None and _breaker_denies(entry, now):
                blocked = True
                until = breakers.seconds_to_trial(entry.breaker, entry.policy, now)
                wait = _min(wait, until if until is not None else entry.policy.recovery_timeout)
            limit = self.limits.get(key)
            if limit is not None:
                after = ratelimit.retry_after(limit.bucket, limit.rate, now)
                if after > 0:
                    blocked = True
                    wait = _min(wait, after)
        return blocked, wait


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _breaker_denies(entry: BreakerEntry, now: float) -> bool:
    allowed, _ = breakers.allow(entry.breaker, entry.policy, now)
    return not allowed


def breaker_summary(entry: BreakerEntry, now: float) -> dict[str, Any]:
    state: BreakerState = breakers.peek(entry.breaker, entry.policy, now)
    return {
        "state": state.value,
        "failures": entry.breaker.failures,
        "threshold": entry.policy.threshold,
        "recovery_timeout": entry.policy.recovery_timeout,
        "seconds_to_trial": breakers.seconds_to_trial(entry.breaker, entry.policy, now),
    }
