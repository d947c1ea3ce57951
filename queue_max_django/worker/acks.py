"""A worker process's acknowledgements: ``acknowledge`` writes a batch of them, tried again while the store
fails; ``AckLine`` has them written by a thread of their own while the worker thread goes on.

A worker thread runs a batch of jobs, then acknowledges the successes in one transaction per shard
(``Queue.ack_many``). On the PostgreSQL store that transaction is a round trip and a commit that waits for
the server's WAL flush: a worker thread that waited for it before claiming its next batch spent most of its
time waiting (docs/benchmarks.md). Through the process's ``AckLine`` a worker thread hands its batch over
and claims and runs the next one while it commits. The worker uses it only where that was measured faster:
a process with one worker thread, on a store whose commits are a server's work (``WorkerProcess._hand_over``).

One line per process, one thread: it takes every batch handed over since its last flush and writes them
together (one transaction per shard for all of them), so it costs one more store connection per process.
Handing over waits while ``most_waiting`` batches already wait: a store that is slow to commit slows the
worker down instead of letting finished-but-unacknowledged jobs pile up.

Nothing changes for a job: it is done once its acknowledgement commits, as before; until then it is
running, its lease renewed by the heartbeat like any job the process holds, and a process killed meanwhile
runs it again (at-least-once, as with any crash).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..engine import Queue, QueueError, Record

logger = logging.getLogger("queue_max_django.worker")

ACK_RETRY_DELAYS = (0.1, 0.5, 2.0)  # seconds before each new try of a batch of acknowledgements that failed


def acknowledge(
    queue: Queue, acks: Sequence[tuple[Record, Any]], worker_id: str
) -> tuple[dict[int, str], bool]:
    """``queue.ack_many(acks)`` (one transaction per shard). When the store fails (a lost connection), try
    again after ``ACK_RETRY_DELAYS``: a batch that did commit before its answer was lost comes back as jobs
    not held (skipped), so a retry never completes a job twice. Each skipped job is logged.
    -> ({job id: why} of the skipped ones, whether every try failed)."""
    skipped: dict[int, str] = {}
    for attempt, delay in enumerate((*ACK_RETRY_DELAYS, None)):
        try:
            skipped = queue.ack_many(acks)
            break
        except QueueError as exc:
            if delay is None:
                logger.exception(
                    "worker %s: acknowledging %d job(s) failed %d times; they run again when their "
                    "leases expire", worker_id, len(acks), attempt + 1,
                )  # fmt: skip
                return {}, True
            logger.warning(
                "worker %s: acknowledging %d job(s) failed (%s: %s); trying again in %g s",
                worker_id, len(acks), type(exc).__name__, exc, delay,
            )  # fmt: skip
            time.sleep(delay)
    for job_id, why in skipped.items():
        logger.warning("worker %s: job %s finished but was not acknowledged: %s", worker_id, job_id, why)
    return skipped, False


class AckLine:
    """``flush(items)`` of what ``send`` hands over, in order, in a thread of its own (started on the first
    send). Each flush gets every item of the batches that waited, in the order they were sent. After
    ``close()`` a send flushes in the caller's thread. The thread calls ``at_exit()`` last (the store's
    per-thread resources are released in the thread that used them)."""

    def __init__(
        self,
        flush: Callable[[list[Any]], None],
        at_exit: Callable[[], None],
        *,
        name: str,
        most_waiting: int = 1,
    ) -> None:
        self._flush = flush
        self._at_exit = at_exit
        self._name = name
        self._most_waiting = max(1, most_waiting)
        self._cond = threading.Condition()
        self._waiting: list[list[Any]] = []  # batches handed over, not yet taken by the thread
        self._busy = False  # the thread is flushing
        self._closing = False
        self._thread: threading.Thread | None = None

    def send(self, batch: list[Any]) -> None:
        """Hand ``batch`` over (the caller no longer touches it); first wait while ``most_waiting`` batches
        wait. Once the line is closed, flush it here and now."""
        with self._cond:
            self._cond.wait_for(lambda: self._closing or len(self._waiting) < self._most_waiting)
            if not self._closing:
                self._waiting.append(batch)
                self._cond.notify_all()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                return
        self._flush(batch)

    def drain(self) -> None:
        """Wait until every batch handed over so far has been flushed."""
        with self._cond:
            self._cond.wait_for(lambda: not self._waiting and not self._busy)

    def close(self) -> None:
        """Flush what was handed over, end the thread, and wait for it. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._waiting) or self._closing)
                    if not self._waiting:
                        return  # closing, and nothing left
                    items = [item for batch in self._waiting for item in batch]
                    self._waiting.clear()
                    self._busy = True
                    self._cond.notify_all()
                try:
                    self._flush(items)
                except Exception:  # flush logs and retries the store's errors itself: this is a bug
                    logger.exception("%s: acknowledging %d job(s) failed", self._name, len(items))
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            self._at_exit()
