"""How the supervisor starts its worker processes: ``SpawnLauncher`` (a fresh interpreter each, which sets
Django up again: 1-4 s) or ``ForkLauncher`` (forked by the fork server from a set-up Django: milliseconds).

``queue_worker`` makes its launcher with ``make_launcher()`` right after Django is set up and before it opens
the store: a ``ForkLauncher`` where ``os.fork`` exists and the process has no store open and runs no other
thread, else (Windows, or a store or a thread that the project's code opened while Django started) a
``SpawnLauncher``. ``run_worker`` called without one (from a process that may already have a store open)
spawns. Either way the supervisor's stop event and its ``Tally`` are made here, before the fork server is
forked, so that every worker process shares them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from typing import Any

from ..engine.forks import open_stores
from . import entry
from .forkserver import ForkedProcess, ForkServer, ForkServerLost
from .options import WorkerOptions
from .stopflag import StopFlag
from .tally import Tally

logger = logging.getLogger("queue_max_django.worker")


class SpawnLauncher:
    """Starts each worker process with ``multiprocessing``'s spawn."""

    method = "spawn"

    def __init__(self, processes: int) -> None:
        """``processes``: how many worker processes run at a time."""
        self._context = multiprocessing.get_context("spawn")
        # Both in shared memory without a lock: a worker process SIGKILLed at any instant leaves none held.
        self.stop_event = StopFlag(self._context)
        self.tally = Tally(self._context, processes)  # what the worker processes did, for the closing line

    def start(self, index: int, options: WorkerOptions) -> Any:
        """Start worker process ``index``. -> its handle (``pid``, ``exitcode``, ``is_alive``, ``kill``,
        ``join``)."""
        proc = self._context.Process(
            target=entry.spawned,
            args=(options, index, self.stop_event, os.getpid(), self.tally),
            name=f"queue_worker-{index}",
        )
        proc.start()
        return proc

    def waitables(self, handles: list[Any]) -> list[Any]:
        """What to wait on (``multiprocessing.connection.wait``) to learn that one of ``handles`` ended."""
        return [handle.sentinel for handle in handles if not isinstance(handle, ForkedProcess)]

    def poll(self) -> None:
        """Take in what the launcher learnt about its processes since the last call."""

    def close(self) -> None:
        """Nothing is left of the launcher once its processes ended."""


class ForkLauncher(SpawnLauncher):
    """Asks the fork server for each worker process; spawns (and logs why) if the server is gone."""

    method = "fork server"

    def __init__(self, processes: int) -> None:
        super().__init__(processes)
        self.server = ForkServer.start(self.stop_event, self.tally)

    def start(self, index: int, options: WorkerOptions) -> Any:
        if not self.server.lost:
            try:
                return self.server.launch(index, options)
            except ForkServerLost as exc:
                logger.error("%s; starting worker process %s with spawn", exc, index)
        return super().start(index, options)

    def waitables(self, handles: list[Any]) -> list[Any]:
        own = [] if self.server.lost else [self.server.connection]
        return [*own, *super().waitables(handles)]

    def poll(self) -> None:
        self.server.poll()

    def close(self) -> None:
        self.server.close()


def make_launcher(processes: int) -> SpawnLauncher:
    """The launcher of ``queue_worker`` for ``processes`` worker processes at a time: call it after Django is
    set up, before any store is opened."""
    if not hasattr(os, "fork"):
        return SpawnLauncher(processes)  # Windows
    held = open_stores()
    if held:  # a project's code opened the store while Django started: this process must not be forked
        logger.warning("worker processes are started with spawn (slower), not forked: this process has a "
                       "store open already (%s)", ", ".join(held))  # fmt: skip
        return SpawnLauncher(processes)
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
        logger.warning("worker processes are started with spawn (slower), not forked: this process runs "
                       "other threads (%s), and forking it could copy a lock one of them holds",
                       names)  # fmt: skip
        return SpawnLauncher(processes)
    return ForkLauncher(processes)
