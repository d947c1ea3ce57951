"""``ServerClock``: the database server's time, read without a round trip.

Several machines share one PostgreSQL store and their clocks disagree; leases, ETAs, backoff, rate limits
and locks must not depend on them agreeing. So the store's one clock is the server's: a ``ServerClock``
asks the server for its time (``clock_timestamp()``) and remembers how far this machine's clock is from it,
measured at the midpoint of the round trip, and then answers ``now()`` as this machine's time plus that
offset, with no round trip. It asks again every ``RESAMPLE`` seconds (from the store's upkeep), so a
machine whose clock is 30 s off still reads the server's time to within a round trip.

SQL in this store never calls ``now()`` itself: every time is a parameter read from the store's clock, so
tests inject a fake clock and the whole contract suite runs on fake time against a real server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

RESAMPLE = 60.0  # seconds between two readings of the server's clock


class ServerClock:
    def __init__(self, connect: Callable[[], Any], local: Callable[[], float] = time.time) -> None:
        self._connect = connect  # a new connection of the store's (closed after each reading)
        self._local = local  # this machine's clock (tests give a wrong one)
        self._offset: float | None = None
        self._sampled_at = 0.0  # time.monotonic() of the last reading
        self._lock = threading.Lock()

    def __call__(self) -> float:
        offset = self._offset
        if offset is None:
            offset = self.sample()
        return self._local() + offset

    @property
    def offset(self) -> float | None:
        """The server's time minus this machine's, as last measured (None: not yet)."""
        return self._offset

    def sample(self) -> float:
        """Read the server's time now. -> the offset (seconds to add to this machine's clock)."""
        with self._lock:
            conn = self._connect()
            try:
                before = self._local()
                row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
                after = self._local()
            finally:
                conn.close()
            self._offset = float(row[0]) - (before + after) / 2
            self._sampled_at = time.monotonic()
            return self._offset

    def maybe_resample(self) -> None:
        """Read the server's time again if the last reading is ``RESAMPLE`` seconds old."""
        if self._offset is None or time.monotonic() - self._sampled_at >= RESAMPLE:
            self.sample()
