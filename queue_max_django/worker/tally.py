"""``Tally``: what the worker processes of one supervisor did with the jobs they claimed, counted in shared
memory (the processes are forked or spawned, and replaced ones count on), for the supervisor's closing line.

It takes no lock that another process could wait on: a worker process can be SIGKILLed at any instant, and a
process-shared lock (a ``multiprocessing`` ``Array``'s, a semaphore) that it held then stays held for good,
so that every other process of the supervisor, and the supervisor itself, would block on it for ever. Each
worker process counts in a row of its own instead (its index's: the one process that runs under an index at
a time, its replacement once it ended), behind a thread lock of its own for its threads; the supervisor adds
the rows up. A count is one aligned 64-bit word, written by one process and read whole.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from ..engine import Queue, State

KINDS = ("done", "retried", "dead", "waiting", "cancelled")
"""done: succeeded; retried: failed, runs again; dead: failed for good (a dead letter); waiting: its task is
not registered in the worker, given back to wait for a worker that has it (runner.TaskNotRegistered);
cancelled: stopped because someone cancelled it (stored as a dead letter with ``Cancelled``, not a
failure)."""
_WIDTH = len(KINDS)
_AT = {kind: at for at, kind in enumerate(KINDS)}


class Tally:
    def __init__(self, context: Any, processes: int) -> None:
        """``context``: the multiprocessing context the worker processes are started with; ``processes``:
        how many run at a time (their indexes are ``0 .. processes - 1``)."""
        self._counts = context.RawArray("q", processes * len(KINDS))
        self._lock = threading.Lock()  # this process's threads (each process has its own)

    def __getstate__(self) -> dict[str, Any]:  # sent to a spawned process: the shared array, a lock anew
        return {"_counts": self._counts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._counts = state["_counts"]
        self._lock = threading.Lock()

    def add(self, index: int, kind: str, count: int = 1) -> None:
        """Count ``count`` jobs of ``kind`` in the row of worker process ``index`` (the caller's)."""
        at = index * _WIDTH + _AT[kind]
        with self._lock:
            self._counts[at] += count

    def counts(self) -> dict[str, int]:
        """The rows added up: ``{kind: jobs}``."""
        values = self._counts[:]
        width = len(KINDS)
        return {kind: sum(values[k::width]) for k, kind in enumerate(KINDS)}


LEFT_LIMIT = 1000  # scheduled jobs a burst worker looks at, per queue, for the retries it leaves behind


@dataclass(frozen=True)
class Left:
    """The retries a ``--burst`` run leaves behind: jobs of its queues that failed an attempt and are
    scheduled to run again after it ended (its ``--burst-wait`` did not reach their time)."""

    count: int
    first: float  # the earliest one's ETA, unix seconds
    exact: bool  # False: more than LEFT_LIMIT scheduled jobs were looked at in some queue


def retries_left(queue: Queue, queues: tuple[str, ...] | None, *, limit: int = LEFT_LIMIT) -> Left | None:
    """The scheduled jobs of ``queues`` (None: every queue) that have had an attempt (a retry's backoff, a
    ``Retry(delay=)``), looking at the first ``limit`` scheduled jobs of each, in ETA order; None when there
    is none."""
    count, first, exact = 0, None, True
    for name in queues or (None,):
        scheduled = queue.jobs(State.SCHEDULED, queue=name, limit=limit)
        exact = exact and len(scheduled) < limit
        retries = [job for job in scheduled if job.attempts > 0 and job.eta is not None]
        count += len(retries)
        if retries:
            eta = min(job.eta for job in retries if job.eta is not None)
            first = eta if first is None else min(first, eta)
    return None if first is None else Left(count, first, exact)


def _clock_time(moment: float, now: float) -> str:
    """``14:02:07`` in local time, as the log's own times; with the date when it is a day away or more."""
    pattern = "%H:%M:%S" if abs(moment - now) < 86400 else "%Y-%m-%d %H:%M:%S"
    return time.strftime(pattern, time.localtime(moment))


def closing_line(counts: dict[str, int], left: Left | None = None, *, now: float | None = None) -> str:
    """``"stopped after 12 jobs (9 done, 2 failed and retried, 1 dead letter)"``: the jobs it ran (and
    ``", 1 cancelled"`` when some were cancelled while they ran). Jobs
    given back to wait for their task ran nothing, so they are not among them: they follow, only when there
    were some (``"; 3 given back to wait for their task"``), and so do the retries a ``--burst`` run leaves
    behind (``"; 1 retry scheduled for 14:02:07 (in 59.8 s) left behind"``; ``now``: the time to count from,
    unix seconds)."""
    cancelled = counts.get("cancelled", 0)
    total = counts["done"] + counts["retried"] + counts["dead"] + cancelled
    parts = [
        f"{counts['done']} done",
        f"{counts['retried']} failed and retried",
        f"{counts['dead']} dead letter{'' if counts['dead'] == 1 else 's'}",
    ]
    if cancelled:
        parts.append(f"{cancelled} cancelled")
    line = f"stopped after {total} job{'' if total == 1 else 's'} ({', '.join(parts)})"
    if counts["waiting"]:
        line += f"; {counts['waiting']} given back to wait for their task"
    if left is not None:
        now = time.time() if now is None else now
        many = f"{left.count:,}{'' if left.exact else '+'}"
        which = f"retr{'y' if left.count == 1 and left.exact else 'ies'} scheduled"
        since = "for" if left.count == 1 and left.exact else "from"
        at = f"{_clock_time(left.first, now)} (in {max(0.0, left.first - now):.1f} s)"
        line += f"; {many} {which} {since} {at} left behind"
    return line
