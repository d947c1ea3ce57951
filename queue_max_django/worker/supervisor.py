"""The supervisor: starts the worker processes (forked by the fork server, or spawned: launch.py; no
store handle ever crosses a fork), replaces any that dies, runs the periodic scheduler, prunes dead workers
from the registry, logs throughput, and turns SIGTERM/SIGINT into a graceful stop (a second signal:
immediate). It logs a banner when it starts (the store, the options, how processes start, the tasks it will
run) and a closing line when it ends (what its processes did)."""

from __future__ import annotations

import logging
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..engine import Queue, QueueError
from ..engine.throughput import Sampler
from ..tasks import registry
from .banner import django_task_names
from .launch import SpawnLauncher
from .options import DONE, RECYCLE, TIMED_OUT, WorkerOptions
from .scheduler import Scheduler
from .tally import Left, closing_line, retries_left

logger = logging.getLogger("queue_max_django.worker")

KILL_GRACE = 10.0  # seconds past the shutdown timeout before a process that did not stop is killed
RESTART_BACKOFF_MAX = 30.0


@dataclass
class Child:
    index: int
    process: Any  # multiprocessing.process.BaseProcess, or a forkserver.ForkedProcess
    started: float = field(default_factory=time.monotonic)
    quick_deaths: int = 0  # consecutive deaths soon after start: restarts back off


class Supervisor:
    def __init__(self, queue: Queue, options: WorkerOptions, launcher: SpawnLauncher | None = None) -> None:
        self.queue = queue
        self.options = options
        self.launcher = SpawnLauncher(options.processes) if launcher is None else launcher
        self._stop_event = self.launcher.stop_event
        self.tally = self.launcher.tally  # what the worker processes did, for the closing line
        self._children: dict[int, Child] = {}
        self._restart_at: dict[int, tuple[float, int]] = {}  # index -> (when, quick deaths so far)
        self._finished: set[int] = set()  # --burst: processes that found nothing more to do
        self._signals = 0
        self._kill_now = False  # a second signal: the main loop kills every process
        self._stopping_since: float | None = None
        self.replaced = 0
        use_scheduler = options.scheduler and not options.burst
        self._scheduler = Scheduler(queue, options.worker_id) if use_scheduler else None
        self._sampler = Sampler(queue)  # the admin's throughput chart: a sample a minute

    # ------------------------------------------------------------------ signals

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.warning("%s received: finishing running jobs (up to %ss); send it again to stop now",
                           signal.Signals(signum).name, self.options.shutdown_timeout)  # fmt: skip
            self.request_stop()
        else:
            logger.warning("stopping now: running jobs come back when their leases expire")
            self._kill_now = True  # by the main loop: a fork server's socket is not for a signal handler

    def request_stop(self) -> None:
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
        self._stop_event.set()

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        """Run until stopped (or, with --burst, until every process found nothing to do). -> exit code."""
        self._banner()
        for index in range(self.options.processes):
            if self._stopping_since is None:  # a signal while the first ones start: no more of them
                self._start(index)
        if self._scheduler is not None and self._stopping_since is None:
            self._scheduler.start()
        last_line = time.monotonic()
        last_counts = self._counts()
        try:
            while self._children or self._restart_at:
                handles = [child.process for child in self._children.values()]
                multiprocessing.connection.wait(self.launcher.waitables(handles), timeout=0.5)
                self.launcher.poll()
                if self._kill_now:
                    self._kill_all()
                self._reap()
                self._restart_due()
                self._sampler.tick()
                if self._stopping_since is not None:
                    self._restart_at.clear()
                    self._kill_overdue()
                now = time.monotonic()
                if now - last_line >= self.options.stats_interval:
                    last_counts = self._throughput(now - last_line, last_counts)
                    last_line = now
                    self._prune()
        finally:
            if self._scheduler is not None:
                self._scheduler.stop()
        self._prune()
        left = self._retries_left() if self.options.burst else None
        logger.info("queue_worker %s: %s", self.options.worker_id, closing_line(self.tally.counts(), left))
        if self._signals > 1:
            return 1
        return 0

    def _start(self, index: int) -> None:
        self._children[index] = Child(index, self.launcher.start(index, self.options))

    def _kill_all(self) -> None:
        for child in self._children.values():
            if child.process.is_alive():
                child.process.kill()

    def _reap(self) -> None:
        for index, child in list(self._children.items()):
            proc = child.process
            if proc.is_alive():
                continue
            proc.join()
            del self._children[index]
            code = proc.exitcode
            if self._stopping_since is not None:
                continue
            if code == DONE and self.options.burst:
                self._finished.add(index)
                continue
            self._schedule_restart(index, child, code)

    def _schedule_restart(self, index: int, child: Child, code: int | None) -> None:
        self.replaced += 1
        quick = child.quick_deaths + 1 if time.monotonic() - child.started < 5.0 else 0
        if code == RECYCLE:
            why, quick = "recycled", 0
        elif code == DONE:  # a SIGTERM sent to it alone; if the whole group got one, we stop before 1 s
            why, quick = "stopped", 2
        elif code == TIMED_OUT:
            why = "replaced after a job timed out (or, cancelled, did not stop within --cancel-grace)"
        elif code is not None and code < 0:
            why = f"killed by {signal.Signals(-code).name}"
        elif code is None:  # a forked process whose fork server died: it stops by itself
            why = "lost with the fork server"
        else:
            why = f"exited with code {code}"
        delay = 0.0 if quick <= 1 else min(RESTART_BACKOFF_MAX, 0.5 * 2 ** (quick - 2))
        log = logger.info if code == RECYCLE else logger.warning
        log("worker process %s (pid %s) %s; starting a new one%s", index, child.process.pid, why,
            f" in {delay:.1f}s" if delay else "")  # fmt: skip
        self._restart_at[index] = (time.monotonic() + delay, quick)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, (when, quick) in list(self._restart_at.items()):
            if now >= when and self._stopping_since is None:
                del self._restart_at[index]
                self._start(index)
                self._children[index].quick_deaths = quick

    def _kill_overdue(self) -> None:
        assert self._stopping_since is not None
        if time.monotonic() - self._stopping_since < self.options.shutdown_timeout + KILL_GRACE:
            return
        for child in self._children.values():
            if child.process.is_alive():
                logger.error("worker process %s (pid %s) did not stop in time; killing it",
                             child.index, child.process.pid)  # fmt: skip
                child.process.kill()

    # ------------------------------------------------------------------ logs and registry

    def _banner(self) -> None:
        options = self.options
        threads = (
            f"{options.autoscale[0]}-{options.autoscale[1]} (autoscale)"
            if options.autoscale
            else options.threads
        )
        stats = self.queue.stats()
        logger.info(
            "queue_worker %s: store %s (%d shards); queues: %s; %d process(es) x %s thread(s) (%s)%s%s",
            options.worker_id, self.queue.path, self.queue.shard_count,
            ", ".join(options.queues) if options.queues else "all", options.processes, threads,
            self.launcher.method, "; burst" if options.burst else "",
            "" if self._scheduler else "; no scheduler",
        )  # fmt: skip
        logger.info("registered tasks (%d): %s", len(registry.names()), ", ".join(registry.names()) or "none")
        django_tasks = django_task_names()
        if django_tasks is not None:
            logger.info("django.tasks tasks (%d): %s", len(django_tasks), ", ".join(django_tasks) or "none")
        logger.info(
            "waiting %d, scheduled %d, running %d, done %d, dead letters %d",
            *(stats[state] for state in ("pending", "scheduled", "running", "done", "failed")),
        )

    def _counts(self) -> tuple[int, int]:
        try:
            stats = self.queue.stats()
        except QueueError:
            return (0, 0)
        return stats["done"], stats["failed"]

    def _throughput(self, seconds: float, before: tuple[int, int]) -> tuple[int, int]:
        now = self._counts()
        done = max(0, now[0] - before[0])
        logger.info("%d job(s) done in the last %.0fs (%.1f/s); %d dead letters in all", done, seconds,
                    done / seconds if seconds else 0.0, now[1])  # fmt: skip
        return now

    def _retries_left(self) -> Left | None:
        """--burst: the retries its queues hold for after it ended, named in the closing line."""
        try:
            return retries_left(self.queue, self.options.queues)
        except QueueError:
            logger.exception("listing the retries left behind failed")
            return None

    def _prune(self) -> None:
        try:
            self.queue.prune_workers()
        except QueueError:
            logger.exception("pruning the worker registry failed")


def run_worker(
    queue: Queue,
    options: WorkerOptions,
    launcher: SpawnLauncher | None = None,
    *,
    stopped: threading.Event | None = None,
) -> int:
    """What ``manage.py queue_worker`` does. -> the exit code. The SIGTERM and SIGINT handlers it installs
    are replaced by the previous ones when it returns or raises (it may run inside a longer process).
    ``WorkerOptionError``, before anything starts, for a lease time too short for the worker to renew.

    ``launcher``: how worker processes start (launch.py); without one they are spawned. ``stopped``: an
    event set by a signal before this was called (start-up): the run then stops at once, starting nothing."""
    options.heartbeat_every(queue.lease_time)
    supervisor = Supervisor(queue, options, launcher)
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    supervisor.install_signal_handlers()
    if stopped is not None and stopped.is_set():  # after our handlers are in: no signal falls between
        logger.warning("stopped during start-up")
        return _restore(previous, 0)
    try:
        return supervisor.run()
    finally:
        _restore(previous, 0)


def _restore(handlers: dict[signal.Signals, Any], code: int) -> int:
    for signum, handler in handlers.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    return code
