"""``StopFlag``: the supervisor's "stop now" to its worker processes, one byte of shared memory.

Not a ``multiprocessing.Event``: its ``is_set()`` and ``set()`` take a process-shared lock, and a worker
process SIGKILLed while it held that lock (it looks at the flag ten times a second) would leave it held for
good: every other worker process would then hang at its next look, and the supervisor at its ``set()``, in
its signal handler. A byte written by the supervisor alone and read by the others needs no lock.
"""

from __future__ import annotations

from typing import Any


class StopFlag:
    def __init__(self, context: Any) -> None:
        """``context``: the multiprocessing context the worker processes are started with."""
        self._flag = context.RawValue("b", 0)

    def set(self) -> None:
        self._flag.value = 1

    def is_set(self) -> bool:
        return bool(self._flag.value)
