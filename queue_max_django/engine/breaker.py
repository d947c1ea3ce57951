"""The circuit-breaker policy: a pure state machine on a small state that round-trips through 21 bytes.

CLOSED counts consecutive failures and opens at ``threshold``. OPEN refuses work until ``recovery_timeout``
has passed since it opened, then becomes HALF_OPEN and hands out one trial: its success closes the breaker,
its failure opens it again. No I/O, no clock: every function takes ``now`` (unix seconds) and returns a new
value; the store applies them inside a write transaction (``stores/lmdb/control.py``,
``stores/postgres/control.py``).

Decisions where a breaker meets stale news (outcomes of jobs that started before it opened):

* A failure while OPEN keeps it OPEN and does **not** extend the timeout: jobs already running when the
  breaker opened keep failing for a while, and they must not push the trial back indefinitely. The failure
  count still grows (it is what ``stats()`` shows).
* A success while OPEN changes nothing: only a trial handed out by ``allow`` can close the breaker from
  OPEN. A success while HALF_OPEN closes it, whichever job it came from (the store cannot tell them apart,
  and a success after the recovery timeout is the evidence the trial looks for).
* A trial whose outcome never arrives (its worker died) is replaced: once it has been out for
  ``recovery_timeout`` seconds, ``allow`` hands out a new one.
* Times are compared as given: a clock set back delays the next trial by as much (breakers wait seconds or
  minutes, so this is bounded by one recovery timeout plus the step).
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from .errors import QueueCorrupted, QueueError

MICRO = 1_000_000
MAX_TIMEOUT = 100 * 365.25 * 86400  # a century, the engine's longest accepted interval
MAX_FAILURES = 2**32 - 1  # the failure count saturates here

_NONE = -(2**63)  # how an absent timestamp is stored
_STATE = struct.Struct("<BIqq")  # state code, failures, opened_at_us, trial_started_us
STATE_SIZE = _STATE.size  # 21


class BreakerState(enum.StrEnum):
    """Where a breaker stands. The values are what ``stats()`` shows."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


# Order matters: the code stored on disk is the index here.
_STATES: tuple[BreakerState, ...] = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN)
_CODE: dict[BreakerState, int] = {state: code for code, state in enumerate(_STATES)}


class InvalidBreakerPolicy(QueueError, ValueError):
    """A circuit-breaker setting is out of range: ``threshold`` must be an int of at least 1 and
    ``recovery_timeout`` a finite number of seconds above 0. The message names the setting."""


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """Open after ``threshold`` consecutive failures; try again ``recovery_timeout`` seconds later."""

    threshold: int = 5
    recovery_timeout: float = 60.0
    _timeout_us: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        threshold: Any = self.threshold
        timeout: Any = self.recovery_timeout
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int)
            or not 1 <= threshold <= MAX_FAILURES
        ):
            raise InvalidBreakerPolicy(
                f"threshold must be an int from 1 to {MAX_FAILURES} (consecutive failures), not {threshold!r}"
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not 0 < timeout <= MAX_TIMEOUT
        ):
            raise InvalidBreakerPolicy(
                f"recovery_timeout must be a finite number of seconds above 0 and at most {MAX_TIMEOUT:.0f}, "
                f"not {timeout!r}"
            )
        object.__setattr__(self, "_timeout_us", max(1, round(timeout * MICRO)))


@dataclass(frozen=True, slots=True)
class Breaker:
    """One breaker's state. Times are unix microseconds.

    ``failures`` counts consecutive failures (a success in CLOSED resets it); ``opened_at_us`` is when it last
    opened (None while CLOSED); ``trial_started_us`` is when the one HALF_OPEN trial was handed out (None when
    no trial is out).
    """

    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at_us: int | None = None
    trial_started_us: int | None = None

    @classmethod
    def closed(cls) -> Breaker:
        """The initial value: CLOSED, no failures."""
        return _CLOSED

    @property
    def opened_at(self) -> float | None:
        """``opened_at_us`` in unix seconds."""
        return None if self.opened_at_us is None else self.opened_at_us / MICRO

    def encode(self) -> bytes:
        """21 bytes: the state code, the failure count (uint32) and the two timestamps (int64)."""
        return _STATE.pack(
            _CODE[self.state],
            min(self.failures, MAX_FAILURES),
            _NONE if self.opened_at_us is None else self.opened_at_us,
            _NONE if self.trial_started_us is None else self.trial_started_us,
        )

    @classmethod
    def decode(cls, data: bytes) -> Breaker:
        """The value ``encode`` wrote; ``QueueCorrupted`` for bytes it cannot have written."""
        if len(data) != STATE_SIZE:
            raise QueueCorrupted(f"a circuit breaker must be {STATE_SIZE} bytes, not {len(data)}")
        code, failures, opened, trial = _STATE.unpack(data)
        if code >= len(_STATES):
            raise QueueCorrupted(f"a circuit breaker has an unknown state code {code}")
        state = _STATES[code]
        opened_at = None if opened == _NONE else opened
        trial_started = None if trial == _NONE else trial
        if (state is BreakerState.CLOSED) != (opened_at is None) or (
            trial_started is not None and state is not BreakerState.HALF_OPEN
        ):
            raise QueueCorrupted(f"a circuit breaker's fields are inconsistent with its state {state.value}")
        if state is BreakerState.CLOSED and failures == 0:
            return _CLOSED
        return cls(state, failures, opened_at, trial_started)


_CLOSED = Breaker()


def _to_us(now: float) -> int:
    return round(now * MICRO)


def _opened(failures: int, now_us: int) -> Breaker:
    return Breaker(BreakerState.OPEN, min(failures, MAX_FAILURES), now_us, None)


def allow(breaker: Breaker, policy: BreakerPolicy, now: float) -> tuple[bool, Breaker]:
    """May one unit of work start now? -> (allowed, the new state).

    CLOSED allows. OPEN refuses until ``recovery_timeout`` has passed since it opened, then turns HALF_OPEN
    and hands out one trial. HALF_OPEN refuses while its trial is out, unless the trial has been out for
    ``recovery_timeout`` (its outcome was lost): then it hands out a new one. The state returned is
    ``breaker`` itself when nothing changed, so the store can skip the write.
    """
    state = breaker.state
    if state is BreakerState.CLOSED:
        return True, breaker
    now_us = _to_us(now)
    timeout_us = policy._timeout_us
    if state is BreakerState.OPEN:
        assert breaker.opened_at_us is not None
        if now_us - breaker.opened_at_us < timeout_us:
            return False, breaker
    elif breaker.trial_started_us is not None and now_us - breaker.trial_started_us < timeout_us:
        return False, breaker
    return True, Breaker(BreakerState.HALF_OPEN, breaker.failures, breaker.opened_at_us, now_us)


def peek(breaker: Breaker, policy: BreakerPolicy, now: float) -> BreakerState:
    """The state as of ``now``, without handing out a trial: OPEN past its timeout reads HALF_OPEN."""
    if breaker.state is BreakerState.OPEN:
        assert breaker.opened_at_us is not None
        if _to_us(now) - breaker.opened_at_us >= policy._timeout_us:
            return BreakerState.HALF_OPEN
    return breaker.state


def record_success(breaker: Breaker, policy: BreakerPolicy, now: float) -> Breaker:
    """A unit of work succeeded. CLOSED forgets its failures; HALF_OPEN closes; OPEN is unchanged (module
    docstring). Returns ``breaker`` itself when nothing changed."""
    if breaker.state is BreakerState.OPEN or (breaker.state is BreakerState.CLOSED and not breaker.failures):
        return breaker
    return _CLOSED


def record_failure(breaker: Breaker, policy: BreakerPolicy, now: float) -> Breaker:
    """A unit of work failed. CLOSED counts it and opens at ``threshold`` consecutive failures; HALF_OPEN
    opens again (its recovery timeout starting now); OPEN stays OPEN without extending its timeout."""
    failures = breaker.failures + 1
    if breaker.state is BreakerState.CLOSED:
        if failures >= policy.threshold:
            return _opened(failures, _to_us(now))
        return Breaker(BreakerState.CLOSED, min(failures, MAX_FAILURES))
    if breaker.state is BreakerState.HALF_OPEN:
        return _opened(failures, _to_us(now))
    return Breaker(BreakerState.OPEN, min(failures, MAX_FAILURES), breaker.opened_at_us, None)


def seconds_to_trial(breaker: Breaker, policy: BreakerPolicy, now: float) -> float | None:
    """Seconds until ``allow`` would hand out a trial: None when CLOSED (no trial needed), 0 when one is
    available now, else the wait (for HALF_OPEN with a trial out: until that trial counts as lost)."""
    if breaker.state is BreakerState.CLOSED:
        return None
    if breaker.state is BreakerState.OPEN:
        since = breaker.opened_at_us
    else:
        since = breaker.trial_started_us
        if since is None:
            return 0.0
    assert since is not None
    return max(0, since + policy._timeout_us - _to_us(now)) / MICRO


def success_changes(breaker: Breaker) -> bool:
    """Whether ``record_success`` would change ``breaker`` (False for CLOSED with no failures, and for OPEN):
    the store skips the write on the hot path when it would not."""
    if breaker.state is BreakerState.CLOSED:
        return breaker.failures != 0
    return breaker.state is BreakerState.HALF_OPEN
