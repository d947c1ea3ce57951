"""``ServerClock``: the database server's time, read without a round trip.

Several machines share one PostgreSQL store and their clocks disagree; leases, ETAs, backoff, rate limits
and locks must not depend on them agreeing. So the store's one clock is the server's: a ``ServerClock``
asks the server for its time (``clock_timestamp()``, on a connection of its own, or on the caller's that the
calling thread lent the store) and remembers how far this machine's clock is from it, measured at the
midpoint of the round trip, and then answers ``now()`` as this machine's time plus that offset, with no
round trip. It asks again every ``RESAMPLE`` seconds (from the store's upkeep), so a
machine whose clock is 30 s off still reads the server's time to within a round trip; and at once when this
machine's clock stepped (``STEP``: NTP set it, a virtual machine was restored or resumed), which every
reading checks against ``time.monotonic()``, so that no lease, ETA or token is written in a stepped time.

SQL in this store never calls ``now()`` itself: every time is a parameter read from the store's clock, so
tests inject a fake clock and the whole contract suite runs on fake time against a real server.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

RESAMPLE = 60.0  # seconds between two readings of the server's clock
# A reading of this machine's clock that moved more than STEP seconds from what time.monotonic() moved
# since the last reading of the server's is a step (NTP setting the time, a virtual machine restored from a
# snapshot or resumed): the offset is measured again at once. Between readings the two clocks part by their
# drift only, under a millisecond a minute (both follow NTP's rate corrections).
STEP = 0.1


class ServerClock:
    def __init__(
        self,
        connect: Callable[[], Any],
        local: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        guard: Callable[[Any], contextlib.AbstractContextManager[Any]] = lambda conn: (
            contextlib.nullcontext()
        ),
        lent: Callable[[], Any] = lambda: None,
    ) -> None:
        self._connect = connect  # a new connection of the store's (closed after each reading)
        # the connection the calling thread lent the store (the caller's, in its open transaction), or None:
        # a reading then runs on it (clock_timestamp() is the time of the statement, not of the transaction)
        # and needs no connection of its own, which through a pool of one server connection would wait for
        # the caller's transaction, itself waiting for the reading
        self._lent = lent
        self._guard = guard  # the store's errors for psycopg's, around a reading
        self._local = local  # this machine's clock (tests give a wrong one)
        self._monotonic = monotonic
        # (the server's time minus this machine's, this machine's time and the monotonic time at that
        # reading): one tuple, so that a thread never sees an offset with another reading's times.
        self._base: tuple[float, float, float] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        base = self._base
        local = self._local()
        if base is None:
            return local + self.sample()
        offset, local_at, monotonic_at = base
        if abs((local - local_at) - (self._monotonic() - monotonic_at)) > STEP:
            offset = self._stepped(base)
            local = self._local()
        return local + offset

    @property
    def offset(self) -> float | None:
        """The server's time minus this machine's, as last measured (None: not yet)."""
        base = self._base
        return None if base is None else base[0]

    def sample(self) -> float:
        """Read the server's time now. -> the offset (seconds to add to this machine's clock)."""
        with self._lock:
            return self._sample()

    def _sample(self) -> float:
        lent = self._lent()
        conn = self._connect() if lent is None else lent
        try:
            with self._guard(conn):
                monotonic_before, before = self._monotonic(), self._local()
                row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
                after, monotonic_after = self._local(), self._monotonic()
        finally:
            if lent is None:
                conn.close()
        local_at = (before + after) / 2
        offset = float(row[0]) - local_at
        self._base = (offset, local_at, (monotonic_before + monotonic_after) / 2)
        return offset

    def _stepped(self, seen: tuple[float, float, float]) -> float:
        """This machine's clock stepped since the reading ``seen``: read the server's time again (once, for
        all the threads that saw the step). If the server cannot be read, carry the server's time on by the
        monotonic clock from the last reading (it does not step) until the next reading works. -> the
        offset now."""
        with self._lock:
            base = self._base
            if base is not seen and base is not None:
                return base[0]  # another thread read it again meanwhile
            try:
                return self._sample()
            except Exception:
                offset, local_at, monotonic_at = seen
                local, monotonic = self._local(), self._monotonic()
                offset -= (local - local_at) - (monotonic - monotonic_at)
                self._base = (offset, local, monotonic)
                return offset

    def maybe_resample(self) -> None:
        """Read the server's time again if the last reading is ``RESAMPLE`` seconds old."""
        base = self._base
        if base is None or self._monotonic() - base[2] >= RESAMPLE:
            self.sample()
