"""The chaos runs' task: it records each execution of a job durably and cheaply.

One append-only file per process (``$QUEUE_MAX_CHAOS_DIR/exec/<pid>``), one ``write`` of one line per
execution: a line the kernel has accepted survives a SIGKILL of the process (only an OS crash could lose it),
and ``O_APPEND`` writes of a short line from several threads never interleave.
"""

from __future__ import annotations

import os
import threading

from queue_max_django import task

_lock = threading.Lock()
_log: tuple[int, int] | None = None  # (pid, fd)


def _fd() -> int:
    global _log
    with _lock:
        if _log is None or _log[0] != os.getpid():
            folder = os.path.join(os.environ["QUEUE_MAX_CHAOS_DIR"], "exec")
            path = os.path.join(folder, str(os.getpid()))
            _log = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600))
        return _log[1]


@task
def record(token: str) -> None:
    """Write ``token`` (the job's identity, chosen by its producer) to this process's execution log."""
    os.write(_fd(), f"{token}\n".encode())


@task
def noop() -> None:
    """Nothing: the soak run (benchmarks/soak.py) measures the queue, not the task."""
    return None
