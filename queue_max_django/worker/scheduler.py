"""The periodic scheduler: enqueues each tick of every ``@periodic_task``, and of every schedule kept in the
store (``scheduling/ticking.py``: both kinds take the same path, each with tick keys of its own), exactly
once per store. A paused or disabled schedule enqueues nothing, and a tick due before its last change is
never caught up.

Any number of ``queue_worker`` commands may run one; only the one holding the store's ``LOCK`` lease (renewed
every step, lost ``LOCK_TTL`` seconds after its holder dies) enqueues. Each tick is put with a unique key
made of the task name and the tick's due time, checked in the same transaction as the write: even two
schedulers that both believe they lead (a paused leader whose lease ran out) enqueue a tick once. The engine
keeps a unique key a day at least, whatever the result TTL, and a tick is only ever put within its task's
``misfire_grace_time`` (half a day at most) of its due time, the clock read again just before each put: so
a tick's key is still there whenever it could be put a second time.

Missed ticks (a leader that died, a step that came late, workers stopped for a deploy) follow the task's
misfire policy, as APScheduler's ``misfire_grace_time`` and ``coalesce``. A new leader catches up only the
ticks a previous leader could have been responsible for. It reads the lock's last record before taking the
lock (``Queue.last_lock_holder``: a clean stop releases the lock by expiring its record, it does not delete
it) and resumes from that leader's last renewal, the last moment its ticks are known handled (the record's
expiry minus ``LOCK_TTL``, not before that leader took the lock); each tick due since then is enqueued as its
own job (those the predecessor enqueued already are no-ops, by their keys). On a store where no scheduler
ever led there is no record: the first leader starts from now and enqueues no tick that was due before.
While it leads, a scheduler goes on from the first tick it has not handled yet. Either way ticks due more
than ``misfire_grace_time`` ago are skipped, at most ``MAX_CATCH_UP`` of one task are enqueued per step (the
latest; older ones are skipped and logged), and with ``coalesce=True`` only the latest due tick is.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine import LockHolder, Queue, QueueError
from ..periodic import PeriodicTask, periodic_tasks
from ..schedules import Cron, Interval, ticks_between
from ..scheduling.ticking import Ticker, declared_ticker, tick_key, tickers

__all__ = ["LOCK", "LOCK_TTL", "MAX_CATCH_UP", "STEP", "Scheduler", "resume_point", "tick_key"]

logger = logging.getLogger("queue_max_django.worker")

LOCK = "periodic-scheduler"
LOCK_TTL = 10.0
STEP = 0.5  # seconds between steps: the lateness of a tick is at most about this
MAX_CATCH_UP = 100  # ticks of one task enqueued in one step at most: the latest that are due


def resume_point(previous: LockHolder, lock_ttl: float, now: float) -> float:
    """From when a new leader enqueues ticks, given the record of the lock's last holder: its last renewal
    (its expiry minus the ttl; a released lock expired when it was released, so that is ``lock_ttl`` before
    the stop, a margin of no-ops), but not before that holder took the lock (ticks due before then were its
    own predecessor's, or were due before any scheduler ran), and never after now."""
    return min(now, max(previous.expires_at - lock_ttl, previous.since))


class Scheduler:
    def __init__(
        self,
        queue: Queue,
        owner: str,
        *,
        tasks: Callable[[], list[PeriodicTask[..., Any]]] = periodic_tasks,
        clock: Callable[[], float] = time.time,
        lock_ttl: float = LOCK_TTL,
        stored: bool = True,
    ) -> None:
        self.queue = queue
        self.owner = owner
        self._tasks = tasks
        self._clock = clock
        self._lock_ttl = lock_ttl
        self._stored = stored  # also tick the schedules kept in the store (scheduling/ticking.py)
        # per ticker: (its schedule, the first tick this leader has not handled yet)
        self._next: dict[str, tuple[Interval | Cron, dt.datetime]] = {}
        self._resume_from = 0.0  # when this leadership began: ticks from then on are not handled yet
        self.leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> int:
        """Take or renew the leadership; if leading, enqueue every tick that is due and not enqueued yet,
        within each task's misfire policy. -> ticks enqueued (a tick its key showed enqueued already
        counts too: the scheduler cannot tell the two apart without a second read)."""
        # Before taking the lock, which overwrites it: the record of the last leader (None on a store where
        # no scheduler ever led). Read only when taking the leadership: a leader goes on from its own _next.
        previous = None if self.leading else self.queue.last_lock_holder(LOCK)
        if not self.queue.acquire_lock(LOCK, self.owner, self._lock_ttl):
            if self.leading:
                logger.info("scheduler: %s lost the leadership", self.owner)
            self.leading = False
            self._next.clear()
            return 0
        # The clock is read after the renewal: every tick due before the renewal's time is handled by this
        # step, so that a successor may resume from the renewal (its expiry minus the ttl).
        now = self._clock()
        if not self.leading:
            self.leading = True
            self._next.clear()
            self._resume_from = now if previous is None else resume_point(previous, self._lock_ttl, now)
            logger.info("scheduler: %s leads (%s), enqueueing ticks due from %s; periodic tasks: %s",
                        self.owner, "the first leader" if previous is None else f"after {previous.owner}",
                        dt.datetime.fromtimestamp(self._resume_from, dt.UTC).isoformat(),
                        ", ".join(t.name for t in self._tasks()) or "none")  # fmt: skip
        moment = dt.datetime.fromtimestamp(now, dt.UTC)
        enqueued = 0
        for ticker in tickers(self.queue, self._tasks, now, stored=self._stored):
            schedule = ticker.schedule
            known = self._next.get(ticker.key)
            start = None if known is None or known[0] != schedule else known[1]  # an edit starts afresh
            if ticker.held:  # paused or disabled: its ticks meanwhile are skipped, not caught up later
                self._next[ticker.key] = (schedule, schedule.next_after(moment))
                continue
            oldest = moment - dt.timedelta(seconds=ticker.misfire_grace_time)
            if start is not None and start < oldest:
                logger.warning("scheduler: ticks of %s due from %s to %s were skipped: later than its "
                               "misfire_grace_time (%g s)", ticker.label, start.isoformat(),
                               oldest.isoformat(), ticker.misfire_grace_time)  # fmt: skip
            if start is None:  # a new leadership: from the previous leader's last renewal, or from now
                start = dt.datetime.fromtimestamp(self._resume_from, dt.UTC)
            # Never a tick due at or before the record's last change (a resume, an edit): not caught up.
            floor = dt.datetime.fromtimestamp(ticker.not_before, dt.UTC) + dt.timedelta(microseconds=1)
            start = max(start, oldest, floor)
            due, left_out = ticks_between(
                schedule, start, moment, limit=1 if ticker.coalesce else MAX_CATCH_UP
            )
            self._next[ticker.key] = (schedule, schedule.next_after(moment))
            if left_out and not ticker.coalesce:
                logger.warning(
                    "scheduler: %d ticks of %s due from %s were skipped: at most %d are caught up at once",
                    left_out, ticker.label, start.isoformat(), MAX_CATCH_UP,
                )  # fmt: skip
            for tick in due:
                late = self._clock() - tick.timestamp()  # again: this step may have been paused
                if late > ticker.misfire_grace_time:
                    logger.warning("scheduler: skipped %s due %s, %.1f s late (misfire_grace_time %g s)",
                                   ticker.label, tick.isoformat(), late,
                                   ticker.misfire_grace_time)  # fmt: skip
                    continue
                if self._enqueue(ticker, tick):
                    enqueued += 1
        return enqueued

    def _enqueue(self, ticker: Ticker | PeriodicTask[..., Any], due: dt.datetime) -> bool:
        if isinstance(ticker, PeriodicTask):
            ticker = declared_ticker(ticker)
        try:
            job_id = ticker.enqueue(self.queue, due)
        except QueueError:
            logger.exception("scheduler: enqueueing %s due %s failed", ticker.label, due.isoformat())
            return False
        logger.info("scheduler: enqueued %s due %s as job %s", ticker.label, due.isoformat(), job_id)
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
