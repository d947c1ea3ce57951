"""A pretend HTTP API for the example's tasks: slow, and sometimes unavailable, like the real ones.

``get_rate("EUR")`` answers after a short wait; about one call in three fails with ``ApiError(503)``
(the service is overloaded: worth retrying), and a currency it does not know fails with ``ApiError(404)``
(retrying cannot help). ``ApiError.status`` is what the queue's error classifier reads, as it reads
``requests``' and ``httpx``' errors.
"""

from __future__ import annotations

import random
import time

RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "JPY": 163.2, "CHF": 0.95, "SEK": 11.4, "NOK": 11.6}
UNAVAILABLE_RATE = 0.35  # the share of calls answered 503


class ApiError(Exception):
    """An HTTP error answer of the pretend API."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def get_rate(currency: str, *, rng: random.Random | None = None) -> float:
    """The exchange rate of ``currency`` to EUR, after 20-60 ms; ``ApiError`` 503 or 404 as described."""
    draw = (rng or random).random()
    time.sleep(0.02 + 0.04 * draw)
    if draw < UNAVAILABLE_RATE:
        raise ApiError(503, "service unavailable, try again later")
    if currency not in RATES:
        raise ApiError(404, f"no such currency: {currency}")
    return RATES[currency]
