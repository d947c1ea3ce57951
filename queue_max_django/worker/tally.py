"""``Tally``: what the worker processes of one supervisor did with the jobs they claimed, counted in shared
memory (the processes are spawned, and replaced ones count on), for the supervisor's closing line."""

from __future__ import annotations

from typing import Any

KINDS = ("done", "retried", "dead", "waiting")
"""done: succeeded; retried: failed, runs again; dead: failed for good (a dead letter); waiting: its task is
not registered in the worker, given back to wait for a worker that has it (runner.TaskNotRegistered)."""


class Tally:
    def __init__(self, context: Any) -> None:
        """``context``: the multiprocessing context the worker processes are started with."""
        self._counts = context.Array("q", len(KINDS))

    def add(self, kind: str) -> None:
        index = KINDS.index(kind)
        with self._counts.get_lock():
            self._counts[index] += 1

    def counts(self) -> dict[str, int]:
        with self._counts.get_lock():
            return dict(zip(KINDS, self._counts[:], strict=True))


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
