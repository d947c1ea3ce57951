"""The worker runtime of ``manage.py queue_worker``: a supervisor process (``supervisor.py``) starts worker
processes (``process.py``: threads that claim and run jobs, heartbeats, timeouts), forked by a fork server
(``forkserver.py``, ``launch.py``; ``startup.py`` and ``earlystop.py`` are what comes before) or spawned,
and runs the periodic scheduler (``scheduler.py``). See docs/reference/commands.md and docs/howto/deploy.md.

The names below load on first access: importing ``worker.earlystop`` (which ``apps.py`` does first thing in
every process) imports nothing else of the worker."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .options import WorkerOptionError, WorkerOptions
    from .supervisor import Supervisor, run_worker

__all__ = ["Supervisor", "WorkerOptionError", "WorkerOptions", "run_worker"]

_HOMES = {
    "Supervisor": "supervisor",
    "WorkerOptionError": "options",
    "WorkerOptions": "options",
    "run_worker": "supervisor",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value
