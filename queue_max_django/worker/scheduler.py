"""The periodic scheduler: enqueues each tick of every ``@periodic_task`` exactly once per store.

Any number of ``queue_worker`` commands may run one; only the one holding the store's ``LOCK`` lease (renewed
every step, lost ``LOCK_TTL`` seconds after its holder dies) enqueues. Each tick is put with a unique key
made of the task name and the tick's due time, checked in the same transaction as the write: even two
schedulers that both believe they lead (a paused leader whose lease ran out) enqueue a tick once.

A new leader looks ``LOCK_TTL`` seconds back for ticks its predecessor may have missed while the lease ran
out. Ticks missed for longer (no worker ran) are not replayed one by one: only the latest of them runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine import Queue, QueueError
from ..periodic import PeriodicTask, periodic_tasks

logger = logging.getLogger("queue_max_django.worker")

LOCK = "periodic-scheduler"
LOCK_TTL = 10.0
STEP = 0.5  # seconds between steps: the lateness of a tick is at most about this


def tick_key(task_name: str, due: dt.datetime) -> str:
    """The unique key of one tick; long task names are hashed to keep it within the engine's limit."""
    name = (
        task_name
        if len(task_name) <= 120
        else hashlib.blake2b(task_name.encode(), digest_size=16).hexdigest()
    )
    return f"periodic:{name}:{int(due.timestamp() * 1_000_000)}"


class Scheduler:
    def __init__(
        self,
        queue: Queue,
        owner: str,
        *,
        tasks: Callable[[], list[PeriodicTask[..., Any]]] = periodic_tasks,
        clock: Callable[[], float] = time.time,
        lock_ttl: float = LOCK_TTL,
    ) -> None:
        self.queue = queue
        self.owner = owner
        self._tasks = tasks
        self._clock = clock
        self._lock_ttl = lock_ttl
        self._next: dict[str, dt.datetime] = {}
        self.leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> int:
        """Take or renew the leadership; if leading, enqueue every tick that is due. -> ticks enqueued."""
        now = self._clock()
        if not self.queue.acquire_lock(LOCK, self.owner, self._lock_ttl):
            if self.leading:
                logger.info("scheduler: %s lost the leadership", self.owner)
            self.leading = False
            self._next.clear()
            return 0
        if not self.leading:
            self.leading = True
            logger.info("scheduler: %s leads; periodic tasks: %s", self.owner,
                        ", ".join(t.name for t in self._tasks()) or "none")  # fmt: skip
        moment = dt.datetime.fromtimestamp(now, dt.UTC)
        lookback = moment - dt.timedelta(seconds=self._lock_ttl)
        enqueued = 0
        for task in self._tasks():
            due = self._next.get(task.name) or task.next_run_after(lookback)
            if due is None or due > moment:
                if due is not None:
                    self._next[task.name] = due
                continue
            latest = due  # the latest tick that is due; earlier ones missed for longer are skipped
            following = task.next_run_after(latest)
            while following is not None and following <= moment:
                latest, following = following, task.next_run_after(following)
            if self._enqueue(task, latest):
                enqueued += 1
            if following is not None:
                self._next[task.name] = following
        return enqueued

    def _enqueue(self, task: PeriodicTask[..., Any], due: dt.datetime) -> bool:
        options = {**task._put_options(), "delay": None, "eta": None}
        try:
            task._prepare(self.queue)
            job_id = self.queue.put(task._payload((), {}), unique_key=tick_key(task.name, due), **options)
        except QueueError:
            logger.exception("scheduler: enqueueing %s due %s failed", task.name, due.isoformat())
            return False
        logger.info("scheduler: enqueued %s due %s as job %s", task.name, due.isoformat(), job_id)
        return True

    # ------------------------------------------------------------------ as a thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="queue-max-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(STEP):
            try:
                self.step()
            except Exception:
                logger.exception("scheduler: a step failed; trying again")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.leading:
            with contextlib.suppress(QueueError):
                self.queue.release_lock(LOCK, self.owner)
            self.leading = False
