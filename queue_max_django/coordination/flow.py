"""A task's rate limit and circuit breaker (``@task(rate_limit=..., circuit_breaker=...)``): the option
checked when the task is declared, and set in the store where it differs (``tasks.Task._prepare``, once per
``Queue``). The admission itself is the engine's (``engine/flow.py``), in the claim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..conf import get_config
from ..engine import NAME_KEY_PREFIX, BreakerPolicy, Queue, Rate


def breaker_policy(value: bool | Mapping[str, Any] | None) -> BreakerPolicy | bool | None:
    """``circuit_breaker=``: None/False (none), True (``QUEUE_MAX["CIRCUIT_BREAKER"]``, read at enqueue), or
    a dict with ``THRESHOLD``/``TIMEOUT``."""
    if value is None or value is False:
        return None
    if value is True:
        return True
    if isinstance(value, Mapping):
        unknown = set(value) - {"THRESHOLD", "TIMEOUT"}
        if unknown:
            raise ValueError(f"circuit_breaker takes the keys THRESHOLD and TIMEOUT, not {sorted(unknown)}")
        return BreakerPolicy(value.get("THRESHOLD", 5), float(value.get("TIMEOUT", 60.0)))
    raise TypeError(f"circuit_breaker must be True, None or a dict of THRESHOLD/TIMEOUT, not {value!r}")


def apply_flow(
    queue: Queue,
    name: str,
    rate_limit: Rate | None,
    circuit_breaker: BreakerPolicy | bool | None,
    write: bool,
) -> bool:
    """Read the task ``name``'s limit and breaker in the store, and set them where they differ if ``write``.
    -> whether they differed."""
    key = NAME_KEY_PREFIX + name
    differ = False
    if rate_limit is not None and queue.rate_limits().get(key) != rate_limit:
        differ = True
        if write:
            queue.set_rate_limit(key, rate_limit)
    policy = circuit_breaker
    if policy is True:
        breaker = get_config().circuit_breaker
        policy = BreakerPolicy(breaker.threshold, breaker.timeout)
    if isinstance(policy, BreakerPolicy):
        current = queue.circuit_breakers().get(key)
        wanted = (policy.threshold, policy.recovery_timeout)
        if current is None or (current["threshold"], current["recovery_timeout"]) != wanted:
            differ = True
            if write:
                queue.set_circuit_breaker(
                    key, threshold=policy.threshold, recovery_timeout=policy.recovery_timeout
                )
    return differ
