"""What the claims of one worker process run into: how long a thread waits after a claim failed, and which
problems are logged when (``ClaimTrouble``, used by ``process.WorkerProcess._claim``)."""

from __future__ import annotations

import threading
import time
from typing import Any

STORE_RETRY = 1.0  # seconds a worker thread waits after the store failed before it claims again
# A claim that failed (a store error, or QueueCorrupted: a broken record moved aside): the thread waits
# CLAIM_BACKOFF_MIN, twice as long after each further failure in a row, at most STORE_RETRY, and from the
# start again after a claim that works. Each distinct problem is logged once, then at most every
# CLAIM_LOG_EVERY seconds while it goes on, with how often it came back.
CLAIM_BACKOFF_MIN = 0.01
CLAIM_LOG_EVERY = 300.0


class ClaimTrouble:
    """What the claims of one worker process ran into (see CLAIM_BACKOFF_MIN): the wait of each thread
    after a failed claim, and which problems were logged when, shared by the threads so that a store that
    keeps failing is one log line, not one per claim per thread."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._logged: dict[str, list[float]] = {}  # problem -> [when last logged, repeats since]
        self._local = threading.local()

    def failed(self, problem: str) -> tuple[str | None, float]:
        """A claim of this thread failed with ``problem``. -> (what to log now, or None; how many seconds
        to wait before claiming again)."""
        delay = getattr(self._local, "delay", 0.0)
        delay = self._local.delay = CLAIM_BACKOFF_MIN if not delay else min(2 * delay, STORE_RETRY)
        now = self._clock()
        with self._lock:
            seen = self._logged.get(problem)
            if seen is None:
                if len(self._logged) >= 1000:  # distinct problems by the thousand: never grow unbounded
                    self._logged.clear()
                self._logged[problem] = [now, 0]
                return problem, delay
            if now - seen[0] < CLAIM_LOG_EVERY:
                seen[1] += 1
                return None, delay
            repeats, seen[0], seen[1] = seen[1], now, 0
            return f"{problem} (still: {repeats:.0f} more time(s) since it was last logged)", delay

    def worked(self) -> None:
        """A claim of this thread worked (it may have found nothing): no wait before the next one."""
        self._local.delay = 0.0
