"""Flow-control state as a consumer reads it, in any store: the keys a job falls under, each limit's token
bucket and each breaker's state, and whether a job would be held back now.

Limits and breakers are keyed: ``"*"`` (store-wide), ``"queue:<name>"`` and ``"name:<job name>"``. The
policies are pure (``ratelimit``, ``breaker``); the store keeps their state, shared by every process (the
LMDB store: ``stores/lmdb/control.py``; PostgreSQL: ``stores/postgres/control.py``), each value encoded by
``pack_limit`` and ``pack_breaker`` here, the same bytes in every store. What each store operation makes of
those values (``take``, ``admit``, ``give_back``, ``record`` ...) is one pure function here too, that both
stores call inside their transaction: the stores only read, lock and write.

A stored value that does not decode (written past the engine: by hand, by another program, a damaged page)
is damage, never an error of every claim: it is ignored for admission (fail open, so jobs flow: a limit
that no one can read limits nothing, a breaker that no one can read is closed), logged once per key and
value (``ignored``), left out of ``FlowState`` but named in its ``damaged_*`` members (the dashboard shows
them) and by the stores' ``verify()``; setting the limit or breaker again (``set_*``, as the Django layer
does at start-up) or removing it replaces it. Each step below treats such a value as absent and writes
nothing over it, but ``limit_set``/``breaker_set``, which start anew.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from . import breaker as breakers
from . import ratelimit
from .breaker import Breaker, BreakerPolicy, BreakerState
from .errors import QueueCorrupted, QueueError
from .ratelimit import BucketState, Rate

logger = logging.getLogger("queue_max_django.engine")

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


# What decoding a stored value can raise when the value was not written by ``pack_*``: not msgpack (or too
# deep), another shape or type, or values the policies refuse (``InvalidRate``, ``QueueCorrupted`` ...).
_UNDECODABLE = (ValueError, TypeError, OverflowError, msgpack.UnpackException, QueueError)


def unpack_limit(raw: bytes) -> Limit:
    """The limit ``pack_limit`` wrote; ``QueueCorrupted`` saying why for bytes it cannot have written."""
    try:
        count, seconds, burst, bucket = msgpack.unpackb(raw, raw=False)
        return Limit(Rate(count=count, seconds=seconds, burst=burst), BucketState.decode(bucket))
    except _UNDECODABLE as exc:
        raise QueueCorrupted(f"the stored value does not decode ({_why(exc)})") from exc


def pack_breaker(entry: BreakerEntry) -> bytes:
    """A breaker as a store keeps it: msgpack of [threshold, recovery timeout, the state's 21 bytes]."""
    policy = entry.policy
    return bytes(
        msgpack.packb([policy.threshold, policy.recovery_timeout, entry.breaker.encode()], use_bin_type=True)
    )


def unpack_breaker(raw: bytes) -> BreakerEntry:
    """The breaker ``pack_breaker`` wrote; ``QueueCorrupted`` saying why for bytes it cannot have written."""
    try:
        threshold, recovery_timeout, state = msgpack.unpackb(raw, raw=False)
        return BreakerEntry(BreakerPolicy(threshold, recovery_timeout), Breaker.decode(state))
    except _UNDECODABLE as exc:
        raise QueueCorrupted(f"the stored value does not decode ({_why(exc)})") from exc


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


LIMIT = "rate limit"
BREAKER = "circuit breaker"
_IGNORED_MESSAGE = {
    LIMIT: "set_rate_limit() or remove_rate_limit() replaces it",
    BREAKER: "set_circuit_breaker() or remove_circuit_breaker() replaces it",
}
_logged: set[tuple[str, str, int]] = set()  # (kind, key, hash of the value): damage logged in this process
_MAX_LOGGED = 1000


def ignored(kind: str, key: str, raw: bytes, why: str) -> str:
    """The damage of a ``kind`` (``LIMIT``, ``BREAKER``) keyed ``key`` whose stored value ``raw`` does not
    decode, as ``verify()`` names it; logged (ERROR) once per key and value in this process."""
    message = (
        f"{kind} {key!r}: {why}; it is ignored for admission (jobs under it run as if it were not set) "
        f"until {_IGNORED_MESSAGE[kind]}"
    )
    seen = (kind, key, hash(raw))
    if seen not in _logged:
        if len(_logged) >= _MAX_LOGGED:
            _logged.clear()
        _logged.add(seen)
        logger.error("%s", message, extra={"flow_key": key, "flow_kind": kind})
    return message


def _limit(key: str, raw: bytes) -> Limit | None:
    """``raw`` decoded, or None (logged once) when it does not decode: the limit is then ignored."""
    try:
        return unpack_limit(raw)
    except QueueCorrupted as exc:
        ignored(LIMIT, key, raw, str(exc))
        return None


def _breaker(key: str, raw: bytes) -> BreakerEntry | None:
    """``raw`` decoded, or None (logged once) when it does not decode: the breaker is then ignored."""
    try:
        return unpack_breaker(raw)
    except QueueCorrupted as exc:
        ignored(BREAKER, key, raw, str(exc))
        return None


Rows = Iterable[tuple[str, bytes]]  # (key, stored value) of every limit, or every breaker


def read_state(limit_rows: Rows, breaker_rows: Rows) -> FlowState:
    """A ``FlowState`` of the stored values (key, value) of every limit and breaker: a value that does not
    decode is left out (ignored, logged once) and named in ``damaged_limits``/``damaged_breakers``."""
    limits: dict[str, Limit] = {}
    entries: dict[str, BreakerEntry] = {}
    damaged_limits: dict[str, str] = {}
    damaged_breakers: dict[str, str] = {}
    for key, raw in limit_rows:
        try:
            limits[key] = unpack_limit(raw)
        except QueueCorrupted as exc:
            damaged_limits[key] = str(exc)
            ignored(LIMIT, key, raw, str(exc))
    for key, raw in breaker_rows:
        try:
            entries[key] = unpack_breaker(raw)
        except QueueCorrupted as exc:
            damaged_breakers[key] = str(exc)
            ignored(BREAKER, key, raw, str(exc))
    return FlowState(limits, entries, damaged_limits, damaged_breakers)


def damage(limit_rows: Rows, breaker_rows: Rows) -> list[str]:
    """``verify()``'s problems of the control data: every limit and breaker whose value does not decode."""
    state = read_state(limit_rows, breaker_rows)
    return [
        *(f"{LIMIT} {key!r}: {why}" for key, why in state.damaged_limits.items()),
        *(f"{BREAKER} {key!r}: {why}" for key, why in state.damaged_breakers.items()),
    ]


@dataclass(frozen=True, slots=True)
class FlowState:
    """One consistent read of every limit and breaker, with what the hot path asks of it precomputed."""

    limits: dict[str, Limit]
    breakers: dict[str, BreakerEntry]
    # Keys whose stored value does not decode -> why (module docstring): not in ``limits``/``breakers``.
    damaged_limits: dict[str, str] = field(default_factory=dict)
    damaged_breakers: dict[str, str] = field(default_factory=dict)
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
# arithmetic. A key absent from a mapping has no limit (or no breaker); a value that does not decode is
# treated as absent (module docstring).


def limit_set(key: str, raw: bytes | None, rate: Rate, now: float) -> bytes:
    """``set_limit``: a new limit starts full (so does one whose old value does not decode: it replaces
    it); a changed one keeps the tokens there are (at most the new burst)."""
    old = None if raw is None else _limit(key, raw)
    if old is None:
        return pack_limit(Limit(rate, ratelimit.full_bucket(rate, now)))
    return pack_limit(Limit(rate, ratelimit.change_rate(old.bucket, old.rate, rate, now)))


def limit_reset(key: str, raw: bytes, now: float) -> bytes | None:
    """``reset_limit``: the limit with its bucket full again; None (no such limit) when its value does not
    decode: its rate is unknown."""
    old = _limit(key, raw)
    if old is None:
        return None
    return pack_limit(Limit(old.rate, ratelimit.full_bucket(old.rate, now)))


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
        limit = None if raw is None else _limit(key, raw)
        if limit is None:
            continue
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


def tokens_taken_up_to(
    key: str, raw: bytes, most: int, give_back: int, now: float
) -> tuple[int, bytes | None]:
    """``take_up_to``: ``give_back`` unused tokens return (up to the burst), then as many whole tokens as
    there are are taken, at most ``most``. -> (how many were taken, the value to write; None: unchanged).
    A value that does not decode limits nothing: ``most`` are taken, as from a key without a limit."""
    limit = _limit(key, raw)
    if limit is None:
        return most, None
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
        limit = None if raw is None else _limit(key, raw)
        if limit is not None:
            bucket = ratelimit.give_back(limit.bucket, limit.rate, now, n)
            limit_writes[key] = pack_limit(Limit(limit.rate, bucket))
        raw = breaker_writes.get(key, breaker_values.get(key))
        entry = None if raw is None else _breaker(key, raw)
        if entry is not None:
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
        entry = None if raw is None else _breaker(key, raw)
        if entry is not None:
            allowed, state = breakers.allow(entry.breaker, entry.policy, now)
            if not allowed:
                until = breakers.seconds_to_trial(entry.breaker, entry.policy, now)
                wait = max(wait, until if until else 0.001)
            elif state != entry.breaker:
                breaker_writes[key] = pack_breaker(BreakerEntry(entry.policy, state))
        raw = limits.get(key)
        limit = None if raw is None else _limit(key, raw)
        if limit is not None:
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
        entry = None if raw is None else _breaker(key, raw)
        if entry is None:
            continue
        if success:
            state = breakers.record_success(entry.breaker, entry.policy, now)
        else:
            state = breakers.record_failure(entry.breaker, entry.policy, now)
        if state != entry.breaker:
            writes[key] = pack_breaker(BreakerEntry(entry.policy, state))
    return writes


def breaker_set(key: str, raw: bytes | None, policy: BreakerPolicy) -> bytes:
    """``set_breaker``: a new breaker starts closed (so does one whose old value does not decode: it
    replaces it); a changed one keeps its state under the new policy."""
    old = None if raw is None else _breaker(key, raw)
    return pack_breaker(BreakerEntry(policy, Breaker.closed() if old is None else old.breaker))


def breaker_reset(key: str, raw: bytes) -> bytes | None:
    """``reset_breaker``: the breaker closed again, its policy kept; None (no such breaker) when its value
    does not decode: its policy is unknown."""
    old = _breaker(key, raw)
    return None if old is None else pack_breaker(BreakerEntry(old.policy, Breaker.closed()))
