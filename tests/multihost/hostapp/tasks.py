"""The multi-host run's task: it records each execution, and where it ran, durably and cheaply.

One append-only file per process (``$QUEUE_MAX_MULTIHOST_DIR/exec/<host>-<pid>``), one ``write`` of one line
per execution (``token host pid``): a line the kernel has accepted survives a SIGKILL of the process, and
``O_APPEND`` writes of a short line from several threads never interleave.
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
            host = os.environ["QUEUE_MAX_MULTIHOST_HOST"]
            path = os.path.join(os.environ["QUEUE_MAX_MULTIHOST_DIR"], "exec", f"{host}-{os.getpid()}")
            _log = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600))
        return _log[1]


@task
def record(token: str) -> None:
    """Write ``token`` (the job's identity, chosen by its producer), this host and this process to the
    process's execution log."""
    os.write(_fd(), f"{token} {os.environ['QUEUE_MAX_MULTIHOST_HOST']} {os.getpid()}\n".encode())
