"""A worker process's completer and acknowledgements: each worker thread ends its jobs through a ``Batch``
(completer.py's ``Completer``, holding the successes), ``acknowledge`` writes a batch of them, tried again
while the store fails; ``AckLine`` has them written by a thread of their own while the worker thread goes on.

A worker thread runs a batch of jobs, then acknowledges the successes in one transaction per shard
(``Queue.ack_many``). Each result was packed once, when its task returned (``codec.Packed``), and is stored
as it was packed. On the PostgreSQL store that transaction is a round trip and a commit that waits for
the server's WAL flush: a worker thread that waited for it before claiming its next batch spent most of its
time waiting (docs/benchmarks.md). Through the process's ``AckLine`` a worker thread hands its batch over
and claims and runs the next one while it commits. The worker uses it only where that was measured faster:
a process with one worker thread, on a store whose commits are a server's work (``Batch.flush``).

One line per process, one thread: it takes every batch handed over since its last flush and writes them
together (one transaction per shard for all of them), so it costs one more store connection per process.
Handing over waits while ``most_waiting`` batches already wait: a store that is slow to commit slows the
worker down instead of letting finished-but-unacknowledged jobs pile up.

Nothing changes for a job: it is done once its acknowledgement commits, as before; until then it is
running, its lease renewed by the heartbeat like any job the process holds, and a process killed meanwhile
runs it again (at-least-once, as with any crash).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..engine import Queue, QueueError, Record
from ..engine.codec import Packed
from ..running import cancels
from ..running.completer import INLINE, Completer, Kind, Verdict
from ..running.outcome import Outcome

logger = logging.getLogger("queue_max_django.worker")

ACK_RETRY_DELAYS = (0.1, 0.5, 2.0)  # seconds before each new try of a batch of acknowledgements that failed

Settle = Callable[[list[Record] | None, set[int], int], None]
"""The process's bookkeeping after a batch write: (the writing thread's held records, or None for every
thread's; the ids of the records given up; how many acknowledgements the store refused)."""


class Batch(Completer):
    """A worker thread's completer. A success is held (``waiting``) and written with the others of its
    batch (``flush``): here, or, on a store whose commits are a server's work, by the process's ``AckLine``
    (``line``), while this thread claims and runs its next jobs. Every other verdict, and a success that
    must be written at once (``Verdict.at_once``: a django.tasks job's), is written at once, as the inline
    completer writes it. The cancel rules apply here, since only a worker learns of cancel requests: a job
    whose cancel was requested before it started ends without running (``cancels.before_start``), and a
    success whose cancel was requested while it ran is a cancel instead (``cancels.after_run``)."""

    def __init__(self, queue: Queue, worker_id: str, *, line: AckLine | None, settle: Settle) -> None:
        self.queue = queue
        self._worker_id = worker_id
        self._line = line
        self._settle = settle
        self._held: list[tuple[Record, Packed | None]] = []

    @property
    def waiting(self) -> int:
        """How many successes wait for their acknowledgement here."""
        return len(self._held)

    def _before(self, record: Record) -> Outcome | None:
        return cancels.before_start(record, self) if cancels.is_requested(record.job_id) else None

    def write(self, record: Record, verdict: Verdict) -> Outcome:
        if verdict.kind is Kind.DONE and not verdict.at_once:
            if cancels.is_requested(record.job_id):
                verdict = cancels.after_run(record, verdict)
            if verdict.kind is Kind.DONE:  # still a success: held for the batch
                result = verdict.result
                self._held.append((record, result))
                return Outcome.done(record.job_id, None if result is None else result.value)
        return self._write(record, verdict)

    def flush(self, held: list[Record], quiet: bool) -> None:
        """Write the successes waiting here: handed to the process's ``AckLine`` when this process has one
        (one worker thread, the store's commits are a server's work) and no receiver listens to the job
        signals (``quiet``), else here and now, after what the line has (``close``). Measured (1 thread on
        PostgreSQL: 1,840 -> 2,540 jobs/s with the line), each of the others is no faster with the line: on
        LMDB a commit is this process's own work (8% slower with the line; with ``SYNC``, 13% slower: the
        claim waits for the ack's fsync on the shard's write lock); several worker threads already overlap
        one another's commits (one line for 2 threads: 12% slower; a line per thread: the same, at a store
        connection each). And the signals of a success are sent from the thread that ran the job."""
        if not self._held:
            return
        if quiet and self._line is not None:
            self._line.send(self._held)
            self._held = []
            return
        self.close(held, quiet)

    def close(self, held: list[Record], quiet: bool) -> None:
        """What the line has first, then the successes waiting here, written here (without the per-job
        events when ``quiet``: they were counted when they ran); ``held`` loses what ended."""
        if self._line is not None:
            self._line.drain()
        items, self._held = self._held, []
        with quietly(self.queue, quiet):
            self._settle(held, *write_successes(self.queue, items, self._worker_id))


def quietly(queue: Queue, quiet: bool) -> contextlib.AbstractContextManager[None]:
    """Silence this thread's per-job engine events while inside, when ``quiet``."""
    return queue.events.batch() if quiet else contextlib.nullcontext()


def write_successes(
    queue: Queue, items: Sequence[tuple[Record, Any]], worker_id: str
) -> tuple[set[int], int]:
    """Acknowledge ``items`` (``acknowledge``: tried again while the store fails). If every try fails,
    give the jobs up: their leases are no longer renewed (the caller drops them), so they expire and the
    jobs run again (at-least-once), instead of staying running for as long as this process lives. Each
    job acknowledged has ended (``Completer._ended``). -> (ids of the records given up, how many
    acknowledgements the store refused)."""
    if not items:
        return set(), 0
    skipped, gave_up = acknowledge(queue, items, worker_id)
    if gave_up:
        return {id(record) for record, _result in items}, 0
    INLINE._ended_done([record for record, _result in items if record.job_id not in skipped])
    return set(), len(skipped)


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
