"""``Maintenance``: a Queue's background thread, which runs its rounds (recovery, vacuum, the store's upkeep)
each on its own interval. A round that fails is logged, with its traceback, unless it failed as the round
before did: the same problem every 15 s is one log line (until a round works again), not a line per round.
A round that finds the queue closed ends the thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from .errors import QueueClosed

logger = logging.getLogger("queue_max_django.engine")

Round = tuple[float, Callable[[], object]]  # (interval in seconds, what to run)


class Maintenance:
    def __init__(self, name: str, rounds: Sequence[Round]) -> None:
        self._name = name
        self._rounds = list(rounds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"queue-max-maintenance:{name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to end, and wait for it (unless this is the thread itself)."""
        self._stop.set()
        thread = self._thread
        if thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=timeout)

    def _run(self) -> None:
        stop = self._stop
        start = time.monotonic()
        due = [start + interval for interval, _step in self._rounds]
        last_failure: str | None = None
        while not stop.is_set():
            if stop.wait(max(0.0, min(due) - time.monotonic())):
                return
            now = time.monotonic()
            try:
                for index, (interval, step) in enumerate(self._rounds):
                    if now >= due[index]:
                        due[index] = now + interval
                        step()
                last_failure = None
            except QueueClosed:
                return
            except Exception as exc:  # keep maintaining; the next round retries
                failure = f"{type(exc).__name__}: {exc}"
                if failure != last_failure:
                    logger.exception("background maintenance of %s failed", self._name)
                last_failure = failure
