"""Rate limits and circuit breakers shared by every process of a store: ``Store.control()``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...breaker import BreakerPolicy
from ...flowstate import FlowState
from ...ratelimit import Rate


class FlowOps(Protocol):
    """Rate limits (token buckets) and circuit breakers shared by every process of a store (``flow.py``
    asks; the policies are the pure ``ratelimit`` and ``breaker``, and what each operation makes of the
    stored values is a pure step of ``flowstate``: a store only reads, locks and writes, and keeps each value
    as the bytes ``flowstate.pack_limit``/``pack_breaker`` give).

    Keys are ``"*"``, ``"queue:<name>"`` and ``"name:<job name>"`` (``flowstate.job_keys``); a key with no
    limit (or breaker) limits (or breaks) nothing. [sc_flow_atomic] Each call is one transaction that reads
    the values it needs, reads ``now`` from the store's clock *after* it holds them, applies the step, and
    writes the result: two processes taking tokens at once never both spend the same one, nor both get a
    half-open breaker's one trial. [sc_flow_damage] A stored value that does not decode is ignored for
    admission (a limit nobody can read limits nothing; a breaker nobody can read is closed), left out of
    ``state()`` but named in its ``damaged_limits``/``damaged_breakers`` and by ``verify()``, and written
    over only by ``set_limit``/``set_breaker`` (or dropped by ``remove_*``). The store never charges a
    breaker itself: the Queue calls ``record`` when a job ends (including a charged lease expiry)."""

    def state(self) -> FlowState:
        """Every limit and breaker, as one consistent read. [sc_flow_state]"""

    def verify(self) -> list[str]:
        """Every limit and breaker whose stored value does not decode (``Store.verify`` includes them)."""

    def version(self) -> int:
        """A number that changes whenever any process commits a flow change (a cheap cache key; it may be
        read from a cache for a few ms, but this process's own writes show at once). [sc_flow_version]"""

    def set_limit(self, key: str, rate: Rate) -> None:
        """Create or change ``key``'s limit; a change keeps the tokens there are (at most the new burst),
        a new limit starts full. [sc_flow_limits]"""

    def remove_limit(self, key: str) -> bool:
        """Drop ``key``'s limit. -> False if there was none. [sc_flow_remove]"""

    def reset_limit(self, key: str) -> bool:
        """Fill ``key``'s bucket again. -> False if there is no such limit (or it does not decode)."""

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """``n`` tokens from every limited key of ``keys``, all or none. -> (granted, seconds to wait before
        there would be enough: 0 when granted). [sc_flow_take]"""

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        """Return ``give_back`` unused tokens (up to the burst), then take as many whole tokens as ``key``
        has, at most ``most``. -> how many (``most`` for a key without a limit). [sc_flow_take_up_to]"""

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        """Undo an ``admit`` whose job could not be claimed after all: the tokens go back (up to the
        burst), and a half-open breaker's trial is handed back, so the next job can be the trial.
        [sc_flow_give_back]"""

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None:
        """Create ``key``'s breaker (closed), or change its policy keeping its state. [sc_flow_breaker]"""

    def remove_breaker(self, key: str) -> bool:
        """Drop ``key``'s breaker. -> False if there was none."""

    def reset_breaker(self, key: str) -> bool:
        """Close ``key``'s breaker now. -> False if there is no such breaker (or it does not decode)."""

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Every breaker of ``keys`` allows a job (a half-open one hands out its one trial) and every limit
        has ``n`` tokens: all or nothing, taken together. -> (admitted, seconds to wait before trying
        again). [sc_flow_admit]"""

    def record(self, keys: Sequence[str], success: bool) -> None:
        """A job under ``keys`` finished: count it in each of their breakers (``threshold`` failures in a
        row open one; a success closes it). [sc_flow_breaker]"""
