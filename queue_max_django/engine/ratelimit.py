"""The token-bucket policy: pure functions on a small state that round-trips through 16 bytes.

No I/O, no clock: every function takes ``now`` (unix seconds). The store loads a ``BucketState``, applies one
of these functions inside a write transaction and writes the result back: the policy here, the storage
there. Tokens are counted in integer micro-tokens and time in integer microseconds, so the arithmetic is
exact: over any interval of ``t`` seconds a bucket grants at most ``rate.per_second * t + rate.burst`` tokens.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .errors import QueueCorrupted, QueueError

MICRO = 1_000_000  # micro-tokens per token, and microseconds per second
MAX_TOKENS = 1e12  # the largest count or burst accepted
MIN_PERIOD = 1e-6  # seconds: one microsecond, the resolution of the state
MAX_PERIOD = 100 * 365.25 * 86400  # seconds: a century, the engine's longest accepted interval
DEFAULT_PERIOD = 60.0  # a bare number is a count per minute (queue-max's convention)

# A ``now`` up to this far behind the bucket's own time is a stale reading (a process read its clock, then
# waited for the write lock while another wrote a later time): it adds nothing and changes nothing. Further
# behind, the clock was set back: the bucket resumes accruing from the new ``now``, keeping its tokens.
CLOCK_STEP_TOLERANCE_US = 1_000_000

_STATE = struct.Struct("<qq")  # tokens_micro, updated_us
STATE_SIZE = _STATE.size  # 16

_UNITS: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_SPEC = re.compile(rf"\s*({_NUMBER})\s*/\s*({_NUMBER})?\s*([a-z]+)\s*")


class InvalidRate(QueueError, ValueError):
    """A rate limit, burst or token count is not valid. The message names the bad value.

    A rate is ``"<count>/<unit>"`` or ``"<count>/<n><unit>"`` with unit ``s``, ``m``, ``h`` or ``d``
    (``"160/m"``, ``"10/5s"``), a bare number (a count per minute), a ``(count, seconds)`` tuple or a
    ``Rate``.
    Counts and periods must be positive and finite; a burst must be at least 1."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problem(count: Any, seconds: Any, burst: Any) -> str | None:
    """Why (count, seconds, burst) is not a valid rate, or None."""
    for name, value in (("count", count), ("period", seconds), ("burst", burst)):
        if not _is_number(value):
            return f"the {name} must be a number, not {value!r}"
        if not math.isfinite(value):
            return f"the {name} must be finite, not {value!r}"
    if not 0 < count <= MAX_TOKENS:
        return f"the count must be above 0 and at most {MAX_TOKENS:.0e}, not {count!r}"
    if not MIN_PERIOD <= seconds <= MAX_PERIOD:
        return f"the period must be from {MIN_PERIOD} to {MAX_PERIOD:.0f} seconds, not {seconds!r}"
    if not 1 <= burst <= MAX_TOKENS:
        return f"the burst must be from 1 to {MAX_TOKENS:.0e} tokens, not {burst!r}"
    return None


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _fmt_period(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds == size:
            return unit
        if float(seconds).is_integer() and seconds % size == 0:
            return f"{int(seconds) // size}{unit}"
    return f"{_fmt(seconds)}s"


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` tokens per ``seconds``, with room for ``burst`` tokens at once (see ``parse_rate``)."""

    count: float
    seconds: float
    burst: float
    # The refill rate in micro-tokens per microsecond (= tokens per second) as an exact fraction num / den,
    # and the burst in micro-tokens: derived once, so the hot path is integer arithmetic only.
    _num: int = field(init=False, repr=False, compare=False)
    _den: int = field(init=False, repr=False, compare=False)
    _burst_micro: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = _problem(self.count, self.seconds, self.burst)
        if problem is not None:
            raise InvalidRate(f"invalid rate {self.count!r} per {self.seconds!r}s: {problem}")
        per_us = Fraction(self.count) / Fraction(self.seconds)
        object.__setattr__(self, "_num", per_us.numerator)
        object.__setattr__(self, "_den", per_us.denominator)
        object.__setattr__(self, "_burst_micro", math.floor(Fraction(self.burst) * MICRO))

    @property
    def per_second(self) -> float:
        """Tokens added per second."""
        return self.count / self.seconds

    def __str__(self) -> str:
        spec = f"{_fmt(self.count)}/{_fmt_period(self.seconds)}"
        if self.burst != max(self.count, 1):
            spec += f" (burst {_fmt(self.burst)})"
        return spec


def parse_rate(spec: Any, *, burst: float | None = None) -> Rate:
    """A ``Rate`` from ``"160/m"``, ``"10/s"``, ``"5000/h"``, ``"100/d"``, ``"10/5s"`` (10 per 5 seconds),
    a bare ``int``/``float`` (a count **per minute**, queue-max's convention), a ``(count, seconds)`` tuple,
    or a ``Rate`` (``burst=`` then replaces its burst).

    ``burst`` defaults to the count (at least 1, so that ``"0.5/s"`` can still grant a whole token).
    Raises ``InvalidRate`` naming ``spec`` for anything else.
    """
    if isinstance(spec, Rate):
        count, seconds, default_burst = spec.count, spec.seconds, spec.burst
    elif isinstance(spec, str):
        match = _SPEC.fullmatch(spec)
        if match is None or match.group(3) not in _UNITS:
            raise InvalidRate(
                f"invalid rate {spec!r}: expected '<count>/<unit>' such as '160/m', '10/s', '5000/h', "
                f"'100/d' or '10/5s'"
            )
        count = float(match.group(1))
        multiple = float(match.group(2)) if match.group(2) is not None else 1.0
        seconds = multiple * _UNITS[match.group(3)]
        default_burst = max(count, 1.0)
    elif _is_number(spec):
        count, seconds = spec, DEFAULT_PERIOD
        default_burst = max(spec, 1.0) if math.isfinite(spec) else spec
    elif isinstance(spec, tuple) and len(spec) == 2:
        count, seconds = spec
        default_burst = max(count, 1.0) if _is_number(count) and math.isfinite(count) else count
    else:
        raise InvalidRate(
            f"invalid rate {spec!r}: give a string such as '160/m', a number (per minute), "
            f"a (count, seconds) tuple or a Rate"
        )
    chosen = default_burst if burst is None else burst
    problem = _problem(count, seconds, chosen)
    if problem is not None:
        extra = "" if burst is None else f" with burst={burst!r}"
        raise InvalidRate(f"invalid rate {spec!r}{extra}: {problem}")
    return Rate(count, seconds, chosen)


def _to_us(now: float) -> int:
    return round(now * MICRO)


def _need_micro(n: float) -> int:
    if not _is_number(n) or not math.isfinite(n) or n <= 0:
        raise InvalidRate(f"the number of tokens must be a finite number above 0, not {n!r}")
    return math.ceil(Fraction(n) * MICRO)


@dataclass(frozen=True, slots=True)
class BucketState:
    """A bucket: its tokens in micro-tokens, as of ``updated_us`` (unix microseconds)."""

    tokens_micro: int
    updated_us: int

    @classmethod
    def full(cls, rate: Rate, now: float) -> BucketState:
        """A new bucket: full (``rate.burst`` tokens) as of ``now``."""
        return cls(rate._burst_micro, _to_us(now))

    @property
    def tokens(self) -> float:
        """The tokens held as of ``updated_us`` (call ``remaining`` for the count as of now)."""
        return self.tokens_micro / MICRO

    def encode(self) -> bytes:
        """16 bytes: two little-endian signed 64-bit integers."""
        return _STATE.pack(self.tokens_micro, self.updated_us)

    @classmethod
    def decode(cls, data: bytes) -> BucketState:
        """The state ``encode`` wrote; ``QueueCorrupted`` for bytes it cannot have written."""
        if len(data) != STATE_SIZE:
            raise QueueCorrupted(f"a rate-limit bucket must be {STATE_SIZE} bytes, not {len(data)}")
        tokens, updated = _STATE.unpack(data)
        if tokens < 0:
            raise QueueCorrupted(f"a rate-limit bucket holds a negative token count ({tokens})")
        return cls(tokens, updated)


def full_bucket(rate: Rate, now: float) -> BucketState:
    """A new bucket: full (``rate.burst`` tokens) as of ``now``. The same as ``BucketState.full``."""
    return BucketState(rate._burst_micro, _to_us(now))


def refill(state: BucketState, rate: Rate, now: float) -> BucketState:
    """The bucket as of ``now``: the tokens accrued since ``updated_us`` added, never above the burst.

    A ``now`` behind the bucket's time adds nothing and never removes tokens (``CLOCK_STEP_TOLERANCE_US``).
    Accrual is exact in whole micro-tokens; the fraction of a micro-token not yet earned is kept as time
    (``updated_us`` stays behind ``now``), so splitting an interval into many calls loses less than one
    micro-token per call and never gains anything. Returns ``state`` itself when nothing changed.
    """
    now_us = _to_us(now)
    cap = rate._burst_micro
    tokens, updated = state.tokens_micro, state.updated_us
    if now_us <= updated:
        if updated - now_us > CLOCK_STEP_TOLERANCE_US:
            updated = now_us  # the clock was set back: accrue from here on
        tokens = min(tokens, cap)
    elif tokens >= cap:
        tokens, updated = cap, now_us
    else:
        num, den = rate._num, rate._den
        earned = (now_us - updated) * num  # in micro-tokens * den
        added = earned // den
        if tokens + added >= cap:
            tokens, updated = cap, now_us
        else:
            tokens += added
            updated = now_us - (earned - added * den) // num  # keep the unearned fraction as time
    if tokens == state.tokens_micro and updated == state.updated_us:
        return state
    return BucketState(tokens, updated)


def try_take(state: BucketState, rate: Rate, now: float, n: float = 1) -> tuple[bool, BucketState]:
    """Take ``n`` tokens if the bucket holds them as of ``now``. -> (granted, the new state).

    On refusal the state is only refilled (it may be ``state`` itself: compare before writing).
    """
    need = _need_micro(n)
    current = refill(state, rate, now)
    if current.tokens_micro < need:
        return False, current
    return True, BucketState(current.tokens_micro - need, current.updated_us)


def remaining(state: BucketState, rate: Rate, now: float) -> float:
    """The tokens the bucket holds as of ``now``."""
    return refill(state, rate, now).tokens_micro / MICRO


def retry_after(state: BucketState, rate: Rate, now: float, n: float = 1) -> float:
    """Seconds from ``now`` until ``try_take(state, rate, now + delay, n)`` succeeds: 0 when it would succeed
    now, ``math.inf`` when ``n`` exceeds the burst. Exact to the microsecond for the state passed in."""
    need = _need_micro(n)
    now_us = _to_us(now)
    current = refill(state, rate, now)
    if current.tokens_micro >= need:
        return 0.0
    if need > rate._burst_micro:
        return math.inf
    # Count from the state passed in (not the refilled one), unless the clock was set back and refill rebased.
    base = current if state.updated_us - now_us > CLOCK_STEP_TOLERANCE_US else state
    wait_us = -(-(need - base.tokens_micro) * rate._den // rate._num)  # ceil
    return max(0, base.updated_us + wait_us - now_us) / MICRO


def change_rate(state: BucketState, old: Rate, new: Rate, now: float) -> BucketState:
    """The bucket under a new rate: what it accrued until ``now`` under ``old``, capped at ``new``'s burst.

    (``refill`` with the new rate alone would also cap at the new burst, but would accrue the time since
    ``updated_us`` at the new rate.) The fraction of a micro-token not yet earned under ``old`` is dropped, so
    that it cannot accrue at ``new``'s rate."""
    current = refill(state, old, now)
    tokens = min(current.tokens_micro, new._burst_micro)
    updated = max(current.updated_us, _to_us(now))
    if tokens == state.tokens_micro and updated == state.updated_us:
        return state
    return BucketState(tokens, updated)


def give_back(state: BucketState, rate: Rate, now: float, n: float = 1) -> BucketState:
    """Return ``n`` tokens taken for work that did not start after all: the bucket refilled to ``now``, plus
    ``n`` tokens, never above the burst."""
    back = _need_micro(n)
    current = refill(state, rate, now)
    return BucketState(min(current.tokens_micro + back, rate._burst_micro), current.updated_us)
