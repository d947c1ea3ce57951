"""One worker process: threads that claim and run jobs, and a main thread that watches over them.

The worker threads loop on ``Queue.get`` and ``runner.run_job``. Around each job a thread does what Django
does around a request: ``close_old_connections()`` before and after it (a connection of Django's that is
past ``CONN_MAX_AGE``, or that a task left broken or out of autocommit, is closed, so the next job gets a
fresh one), once the thread has opened a database connection (``dbconns.py``); and a thread that ends
closes its Django connections and its store connection.

The main thread renews the leases of running jobs (heartbeats), reports this process to the store's worker
registry, stops a job that overran its timeout, and decides when the process ends. Its last line says how
many jobs it ran and how many of their outcomes the store refused because the job had been taken back (a
lease that expired while this process was stalled or cut off from the store: another worker holds the job
now, and this process's late acknowledgement changes nothing):

- stop requested (SIGTERM, or the supervisor's stop event): stop claiming, let running jobs finish within the
  shutdown timeout, release the rest (back to waiting, no attempt counted), exit ``DONE``; a second SIGTERM
  exits at once (the leases bring those jobs back later);
- ``--burst`` and nothing left to do: exit ``DONE``;
- ``--max-jobs``/``--max-memory`` reached: finish the running jobs, exit ``RECYCLE`` (the supervisor starts a
  fresh process);
- a job overran its timeout: it is failed with ``JobTimeout`` (an attempt, retried as usual); a thread cannot
  be stopped, so the other running jobs are released at once and the process exits ``TIMED_OUT``;
- a job whose cancel was requested (the heartbeat reports the mark, ``cancels.py``) and that did not stop
  within ``--cancel-grace``: the same, but it is failed with ``Cancelled`` (a dead letter, not retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connections

from ..engine import Queue, QueueClosed, QueueCorrupted, QueueEmpty, QueueError, Record, State
from ..running import cancels
from ..running.completer import INLINE, Verdict
from ..running.outcome import Outcome, use_event_loop
from ..running.runner import TaskNotRegistered, run_job
from ..signals import job_signals_connected, record_run, record_runs
from .acks import AckLine, Batch, quietly, write_successes
from .claims import ClaimTrouble
from .dbconns import close_old
from .failures import log_failure
from .logs import Throttle, log_stopped
from .memory import rss_anon_mb
from .options import DONE, RECYCLE, TIMED_OUT, WorkerOptions
from .tally import Tally

logger = logging.getLogger("queue_max_django.worker")

WATCH_EVERY = 0.1  # seconds between the main thread's checks (timeouts, stop requests)
POLL = 0.25  # a worker thread waiting for a job re-checks whether to stop at least this often
# Short jobs are claimed in batches (one transaction for several) and their successes acknowledged in
# batches: a batch holds about BATCH_SECONDS of work (from the thread's running mean job time), at most
# BATCH_MAX jobs, and successes wait at most ACK_EVERY seconds for their acknowledgement. Long jobs go one
# at a time. A process killed meanwhile runs those jobs again (at-least-once, as any crash).
BATCH_MAX = 64
BATCH_MAX_DEEP = 256  # BATCH_MAX while the queue is deep (the last claim came back full) on a store whose
# commits are this process's own work (LMDB, memory): fewer claim and ack transactions (about 1 us of CPU per
# no-op job less, issue 35). On a server's store the batch stays BATCH_MAX.
BATCH_SECONDS = 0.02
ACK_EVERY = 0.05
UNKNOWN_TASK_LOG_EVERY = 60.0  # seconds between the log lines about the jobs of one task this worker lacks

Runs = dict[tuple[str, str | None], list[float]]  # record_runs: (task, outcome) -> [attempts, seconds]


class JobTimeout(Exception):
    """A job ran longer than its timeout (``@task(timeout=)`` or the ``TIMEOUT`` setting)."""


@dataclass(slots=True)
class Slot:
    """A job being run by one worker thread."""

    record: Record
    started: float  # monotonic
    deadline: float | None  # monotonic, from the job's timeout
    timed_out: bool = False  # ended by this process's main thread (timeout, or a cancel past its grace)
    cancel_deadline: float | None = None  # monotonic: a cancel was requested, the task must stop by then


class WorkerProcess:
    def __init__(
        self,
        queue: Queue,
        options: WorkerOptions,
        index: int,
        *,
        stop_event: Any = None,
        parent_pid: int = 0,
        tally: Tally | None = None,
    ) -> None:
        self.queue = queue
        self.options = options
        self.index = index
        self.worker_id = options.process_id(index)
        queue.worker_id = self.worker_id
        self._stop_event = stop_event  # the supervisor's (a stopflag.StopFlag), if any
        self._parent_pid = parent_pid
        self._queues = None if options.queues is None else list(options.queues)
        self._claiming = True  # a plain flag: the SIGTERM handler sets it, and must never wait for a lock
        self._lock = threading.Lock()
        self._running: dict[int, Slot] = {}
        self._held: dict[int, list[Record]] = {}  # per thread: claimed, not yet acked/nacked/released
        self._threads: dict[int, threading.Thread] = {}
        self._wanted = options.autoscale[0] if options.autoscale else options.threads
        self._exit_code: int | None = None  # set once the process decided to end
        self._signals = 0
        self.processed = 0
        self.failed = 0
        self.refused = 0  # outcomes the store refused: the job had been taken back (its lease expired)
        self._started = time.time()
        self._heartbeat = options.heartbeat_every(queue.lease_time)
        self._trouble = ClaimTrouble()  # what failed claims ran into (_claim)
        self._tally = tally  # the supervisor's count of what its processes did (its closing line)
        self._done_unsaid: dict[int, int] = {}  # per thread: successes not yet added to the tally (_say_done)
        self._unknown = Throttle(UNKNOWN_TASK_LOG_EVERY)  # log lines about jobs of tasks this worker lacks
        # The successes of a process with one worker thread, acknowledged by a thread of their own, on a
        # store whose commits are a server's work (acks.Batch.flush)
        self._background_acks = queue.server_commits and options.max_threads == 1
        self._acks = AckLine(self._write_handed, self._end_ack_thread, name=f"queue-acks-{self.index}")

    # ------------------------------------------------------------------ signals

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which tells us
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            os._exit(DONE)  # second signal: now; the leases of running jobs bring them back later
        self.stop(DONE)

    def stop(self, code: int) -> None:
        """Stop claiming; the main loop then ends the process with ``code`` (the first reason wins).
        Lock-free: the signal handler calls it on the main thread, which may hold ``_lock`` right then."""
        if self._exit_code is None:
            self._exit_code = code
        self._claiming = False

    # ------------------------------------------------------------------ the main thread

    def run(self) -> int:
        """Work until told to stop. -> the exit code."""
        self._report()
        last_beat = time.monotonic()
        self._scale()
        try:
            while True:
                time.sleep(WATCH_EVERY)
                now = time.monotonic()
                self._check_timeouts(now)
                if self._exit_code == TIMED_OUT:
                    return self._end(TIMED_OUT, wait=False)
                if self._exit_code is not None:
                    return self._end(self._exit_code, wait=True)
                if self._stop_event is not None and self._stop_event.is_set():
                    self.stop(DONE)
                if self._parent_pid and os.getppid() != self._parent_pid:
                    logger.warning("worker %s: its parent process is gone; stopping", self.worker_id)
                    self.stop(DONE)
                if now - last_beat >= self._heartbeat:
                    last_beat = now
                    self._beat()
        finally:
            self._forget()

    def _beat(self) -> None:
        for record in self._held_records():
            try:
                record.touch()
                if record.cancel_requested and not cancels.is_requested(record.job_id):
                    self._cancel_seen(record)
            except QueueCorrupted:
                pass  # it finished (or timed out) since we looked
            except QueueError:
                logger.exception(
                    "worker %s: renewing the lease of job %s failed", self.worker_id, record.job_id
                )
        self._report()
        limit = self.options.max_memory_mb
        if limit is not None:
            used = rss_anon_mb()
            if used is not None and used > limit:
                logger.info("worker %s: %.0f MiB anonymous memory is over --max-memory %s; recycling",
                            self.worker_id, used, limit)  # fmt: skip
                self.stop(RECYCLE)
        self._scale()

    def _scale(self) -> None:
        """Start the threads wanted (with --autoscale: one per waiting job, within the bounds)."""
        autoscale = self.options.autoscale
        if autoscale is not None:
            low, high = autoscale
            try:
                waiting = self.queue.stats()["pending"]
            except QueueError:
                waiting = 0
            self._wanted = max(low, min(high, waiting))
        if not self._claiming:
            return
        for number in range(self._wanted):
            thread = self._threads.get(number)
            if thread is None or not thread.is_alive():
                thread = threading.Thread(
                    target=self._work, args=(number,), name=f"queue-worker-{self.index}-{number}", daemon=True
                )
                self._threads[number] = thread
                thread.start()

    def _slots(self) -> list[Slot]:
        with self._lock:
            return list(self._running.values())

    def _held_records(self) -> list[Record]:
        with self._lock:
            return [record for held in self._held.values() for record in held if not record.finished]

    def _cancel_seen(self, record: Record) -> None:
        """The heartbeat found ``record``'s job marked "cancel requested": tell the task (``cancels``), and
        give it ``--cancel-grace`` seconds to stop (``_check_timeouts``)."""
        cancels.learn(self.queue, record)  # who asked and when, before the task can see the request
        cancels.request(record.job_id)
        grace = self.options.cancel_grace
        for slot in self._slots():
            if slot.record is record:
                slot.cancel_deadline = time.monotonic() + grace
        if record.finished:  # it ended meanwhile: nothing to stop
            cancels.forget(record.job_id)
        logger.info("worker %s: job %s (%s): cancel requested%s; the task has %g s to stop", self.worker_id,
                    record.job_id, record.name, cancels.who_of(record), grace)  # fmt: skip

    def _check_timeouts(self, now: float) -> None:
        for slot in self._slots():
            cancelled = slot.cancel_deadline is not None and now >= slot.cancel_deadline
            if slot.timed_out or not (cancelled or (slot.deadline is not None and now >= slot.deadline)):
                continue
            record = slot.record
            slot.timed_out = True
            error: Exception = JobTimeout(
                f"job {record.job_id} ({record.name}) ran over its timeout of {record.timeout}s"
            )
            if cancelled:
                error = cancels.error(record, f" and did not stop within {self.options.cancel_grace:g} s")
            self.stop(TIMED_OUT)  # first: no sibling thread claims (and strands) the job the nack gives back
            try:
                verdict = Verdict.cancelled(error) if cancelled else Verdict.failed(error)
                state = INLINE.write(record, verdict).state
            except QueueCorrupted:
                continue  # it finished just now (the process is replaced all the same)
            with self._lock:  # an attempt that ended: counted as one that ran (and failed, unless cancelled)
                self.processed, self.failed = self.processed + 1, self.failed + (not cancelled)
            self._add("cancelled" if cancelled else "dead" if state is State.FAILED else "retried")
            log_stopped(self.worker_id, error, state, cancelled=cancelled)

    def _end(self, code: int, *, wait: bool) -> int:
        """Let the worker threads finish their running jobs (within the shutdown timeout) when ``wait``;
        release every job still held (back to waiting, no attempt counted)."""
        self._claiming = False
        if not wait:  # idle threads leave their claim first: the store is not closed under them (QueueClosed)
            self._join_idle(POLL + WATCH_EVERY)
        if wait:
            deadline = time.monotonic() + self.options.shutdown_timeout
            last_beat = time.monotonic()
            while any(t.is_alive() for t in self._threads.values()) and time.monotonic() < deadline:
                time.sleep(WATCH_EVERY)
                now = time.monotonic()
                self._check_timeouts(now)
                if now - last_beat >= self._heartbeat:  # jobs finishing past a lease time keep their leases
                    last_beat = now
                    self._beat()
        self._acks.close()  # the successes handed over are written before anything held is released
        timed_out = {id(slot.record) for slot in self._slots() if slot.timed_out}  # records, not job ids
        released = 0
        for record in self._held_records():
            if id(record) in timed_out:
                continue
            try:
                if cancels.is_requested(record.job_id):  # not to be run again: a dead letter, as asked
                    INLINE.write(record, Verdict.cancelled(cancels.error(record)))
                else:
                    INLINE.write(record, Verdict.released())
                    released += 1
            except QueueCorrupted:
                pass  # finished meanwhile
        if released:
            logger.warning(
                "worker %s: released %d unfinished job(s) back to waiting", self.worker_id, released
            )
        log = logger.warning if self.refused else logger.info
        log("worker %s: exiting: ran %d job(s), %d failed; %d late outcome(s) refused (the job had been "
            "taken back: its lease expired)", self.worker_id, self.processed, self.failed,
            self.refused)  # fmt: skip
        return code

    def _join_idle(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the worker threads that run no job to end (their claim returns within
        ``POLL`` once ``_claiming`` is False); threads running a job are not waited for."""
        deadline, busy = time.monotonic() + seconds, set(self._running)  # (a copy under the GIL)
        for number, thread in list(self._threads.items()):
            if number not in busy:
                thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ registry

    def _report(self) -> None:
        try:
            self.queue.report_worker(
                self.worker_id,
                stale_after=3 * self._heartbeat + 2.0,
                started_at=self._started,
                queues=self.options.queues,
                threads=self._wanted,
                current_jobs=tuple(slot.record.job_id for slot in self._slots()),
                processed=self.processed,
                failed=self.failed,
            )
        except QueueError:
            logger.exception("worker %s: reporting to the worker registry failed", self.worker_id)

    def _forget(self) -> None:
        with contextlib.suppress(QueueError):
            self.queue.remove_worker(self.worker_id)

    # ------------------------------------------------------------------ worker threads

    def _work(self, number: int) -> None:
        loop = asyncio.new_event_loop()  # coroutine tasks of this thread run here, one loop for all
        use_event_loop(loop)
        held: list[Record] = []
        with self._lock:
            self._held[number] = held
        line = self._acks if self._background_acks else None
        completer = Batch(self.queue, self.worker_id, line=line, settle=self._settle)
        mean: float | None = None  # running mean of this thread's job times
        most = BATCH_MAX
        deep = BATCH_MAX if self.queue.server_commits else BATCH_MAX_DEEP
        quiet = False
        runs: Runs = {}  # attempts run quietly, for the task statistics (record_runs, before each flush)
        try:
            while self._claiming and number < self._wanted:
                size = 1 if mean is None else max(1, min(most, int(BATCH_SECONDS / max(mean, 1e-6))))
                # Nobody listens to job signals: claims and acks skip the per-job events, and _run reports
                # each attempt to the task statistics itself (a task's own enqueues still send theirs).
                quiet = not job_signals_connected()
                with quietly(self.queue, quiet):
                    records = self._claim(size)
                most = deep if size >= BATCH_MAX and len(records) == size else BATCH_MAX
                with self._lock:
                    held.extend(records)
                now = flushed = time.monotonic()
                for record in records:
                    if not self._claiming:
                        break  # the rest are released (by _end) unstarted
                    started = now
                    now = self._run(number, record, completer, quiet, started, runs)
                    mean = now - started if mean is None else 0.9 * mean + 0.1 * (now - started)
                    if now - flushed >= ACK_EVERY and completer.waiting:
                        record_runs(runs)
                        self._say_done(number)
                        completer.flush(held, quiet)
                        now = flushed = time.monotonic()  # the next job starts after the flush
                record_runs(runs)
                self._say_done(number)
                completer.flush(held, quiet)
        finally:
            record_runs(runs)
            self._say_done(number)
            self._acks.drain()  # what this thread handed over is written first
            completer.close(held, quiet)  # successes left here were counted quietly when they ran
            use_event_loop(None)
            loop.close()
            self._end_thread()

    def _write_handed(self, items: list[tuple[Record, Any]]) -> None:
        """The ``AckLine``'s flush: without the per-job events (the successes were counted when they ran)."""
        with quietly(self.queue, True):
            self._settle(None, *write_successes(self.queue, items, self.worker_id))

    def _settle(self, held: list[Record] | None, abandoned: set[int], refused: int) -> None:
        """After a batch write: count what the store refused; what is no longer held (finished, or given up,
        ``abandoned``: its lease is no longer renewed) leaves this thread's ``held``, or every thread's."""
        with self._lock:
            self.refused += refused
            for kept in [held] if held is not None else list(self._held.values()):
                kept[:] = [record for record in kept if not record.finished and id(record) not in abandoned]

    def _end_ack_thread(self) -> None:
        """The ``AckLine``'s thread ends: release what the store keeps for it (a connection)."""
        with contextlib.suppress(QueueError):
            self.queue.end_thread()

    def _end_thread(self) -> None:
        """This worker thread ends: close its Django connections (the tasks') and its store connection."""
        try:
            connections.close_all()  # this thread's: Django's connections are per thread
        except Exception:
            logger.exception("worker %s: closing a thread's database connections failed", self.worker_id)
        with contextlib.suppress(QueueError):
            self.queue.end_thread()

    def _claim(self, size: int) -> list[Record]:
        """Claim up to ``size`` jobs (none if none came within POLL). A claim that fails waits a little
        before the next one, longer while failures go on, and logs each distinct problem once
        (``ClaimTrouble``): a broken record (``QueueCorrupted``: moved to the dead letters, the next claim
        serves the others) or a store that fails (a full disk, I/O)."""
        try:
            records = self.queue.get_many(size, POLL, queues=self._queues)
        except QueueEmpty:
            self._trouble.worked()
            if self.options.burst and self._nothing_left():
                self.stop(DONE)
            return []
        except QueueError as exc:
            if isinstance(exc, QueueClosed) and self._exit_code is not None:  # ending: its store closed
                return []
            corrupted = isinstance(exc, QueueCorrupted)
            problem = str(exc) if corrupted else f"claiming failed: {type(exc).__name__}: {exc}"
            message, wait = self._trouble.failed(problem)
            if message is not None:
                logger.error("worker %s: %s", self.worker_id, message, exc_info=not corrupted)
            time.sleep(wait)
            return []
        self._trouble.worked()
        return records

    def _run(
        self,
        number: int,
        record: Record,
        completer: Batch,
        quiet: bool = False,
        started: float | None = None,
        runs: Runs | None = None,
    ) -> float:
        """Run ``record``'s job (``started``: now, monotonic, if the caller has it) and count it; ``runs``:
        where a quiet run is counted for the task statistics (``record_runs``; None: at once).
        -> when it ended (monotonic)."""
        if started is None:
            started = time.monotonic()
        timeout = record.timeout
        slot = Slot(record, started, None if timeout is None else started + timeout)
        with self._lock:
            self._running[number] = slot
        outcome: Outcome | None = None
        waiting = completer.waiting
        try:
            close_old()  # as Django does when a request starts and ends
            cancels.running(record.job_id)
            try:
                outcome = run_job(record, completer=completer)  # its end, through the completer
            finally:
                cancels.running(None)
                close_old()
        except QueueCorrupted:
            if not slot.timed_out:
                logger.warning("worker %s: job %s was taken back while it ran (its lease expired)",
                               self.worker_id, record.job_id)  # fmt: skip
                with self._lock:
                    self.refused += 1
        except Exception:
            if not record.finished:  # the last resort failed it for good, and the store refused that
                self._give_up(number, record)
            else:
                logger.exception("worker %s: job %s ended, then failed", self.worker_id, record.job_id)
        finally:
            with self._lock:
                self._running.pop(number, None)
            cancels.forget(record.job_id)
        ended = time.monotonic()
        if slot.timed_out or outcome is None:
            return ended
        seconds = ended - started
        if quiet and record.name is not None:  # a held success sends no event (acked quietly): count it
            key = (record.name, "succeeded" if completer.waiting > waiting else None)  # others sent one
            counted = runs.get(key) if runs is not None else None
            if counted is not None:
                counted[0] += 1
                counted[1] += seconds
            elif runs is not None:
                runs[key] = [1, seconds]
            else:
                record_run(record.name, seconds, key[1])
        if outcome.state is State.DONE:  # the common case, first
            with self._lock:
                self.processed += 1
                done = self.processed
            if self._tally is not None:  # added to the tally once a batch (_say_done): its add takes a lock
                self._done_unsaid[number] = self._done_unsaid.get(number, 0) + 1
            self._counted(record, outcome, seconds, done)
        else:
            self._count(outcome, seconds, record)
        return ended

    def _give_up(self, number: int, record: Record) -> None:
        """The store refused ``record``'s outcome and then run_job's last resort (the store fails): its lease
        is no longer renewed, so the store's recovery retries it (an attempt counted) or dead-letters it."""
        with self._lock:
            self._held[number][:] = [kept for kept in self._held[number] if kept is not record]
            self.processed, self.failed = self.processed + 1, self.failed + 1
        self._add("retried")
        logger.exception("worker %s: job %s could not be finished (its outcome could not be stored); it runs "
                         "again once its lease expires", self.worker_id, record.job_id)  # fmt: skip

    def _add(self, kind: str) -> None:
        if self._tally is not None:
            self._tally.add(self.index, kind)

    def _say_done(self, number: int) -> None:
        """Add worker thread ``number``'s successes since the last call to the tally, in one add."""
        count = self._done_unsaid.pop(number, 0)
        if count and self._tally is not None:
            self._tally.add(self.index, "done", count)

    def _count(self, outcome: Outcome, seconds: float, record: Record) -> None:
        if outcome.state is not State.FAILED and isinstance(outcome.error, TaskNotRegistered):
            self._add("waiting")  # given back, not run: neither processed nor failed
            self._log_waiting(record, outcome)
            return
        cancelled = cancels.ended_by_cancel(outcome)
        with self._lock:
            self.processed += 1
            self.failed += outcome.state is not State.DONE and not cancelled
            done = self.processed
        if outcome.state is State.DONE:
            self._add("done")
        elif cancelled:  # an outcome someone asked for: not a failure, no traceback (cancels.log_cancelled)
            self._add("cancelled")
            cancels.log_cancelled(record, outcome.error)
        else:
            self._add("dead" if outcome.state is State.FAILED else "retried")
            self._log_failure(record, outcome)
        self._counted(record, outcome, seconds, done)

    def _counted(self, record: Record, outcome: Outcome, seconds: float, done: int) -> None:
        """After an attempt was counted (``done``: the attempts this process ran): its log line at
        verbosity 2, and --max-jobs."""
        if self.options.verbosity >= 2:
            logger.info("job %s %s -> %s in %.3fs", record.job_id, record.name, outcome.state.value, seconds)
        max_jobs = self.options.max_jobs
        if max_jobs is not None and done >= max_jobs:
            logger.info("worker %s: ran %d jobs (--max-jobs); recycling", self.worker_id, done)
            self.stop(RECYCLE)

    def _log_failure(self, record: Record, outcome: Outcome) -> None:
        log_failure(self.queue, record, outcome)

    def _log_waiting(self, record: Record, outcome: Outcome) -> None:
        held = self._unknown.due(str(record.name))
        if held is None:
            return
        since = f" ({held} more job(s) of it since the last such line)" if held else ""
        logger.warning(
            "job %s: no task named %r is registered in this worker: restart or update your workers (the "
            "code that enqueued it is newer than this worker's?). The job is given back, not counted as an "
            "attempt, and %s; it is a dead letter once QUEUE_MAX['UNKNOWN_TASK_GRACE'] seconds have passed "
            "since it was enqueued%s.", record.job_id, record.name, outcome.reason, since,
        )  # fmt: skip

    def _nothing_left(self) -> bool:
        """--burst: nothing waiting or running, and nothing scheduled within --burst-wait seconds.

        The counts and the listing of scheduled jobs are two reads: a job that became due and was claimed
        (here or elsewhere) between them is in neither the first read's running count nor the listing. So
        when the listing found nothing that keeps the worker, the counts are read again: a claim that came
        between the reads shows there as running (and one after the listing was in it, due)."""
        if self._busy():
            return False
        if self.queue.stats()["scheduled"]:
            for job in self.queue.jobs(State.SCHEDULED, limit=50):
                if self._queues is not None and job.queue not in self._queues:
                    continue
                if job.eta is None or job.eta - time.time() <= self.options.burst_wait:
                    return False
                break
        return not self._busy()

    def _busy(self) -> bool:
        """Jobs waiting or running, in this worker's queues."""
        if self._queues is None:
            stats = self.queue.stats()
            return bool(stats["pending"] or stats["running"])
        counts = self.queue.queue_counts()
        return any(
            counts.get(name, {}).get(state, 0) for name in self._queues for state in ("pending", "running")
        )
