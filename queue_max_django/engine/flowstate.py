"""Flow-control state as a consumer reads it, in any store: the keys a job falls under, each limit's token
bucket and each breaker's state, and whether a job would be held back now.

Limits and breakers are keyed: ``"*"`` (store-wide), ``"queue:<name>"`` and ``"name:<job name>"``. The
policies are pure (``ratelimit``, ``breaker``); the store keeps their state, shared by every process (the
LMDB store: ``stores/lmdb/control.py``; PostgreSQL: ``stores/postgres/control.py``), each value encoded by
``pack_limit`` and ``pack_breaker`` here, the same bytes in every store. What each store operation makes of
those values (``take``, ``admit``, ``give_back``, ``record`` ...) is one pure function here too, that both
stores call inside their transaction: the stores only read, lock and write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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


# ------------------------------------------------------------------ each store operation, as a pure step
# A store's flow operation reads the stored values of its keys (inside its write transaction, or with the
# rows locked), reads ``now`` from the store's clock, and calls one of these: what it returns is what the
# store writes (key -> ``pack_limit``/``pack_breaker`` bytes), so that both stores apply the very same
# arithmetic. A key absent from a mapping has no limit (or no breaker).


def limit_set(raw: bytes | None, rate: Rate, now: float) -> bytes:
    """``set_limit``: a new limit starts full; a changed one keeps the tokens there are (at most the new
    burst)."""
    if raw is None:
        return pack_limit(Limit(rate, ratelimit.full_bucket(rate, now)))
    old = unpack_limit(raw)
    return pack_limit(Limit(rate, ratelimit.change_rate(old.bucket, old.rate, rate, now)))


def limit_reset(raw: bytes, now: float) -> bytes:
    """``reset_limit``: the limit with its bucket full again."""
    rate = unpack_limit(raw).rate
    return pack_limit(Limit(rate, ratelimit.full_bucket(rate, now)))


def tokens_taken(
    limits: Mapping[str, bytes], keys: Sequence[str], n: int, now: float
) -> tuple[bool, float, dict[str, bytes]]:
    """``take``: ``n`` tokens from every limit among ``keys``, all or none. -> (granted, seconds to wait,
    the values to write): every limit's when granted; when refused, only those of the buckets whose time
    base the clock set back moved (kept, or the bucket would stay frozen until the clock caught up)."""
    updates = []
    wait = 0.0
    for key in keys:
        raw = limits.get(key)
        if raw is None:
            continue
        limit = unpack_limit(raw)
        ok, bucket = ratelimit.try_take(limit.bucket, limit.rate, now, n)
        if not ok:
            wait = max(wait, ratelimit.retry_after(limit.bucket, limit.rate, now, n))
        updates.append((key, limit, bucket))
    if wait > 0:
        kept = {}
        for key, old, _bucket in updates:
            refilled = ratelimit.refill(old.bucket, old.rate, now)
            if refilled.updated_us < old.bucket.updated_us:
                kept[key] = pack_limit(Limit(old.rate, refilled))
        return False, wait, kept
    return True, 0.0, {key: pack_limit(Limit(old.rate, bucket)) for key, old, bucket in updates}


def tokens_taken_up_to(raw: bytes, most: int, give_back: int, now: float) -> tuple[int, bytes | None]:
    """``take_up_to``: ``give_back`` unused tokens return (up to the burst), then as many whole tokens as
    there are are taken, at most ``most``. -> (how many were taken, the value to write; None: unchanged)."""
    limit = unpack_limit(raw)
    bucket = limit.bucket
    if give_back > 0:
        bucket = ratelimit.give_back(bucket, limit.rate, now, give_back)
    count = min(most, int(ratelimit.remaining(bucket, limit.rate, now)))
    taken = 0
    if count >= 1:
        ok, after = ratelimit.try_take(bucket, limit.rate, now, count)
        if ok:
            bucket, taken = after, count
    return taken, None if bucket == limit.bucket else pack_limit(Limit(limit.rate, bucket))


def handed_back(
    limits: Mapping[str, bytes], breaker_values: Mapping[str, bytes], keys: Sequence[str], n: int, now: float
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """``give_back``: undo an admission: ``n`` tokens return to every limit among ``keys`` (up to the
    burst), and a half-open breaker's trial is handed back. -> (limit values, breaker values) to write."""
    limit_writes: dict[str, bytes] = {}
    breaker_writes: dict[str, bytes] = {}
    for key in keys:
        raw = limit_writes.get(key, limits.get(key))
        if raw is not None:
            limit = unpack_limit(raw)
            bucket = ratelimit.give_back(limit.bucket, limit.rate, now, n)
            limit_writes[key] = pack_limit(Limit(limit.rate, bucket))
        raw = breaker_writes.get(key, breaker_values.get(key))
        if raw is not None:
            entry = unpack_breaker(raw)
            state = entry.breaker
            if state.state is BreakerState.HALF_OPEN and state.trial_started_us is not None:
                untried = replace(state, trial_started_us=None)
                breaker_writes[key] = pack_breaker(BreakerEntry(entry.policy, untried))
    return limit_writes, breaker_writes


def admitted(
    limits: Mapping[str, bytes], breaker_values: Mapping[str, bytes], keys: Sequence[str], n: int, now: float
) -> tuple[bool, float, dict[str, bytes], dict[str, bytes]]:
    """``admit``: may a job under ``keys`` start? Every breaker must allow it (a half-open breaker hands
    out its one trial) and every limit must have ``n`` tokens; all or nothing. -> (admitted, seconds to
    wait before trying again, limit values, breaker values to write: none when refused)."""
    limit_writes: dict[str, bytes] = {}
    breaker_writes: dict[str, bytes] = {}
    wait = 0.0
    for key in keys:
        raw = breaker_values.get(key)
        if raw is not None:
            entry = unpack_breaker(raw)
            allowed, state = breakers.allow(entry.breaker, entry.policy, now)
            if not allowed:
                until = breakers.seconds_to_trial(entry.breaker, entry.policy, now)
                wait = max(wait, until if until else 0.001)
            elif state != entry.breaker:
                breaker_writes[key] = pack_breaker(BreakerEntry(entry.policy, state))
        raw = limits.get(key)
        if raw is not None:
            limit = unpack_limit(raw)
            ok, bucket = ratelimit.try_take(limit.bucket, limit.rate, now, n)
            if not ok:
                wait = max(wait, ratelimit.retry_after(limit.bucket, limit.rate, now, n))
            limit_writes[key] = pack_limit(Limit(limit.rate, bucket))
    if wait > 0:
        return False, wait, {}, {}
    return True, 0.0, limit_writes, breaker_writes


def outcome_counted(
    breaker_values: Mapping[str, bytes], keys: Sequence[str], success: bool, now: float
) -> dict[str, bytes]:
    """``record``: a job under ``keys`` finished; every breaker among them counts it. -> the breaker values
    that changed."""
    writes: dict[str, bytes] = {}
    for key in keys:
        raw = writes.get(key, breaker_values.get(key))
        if raw is None:
            continue
        entry = unpack_breaker(raw)
        if success:
            state = breakers.record_success(entry.breaker, entry.policy, now)
        else:
            state = breakers.record_failure(entry.breaker, entry.policy, now)
        if state != entry.breaker:
            writes[key] = pack_breaker(BreakerEntry(entry.policy, state))
    return writes


def breaker_set(raw: bytes | None, policy: BreakerPolicy) -> bytes:
    """``set_breaker``: a new breaker starts closed; a changed one keeps its state under the new policy."""
    state = Breaker.closed() if raw is None else unpack_breaker(raw).breaker
    return pack_breaker(BreakerEntry(policy, state))


def breaker_reset(raw: bytes) -> bytes:
    """``reset_breaker``: the breaker closed again, its policy kept."""
    return pack_breaker(BreakerEntry(unpack_breaker(raw).policy, Breaker.closed()))
