"""The worker's log lines: ``-v 0`` warnings and errors, ``-v 1`` also the banner and throughput lines,
``-v 2`` also one line per job, ``-v 3`` debug.

A failed attempt that will be retried is one line: the exception (type: message) and where the task's own
code raised it (``summary``); the full traceback is logged once, when the job fails for good (a dead letter),
and is kept with the job in any case. A job of a task this worker lacks is logged once per task name, then at
most every ``Throttle.every`` seconds while its jobs keep coming (``Throttle``).
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable

from ..engine import State
from ..engine.validate import error_text

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO, 3: logging.DEBUG}
FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(message)s"

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # queue_max_django/
_LIBRARIES = tuple(
    {os.path.abspath(path) + os.sep for key, path in sysconfig.get_paths().items() if key.endswith("lib")}
)


def configure_logging(verbosity: int) -> None:
    """Send the package's log records to stderr at the level ``verbosity`` asks for, unless the project's
    LOGGING already gave the ``queue_max_django`` logger a handler."""
    logger = logging.getLogger("queue_max_django")
    logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.propagate = False


def _is_library(filename: str) -> bool:
    """Whether ``filename`` is not the project's own code: this package, the standard library, an installed
    package (site-packages), or frozen or generated code."""
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE + os.sep) or path.startswith(_LIBRARIES)


def summary(error: BaseException | str | None) -> str:
    """One line for a failed attempt: ``"ValueError: boom (at myapp/tasks.py:12 in send)"``, the frame
    being the innermost one of the project's own code (not of the standard library, an installed package or
    this one); the innermost frame when none is. A path under the working directory is shown relative."""
    if not isinstance(error, BaseException):
        return str(error)
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    text = " ".join(error_text(error).split())
    line = f"{name}: {text}" if text else name
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ is not None else []
    if not frames:
        return line
    own = [frame for frame in frames if not _is_library(frame.filename)]
    frame = (own or frames)[-1]
    filename = frame.filename
    try:
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            filename = relative
    except ValueError:  # another drive (Windows)
        pass
    return f"{line} (at {filename}:{frame.lineno} in {frame.name})"


class Throttle:
    """Lets a recurring log line through once per key, then at most every ``every`` seconds, saying how
    many times it was held back meanwhile. Shared by the threads of a process; at most 1,000 keys."""

    def __init__(self, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, list[float]] = {}  # key -> [when last let through, held back since]

    def due(self, key: str) -> int | None:
        """None: hold this line back; else let it through, with how many lines of ``key`` were held back
        since the last one let through."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                if len(self._seen) >= 1000:
                    self._seen.clear()
                self._seen[key] = [now, 0]
                return 0
            if now - seen[0] < self.every:
                seen[1] += 1
                return None
            held, seen[0], seen[1] = int(seen[1]), now, 0
            return held


def log_stopped(worker_id: str, error: object, state: State, *, cancelled: bool) -> None:
    """The line of a job this process's main thread ended (over its timeout, or past its cancel grace),
    after which the process is replaced: INFO for a cancel (an outcome someone asked for), WARNING for a
    timeout that runs again (as every retried failure), ERROR for one that made a dead letter."""
    level = logging.INFO if cancelled else logging.ERROR if state is State.FAILED else logging.WARNING
    logging.getLogger("queue_max_django.worker").log(
        level, "worker %s: %s; it is now %s. This process is replaced, since a thread cannot be stopped.",
        worker_id, error, "cancelled" if cancelled else state.value,
    )  # fmt: skip
