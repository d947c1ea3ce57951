"""``Queue``'s rate limits and circuit breakers: its public methods over the Queue's ``Flow`` (flow.py),
with their arguments checked. A base class of ``Queue``, which supplies ``_live()`` (the open store, checked
against close and fork) and ``_flow``."""

from __future__ import annotations

from typing import Any

from .errors import InvalidJob
from .flow import Flow
from .ratelimit import Rate
from .stores.base import Store
from .validate import check_number


class FlowControl:
    """Limits (token buckets) and breakers keyed by a task name, a queue or a key of the application's own,
    shared by every process and machine of the store."""

    _flow: Flow

    def _live(self) -> Store:
        raise NotImplementedError  # Queue's

    def set_rate_limit(self, key: str, rate: Any, *, burst: int | None = None) -> Rate:
        """Limit ``key`` to ``rate`` ("160/m", "10/s", ``(count, seconds)``, or an int per minute) in every
        process, at once; ``burst`` defaults to the count; a change keeps the tokens. -> the ``Rate``."""
        self._live()
        return self._flow.set_rate_limit(key, rate, burst=burst)

    def remove_rate_limit(self, key: str) -> bool:
        self._live()
        return self._flow.remove_rate_limit(key)

    def reset_rate_limit(self, key: str) -> bool:
        """Fill ``key``'s bucket again. -> False if there is no such limit."""
        self._live()
        return self._flow.reset_rate_limit(key)

    def rate_limits(self) -> dict[str, Rate]:
        self._live()
        return self._flow.rate_limits()

    def try_acquire(self, key: str) -> bool:
        """Take one token from ``key`` if there is one now. A key without a limit always grants."""
        self._live()
        return self._flow.try_acquire(key)

    def _take_token(self, key: str) -> tuple[bool, float]:
        """``try_acquire`` that also says how long until a token may be there (``AsyncQueue.acquire``)."""
        self._live()
        return self._flow.take(key)

    def acquire(self, key: str, timeout: float | None = None) -> None:
        """Take one token from ``key``, waiting; ``RateLimited`` if that would take over ``timeout`` s."""
        if timeout is not None:
            check_number("timeout", timeout, minimum=0, error=InvalidJob)
        self._live()
        self._flow.acquire(key, timeout)

    def remaining(self, key: str) -> float | None:
        """Tokens ``key`` has now (fractional), or None if it has no limit."""
        self._live()
        return self._flow.remaining(key)

    def retry_after(self, key: str) -> float:
        """Seconds until ``key`` has a token (0 if it has one now, or has no limit)."""
        self._live()
        return self._flow.retry_after(key)

    def set_circuit_breaker(self, key: str, *, threshold: int = 5, recovery_timeout: float = 60.0) -> None:
        """Open ``key``'s breaker after ``threshold`` consecutive failures of jobs under it; after
        ``recovery_timeout`` seconds one trial job passes: success closes it, failure opens it again."""
        self._live()
        self._flow.set_circuit_breaker(key, threshold=threshold, recovery_timeout=recovery_timeout)

    def remove_circuit_breaker(self, key: str) -> bool:
        self._live()
        return self._flow.remove_circuit_breaker(key)

    def reset_circuit_breaker(self, key: str) -> bool:
        """Close ``key``'s breaker now. -> False if there is no such breaker."""
        self._live()
        return self._flow.reset_circuit_breaker(key)

    def circuit_breakers(self) -> dict[str, dict[str, Any]]:
        """Every breaker: state, consecutive failures, threshold, timeout, seconds to the next trial."""
        self._live()
        return self._flow.circuit_breakers()

    def flow_damage(self) -> dict[str, dict[str, str]]:
        """Limits and breakers whose stored value does not decode (written past the engine), ignored for
        admission until set or removed again: ``{"rate_limits": {key: why}, "circuit_breakers": {...}}``."""
        state = self._live().control.state()
        return {"rate_limits": state.damaged_limits, "circuit_breakers": state.damaged_breakers}
