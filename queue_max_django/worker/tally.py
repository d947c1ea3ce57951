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
from typing import Any

KINDS = ("done", "retried", "dead", "waiting")
"""done: succeeded; retried: failed, runs again; dead: failed for good (a dead letter); waiting: its task is
not registered in the worker, given back to wait for a worker that has it (runner.TaskNotRegistered)."""


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

    def add(self, index: int, kind: str) -> None:
        """Count one job of ``kind`` in the row of worker process ``index`` (the caller's)."""
        at = index * len(KINDS) + KINDS.index(kind)
        with self._lock:
            self._counts[at] += 1

    def counts(self) -> dict[str, int]:
        """The rows added up: ``{kind: jobs}``."""
        values = self._counts[:]
        width = len(KINDS)
        return {kind: sum(values[k::width]) for k, kind in enumerate(KINDS)}


def closing_line(counts: dict[str, int]) -> str:
    """``"stopped after 12 jobs (9 done, 2 failed and retried, 1 dead letter)"``: the jobs it ran. Jobs
    given back to wait for their task ran nothing, so they are not among them: they follow, only when there
    were some (``"; 3 given back to wait for their task"``)."""
    total = counts["done"] + counts["retried"] + counts["dead"]
    parts = [
        f"{counts['done']} done",
        f"{counts['retried']} failed and retried",
        f"{counts['dead']} dead letter{'' if counts['dead'] == 1 else 's'}",
    ]
    line = f"stopped after {total} job{'' if total == 1 else 's'} ({', '.join(parts)})"
    if counts["waiting"]:
        line += f"; {counts['waiting']} given back to wait for their task"
    return line
