"""``queue_worker``'s start-up, before the supervisor runs: a SIGTERM or Ctrl-C meanwhile (``startup_stop``,
from the moment Django imports the app: ``earlystop.py``; ``stopped`` at each phase),
what the worker processes should inherit ready-made (``preload``), and waiting for a store that cannot be
reached yet (``open_waiting``)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..conf import get_config, get_queue, store_class
from ..engine import Queue, StoreUnavailable
from . import earlystop
from .banner import django_task_names

logger = logging.getLogger("queue_max_django.worker")

STORE_WAIT_DELAYS = (0.5, 1.0, 2.0, 5.0)  # seconds between tries to reach the store, then the last again
STORE_WAIT_LOG_EVERY = 60.0  # seconds: how often the same failure to reach it is logged again


@contextlib.contextmanager
def startup_stop() -> Iterator[threading.Event]:
    """Inside: SIGTERM and SIGINT set the event instead of killing the process, so that a stop during
    start-up ends the command with status 0 and nothing half-started (the supervisor, once it runs, puts
    its own handlers in and looks at the event). The previous handlers come back at the end. In a thread
    other than the main one (no signal handler can be set there) the event is never set.

    In ``queue_worker``'s own process the early handlers (``earlystop.py``) are in already, since Django
    imported the app: their event is the one, and they come out at the end."""
    if earlystop.installed():
        try:
            yield earlystop.STOP
        finally:
            earlystop.uninstall()
        return
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def stopped(phase: str, stop: threading.Event) -> bool:
    """The command reached start-up phase ``phase`` (``earlystop.PHASES``). -> whether it was told to stop
    (it then ends with status 0, having started nothing more; logged here)."""
    earlystop.reached(phase)
    if stop.is_set():
        logger.warning("stopped during start-up (%s)", phase)
        return True
    return False


def preload() -> None:
    """Import now what every worker process needs, so that the fork server's children inherit it: the
    store's module (and psycopg for the PostgreSQL store) and the modules of the ``django.tasks`` tasks.
    Nothing is opened."""
    store_class(get_config())
    django_task_names(quiet=True)


def open_waiting(stop: threading.Event) -> Queue | None:
    """The process's queue, waiting for a store that cannot be reached yet (a PostgreSQL server that is
    starting, or a container started before its database): each try after a delay (``STORE_WAIT_DELAYS``),
    the failure logged when it first happens, when it changes, and every ``STORE_WAIT_LOG_EVERY`` seconds.
    ``stop`` set (SIGTERM or Ctrl-C) before or while waiting: None, nothing opened (there is nothing to
    finish). Any other error of the store (its tables missing, a bad setting) is raised at once."""
    attempt, logged, logged_at = 0, "", 0.0
    while not stop.is_set():
        try:
            return get_queue()
        except StoreUnavailable as exc:
            delay = STORE_WAIT_DELAYS[min(attempt, len(STORE_WAIT_DELAYS) - 1)]
            attempt += 1
            if str(exc) != logged or time.monotonic() - logged_at >= STORE_WAIT_LOG_EVERY:
                logger.warning("waiting for the store: %s (trying again every %g s at most)", exc, delay)
                logged, logged_at = str(exc), time.monotonic()
            if stop.wait(delay):
                logger.warning("stopped while waiting for the store")
                return None
    return None
