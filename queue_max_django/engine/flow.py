"""``Flow``: a ``Queue``'s flow control, a member of it: shared rate limits, circuit breakers, and claiming
under them.

Limits and breakers are keyed: ``"*"`` (store-wide), ``"queue:<name>"`` and ``"name:<job name>"`` (the Django
layer's task names). A job falls under the keys of its queue and name (``flowstate.job_keys``). Their state is
in the store's ``control`` member, shared by every process (LMDB: its control environment,
``stores/lmdb/control.py``).

A consumer only takes a job it is allowed to start: it looks for the best job that no blocked key holds back
(an open breaker, an empty bucket), then admits it (breakers allow it, tokens taken: one transaction), then
claims exactly that job; if someone else claimed it first, the tokens and the breaker's trial are given back.
Jobs held back stay pending, untouched; the consumer serves the others: the priority rule (a ``get()`` never
passes over a waiting job of higher priority) makes an exception of exactly these jobs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import ratelimit
from .breaker import BreakerPolicy, success_changes
from .errors import InvalidJob, RateLimited
from .flowstate import (
    GLOBAL_KEY,
    NAME_KEY_PREFIX,
    QUEUE_KEY_PREFIX,
    FlowState,
    breaker_summary,
    job_keys,
)
from .pauses import Held, find_admissible
from .ratelimit import Rate, parse_rate
from .stores.contract.flow import FlowOps
from .tokens import new_token

if TYPE_CHECKING:
    from .stores.base import Store
    from .stores.types import Candidate, Claimed

MAX_KEY = 200
MAX_ADMIT_ROUNDS = 16
# Limits of at least FAST_RATE per second are served from a small local reserve of tokens, taken from the
# shared bucket RESERVE_SECONDS' worth at a time (at most RESERVE_MAX) and dropped after RESERVE_TTL: at
# such rates one shared transaction per claim would cost more than the claim itself, while holding a few
# milliseconds' worth of tokens skews nothing. Slower limits are admitted job by job.
FAST_RATE = 200.0
RESERVE_SECONDS = 0.01
RESERVE_MAX = 1000
RESERVE_TTL = 0.05


def check_wait(key: str, wait: float, deadline: float | None, timeout: float | None) -> None:
    """``acquire``'s refusal: ``RateLimited`` when the next token of ``key``, ``wait`` seconds away, comes
    after the ``deadline`` (monotonic) of a wait of ``timeout`` seconds (None: no deadline)."""
    if deadline is not None and wait > deadline - time.monotonic():
        message = f"no token for {key!r} within {timeout} s; the next one comes in {wait:.3f} s"
        raise RateLimited(message, wait)


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise InvalidJob(f"a limit or breaker key must be a non-empty str of at most {MAX_KEY} characters")
    return key


class Flow:
    """The limits and breakers of one store, for the ``Queue`` that holds it (a new one whenever the Queue
    opens its environments, also in a forked child). Everything here shares state across processes through
    the control store; the ``Queue`` checks that it is open before it calls any of this."""

    def __init__(self, control: FlowOps, clock: Callable[[], float]) -> None:
        self._control = control
        self._clock = clock
        self._cache: tuple[int, FlowState | None] = (-1, None)
        # ``served``'s cache: the state it was made of, and {a claim's queue filter: that state's part}
        self._served: tuple[FlowState | None, dict[tuple[str, ...] | None, FlowState | None]] = (None, {})
        self._reserve: dict[str, tuple[int, float]] = {}  # key -> (tokens held locally, taken at: monotonic)
        self._reserve_lock = threading.Lock()

    # ------------------------------------------------------------------ rate limits

    def set_rate_limit(self, key: str, rate: Any, *, burst: int | None = None) -> Rate:
        parsed = parse_rate(rate, burst=burst)
        self._control.set_limit(_check_key(key), parsed)
        return parsed

    def remove_rate_limit(self, key: str) -> bool:
        return self._control.remove_limit(_check_key(key))

    def reset_rate_limit(self, key: str) -> bool:
        return self._control.reset_limit(_check_key(key))

    def rate_limits(self) -> dict[str, Rate]:
        return {key: limit.rate for key, limit in self._control.state().limits.items()}

    def try_acquire(self, key: str) -> bool:
        granted, _ = self.take(key)
        return granted

    def take(self, key: str) -> tuple[bool, float]:
        """One token from ``key`` if there is one now. -> (granted, seconds until one may be there)."""
        return self._control.take([_check_key(key)])

    def acquire(self, key: str, timeout: float | None) -> None:
        """``timeout`` was checked by the caller."""
        _check_key(key)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            granted, wait = self.take(key)
            if granted:
                return
            check_wait(key, wait, deadline, timeout)
            time.sleep(wait)

    def remaining(self, key: str) -> float | None:
        limit = self._control.state().limits.get(_check_key(key))
        if limit is None:
            return None
        return ratelimit.remaining(limit.bucket, limit.rate, self._clock())

    def retry_after(self, key: str) -> float:
        limit = self._control.state().limits.get(_check_key(key))
        if limit is None:
            return 0.0
        return ratelimit.retry_after(limit.bucket, limit.rate, self._clock())

    # ------------------------------------------------------------------ circuit breakers

    def set_circuit_breaker(self, key: str, *, threshold: int = 5, recovery_timeout: float = 60.0) -> None:
        self._control.set_breaker(_check_key(key), BreakerPolicy(threshold, recovery_timeout))

    def remove_circuit_breaker(self, key: str) -> bool:
        return self._control.remove_breaker(_check_key(key))

    def reset_circuit_breaker(self, key: str) -> bool:
        return self._control.reset_breaker(_check_key(key))

    def circuit_breakers(self) -> dict[str, dict[str, Any]]:
        now = self._clock()
        return {key: breaker_summary(entry, now) for key, entry in self._control.state().breakers.items()}

    # ------------------------------------------------------------------ the hot path's view

    def state(self) -> FlowState | None:
        """The current limits and breakers, or None when there are none (the common, free case).
        Re-read only when some process changed them."""
        version = self._control.version()
        cached_version, state = self._cache
        if version != cached_version:
            state = self._control.state()
            if not state.limits and not state.breakers:
                state = None
            self._cache = (version, state)
        return state

    def served(self, allowed: tuple[str, ...] | None) -> FlowState | None:
        """The part of ``state()`` that can hold back a job of the queues ``allowed`` (sorted names, None:
        every queue): the store-wide key, those queues' keys and every task's (``name:``; a task's jobs may
        be in any queue); None when that is nothing. A consumer claims under flow control only for these,
        so a limit of a queue it does not serve, or a key that no job falls under (a ``try_acquire`` of the
        application's own), neither wakes it for its tokens nor takes it off the plain claim."""
        state = self.state()
        if state is None:
            return None
        made_of, parts = self._served
        if made_of is not state:
            parts = {}
            self._served = (state, parts)
        elif allowed in parts:
            return parts[allowed]
        queue_keys = None if allowed is None else {QUEUE_KEY_PREFIX + name for name in allowed}

        def applies(key: str) -> bool:
            if key.startswith(QUEUE_KEY_PREFIX):
                return queue_keys is None or key in queue_keys
            return key == GLOBAL_KEY or key.startswith(NAME_KEY_PREFIX)

        if all(map(applies, state.limits)) and all(map(applies, state.breakers)):
            part: FlowState | None = state
        else:
            limits = {key: limit for key, limit in state.limits.items() if applies(key)}
            entries = {key: entry for key, entry in state.breakers.items() if applies(key)}
            part = FlowState(limits, entries) if limits or entries else None
        if len(parts) >= 64:  # get(queues=...) may name many filters: never grow unbounded
            parts.clear()
        parts[allowed] = part
        return part

    def stats(self) -> dict[str, Any]:
        """``stats()``'s ``rate_limits`` and ``circuit_breakers``, when there are any."""
        state = self.state()
        if state is None:
            return {}
        now = self._clock()
        out: dict[str, Any] = {}
        if state.limits:
            out["rate_limits"] = {
                key: {
                    "rate": str(limit.rate),
                    "remaining": ratelimit.remaining(limit.bucket, limit.rate, now),
                }
                for key, limit in state.limits.items()
            }
        if state.breakers:
            out["circuit_breakers"] = {
                key: breaker_summary(entry, now) for key, entry in state.breakers.items()
            }
        return out

    def record_outcome(self, queue: str, name: str | None, success: bool) -> None:
        """Count a finished job in its breakers; skips the write when it would change nothing."""
        state = self.state()
        if state is None or not state.breakers or (success and not state.success_matters):
            return
        keys = [key for key in job_keys(queue, name) if key in state.breakers]
        if not keys:
            return
        if success and not any(success_changes(state.breakers[key].breaker) for key in keys):
            return
        self._control.record(keys, success)

    def fast_admission(self, state: FlowState) -> list[str] | None:
        """Can this consumer claim the usual way, with no per-job admission? Yes when every breaker is
        closed and every limit is fast: then one token of each limit is set aside from the local reserve
        (refilled from the shared bucket when empty or stale) and the keys are returned; ``settle`` keeps
        the tokens of the claimed job's keys and puts the others back. None: admit job by job."""
        if not state.all_closed:
            return None
        if not state.limits:
            return []
        if any(limit.rate.per_second < FAST_RATE for limit in state.limits.values()):
            return None
        now = time.monotonic()
        with self._reserve_lock:
            for key, limit in state.limits.items():
                held, taken_at = self._reserve.get(key, (0, 0.0))
                if held >= 1 and now - taken_at < RESERVE_TTL:
                    continue
                # Stale tokens go back to the shared bucket (never wasted), fresh ones come out of it.
                chunk = max(1, min(RESERVE_MAX, int(limit.rate.per_second * RESERVE_SECONDS)))
                got = self._control.take_up_to(key, chunk, give_back=held)
                if got < 1:
                    self._reserve.pop(key, None)
                    return None
                self._reserve[key] = (got, now)
            held_keys = list(state.limits)
            for key in held_keys:  # set aside under the lock: two threads never count on one token
                tokens, taken_at = self._reserve[key]
                self._reserve[key] = (tokens - 1, taken_at)
        return held_keys

    def settle(self, held_keys: list[str], claimed: tuple[str, str | None] | None) -> None:
        """After a fast claim: the claimed job (its queue and name, None if none) spent the tokens of its
        own keys; the rest go back."""
        if not held_keys or (claimed is not None and held_keys == [GLOBAL_KEY]):
            return  # nothing held, or only the store-wide token, which every job spends
        spent = set(job_keys(*claimed)) if claimed is not None else set()
        with self._reserve_lock:
            for key in held_keys:
                if key not in spent and key in self._reserve:
                    tokens, taken_at = self._reserve[key]
                    self._reserve[key] = (tokens + 1, taken_at)

    def claim(
        self,
        store: Store,
        allowed: tuple[str, ...] | None,
        state: FlowState,
        lease_time: float,
        worker_id: str | None,
        paused: Held | None = None,
    ) -> tuple[Claimed | None, float | None]:
        """Claim the best job of the store's shards that limits and breakers (and the pauses ``paused``
        holds back: pauses.py) let start now. -> (the claimed job, or None and the clock time when it is
        worth looking again: the earliest ETA or unblocking, None if nothing is in sight)."""
        for _round in range(MAX_ADMIT_ROUNDS):
            now = self._clock()
            keys = set(state.limits) | set(state.breakers)
            blocked: dict[str, float] = {}
            for key in keys:
                is_blocked, wait = state.blocked([key], now)
                if is_blocked:
                    blocked[key] = wait if wait is not None else 0.05
            soonest = min(blocked.values()) if blocked else None
            if GLOBAL_KEY in blocked:
                return None, now + (soonest or 0.0)
            skip_queues = frozenset(
                k[len(QUEUE_KEY_PREFIX) :] for k in blocked if k.startswith(QUEUE_KEY_PREFIX)
            )
            skip_names = frozenset(
                k[len(NAME_KEY_PREFIX) :] for k in blocked if k.startswith(NAME_KEY_PREFIX)
            )
            best: Candidate | None = None
            next_eta: float | None = None
            due = False
            for shard in range(store.shards):
                candidate, eta = find_admissible(store, shard, now, allowed, skip_queues, skip_names, paused)
                if eta is not None:
                    if eta <= now:
                        due = True
                    elif next_eta is None or eta < next_eta:
                        next_eta = eta
                if candidate is not None and (best is None or candidate.order < best.order):
                    best = candidate
            if due:
                store.promote_due(None, now)
                continue
            wake_in = next_eta - now if next_eta is not None else None
            if soonest is not None:
                wake_in = soonest if wake_in is None else min(wake_in, soonest)
            if best is None:
                return None, None if wake_in is None else now + wake_in
            job_keys_ = job_keys(best.queue, best.name)
            admitted, wait = self._control.admit(job_keys_)
            if not admitted:
                state = self._control.state()  # someone else spent it; look again with fresh state
                continue
            claimed = store.claim_job(now, best.job_id, lease_time, new_token(), worker_id, False)
            if claimed is None:
                self._control.give_back(job_keys_)
                continue
            return claimed, None
        return None, None
