"""A stop of ``queue_worker`` that comes before the command's own handlers are in: from the moment Django
imports this app (``apps.py``, while ``django.setup()`` runs) a SIGTERM or SIGINT sets ``STOP`` instead of
killing the process. Each start-up phase of the command looks at it (``worker/startup.py``) and, once it is
set, the command ends with status 0 having started nothing; the supervisor, once it runs, takes its
handlers over (``run_worker``) and stops at once when it finds ``STOP`` set.

Installed only in the process of ``manage.py queue_worker`` (or ``django-admin queue_worker``, ``python -m
django queue_worker``): the first argument names the command and Django's command line is running. Any
other process (a web server, a test run, another command) keeps the handlers it had. Before Django imports
the app (Python's and Django's own start, the settings, the apps listed before this one) nothing of this
package runs: a signal then ends the process as it would any other (status -15 for SIGTERM), with nothing
started either. A second signal meanwhile does what it would have done without us (SIGTERM ends the
process at once).

For tests and benchmarks, ``reached(phase)`` marks each phase of the start-up: ``QUEUE_MAX_STARTUP_HOLD=
PHASE:PATH`` holds the command at ``PHASE`` (writing ``PATH.held``) until ``PATH`` exists, so that a test
can signal it there; ``QUEUE_MAX_STARTUP_TRACE=PATH`` appends each phase's name and wall-clock time to
``PATH``. Neither is read unless set.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

COMMAND = "queue_worker"
SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The phases of the start-up, in order: Django imported the app (its AppConfig is made), the apps are
# ready, the command's module is loaded and it starts, its system checks passed, its options are read,
# the fork server is started, the store is open, the supervisor is about to take the signals over.
PHASES = ("app", "ready", "command", "checks", "options", "launcher", "store", "supervisor")
HOLD_ENV = "QUEUE_MAX_STARTUP_HOLD"
TRACE_ENV = "QUEUE_MAX_STARTUP_TRACE"
HOLD_LIMIT = 60.0  # seconds a hold lasts at most

STOP = threading.Event()  # set by the first SIGTERM or SIGINT while the early handlers are in
_previous: dict[signal.Signals, Any] = {}  # the handlers ours replaced, while ours are in


def wanted(argv: list[str]) -> bool:
    """Is this the process of ``queue_worker``, run from Django's command line, on its main thread?"""
    return (
        len(argv) > 1
        and argv[1] == COMMAND
        and "django.core.management" in sys.modules
        and threading.current_thread() is threading.main_thread()
    )


def _on_signal(signum: int, frame: Any) -> None:
    if not STOP.is_set():
        STOP.set()
        return
    previous = _previous.get(signal.Signals(signum), signal.SIG_DFL)  # a second one: as without us
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install(argv: list[str] | None = None) -> bool:
    """Put the early handlers in if this is ``queue_worker``'s process (``argv``: ``sys.argv``). -> whether
    they are in. Calling it again changes nothing."""
    if installed():
        return True
    if not wanted(sys.argv if argv is None else argv):
        return False
    for signum in SIGNALS:
        _previous[signum] = signal.signal(signum, _on_signal)
    return True


def installed() -> bool:
    """Are the early handlers in (and not yet taken back by ``uninstall``)?"""
    return bool(_previous)


def uninstall() -> None:
    """Put back the handlers that ``install`` replaced (at the command's end)."""
    for signum, handler in _previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    _previous.clear()


def reached(phase: str) -> None:
    """The command reached start-up phase ``phase`` (one of ``PHASES``): trace it, and hold there if told
    to (``QUEUE_MAX_STARTUP_HOLD``, ``QUEUE_MAX_STARTUP_TRACE``: the module's docstring)."""
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a", encoding="utf-8") as out:
            out.write(f"{phase} {time.time():.6f}\n")
    hold = os.environ.get(HOLD_ENV)
    if hold:
        where, _, path = hold.partition(":")
        if where == phase and path:
            _hold(path)


def _hold(path: str) -> None:
    with open(f"{path}.held", "w", encoding="utf-8") as out:
        out.write(str(os.getpid()))
    deadline = time.monotonic() + HOLD_LIMIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
