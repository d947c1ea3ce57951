"""Engine-level callbacks: job enqueued, started, succeeded, retried, failed, cancelled, lost with its worker,
and alerts.

Emitting with no listener costs one dict lookup; ``listening()`` lets the caller skip building the arguments.
Registration is copy-on-write (a new dict of tuples under a lock), so ``emit`` reads without locking. A
callback that raises is logged and never breaks the queue operation that fired it. ``batch()`` silences the
per-job events in the current thread during bulk work. The Django layer turns these into signals.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

JOB_ENQUEUED = "job_enqueued"
JOB_STARTED = "job_started"
JOB_SUCCEEDED = "job_succeeded"
JOB_RETRIED = "job_retried"
JOB_FAILED = "job_failed"  # failed for good (dead-lettered)
JOB_CANCELLED = "job_cancelled"  # ended because someone cancelled it while it ran (not a failure)
JOB_LOST = "job_lost"  # recovery took back a job whose holder died or stalled (after its retried/failed)
ALERT = "alert"  # e.g. waiting jobs over a threshold; not a per-job event, so batch() does not silence it

EVENTS: tuple[str, ...] = (
    JOB_ENQUEUED, JOB_STARTED, JOB_SUCCEEDED, JOB_RETRIED, JOB_FAILED, JOB_CANCELLED, JOB_LOST, ALERT,
)  # fmt: skip
PER_JOB_EVENTS: frozenset[str] = frozenset(EVENTS) - {ALERT}

logger = logging.getLogger("queue_max_django.engine.events")

Callback = Callable[..., object]
C = TypeVar("C", bound=Callback)


def _unknown(event: object) -> ValueError:
    return ValueError(f"unknown event {event!r}; the events are: {', '.join(EVENTS)}")


class _Batching(threading.local):
    """A thread's depth of ``Events.batch()`` blocks. The class's 0 is every thread's until it enters one,
    so reading it is a plain attribute read (a ``getattr`` with a default that misses raises and catches
    inside: dearer, twice on every put that someone listens to)."""

    depth = 0


class Events:
    """The callbacks of one queue. Callbacks get the event's fields as keyword arguments.

    Callbacks are held by strong reference and called in registration order, in the thread that emits.
    Registering a callback twice for one event keeps it once.
    """

    __slots__ = ("_listeners", "_local", "_lock")

    def __init__(self) -> None:
        # Every known event has an entry (empty when nobody listens): an unknown name is a KeyError.
        self._listeners: dict[str, tuple[Callback, ...]] = dict.fromkeys(EVENTS, ())
        self._lock = threading.Lock()
        self._local = _Batching()

    @overload
    def on(self, event: str) -> Callable[[C], C]: ...

    @overload
    def on(self, event: str, callback: C) -> C: ...

    def on(self, event: str, callback: C | None = None) -> C | Callable[[C], C]:
        """Call ``callback(**fields)`` on each ``event``. Returns the callback; ``@events.on(JOB_FAILED)``
        works as a decorator. ValueError for an unknown event name, TypeError for a non-callable."""
        if event not in self._listeners:
            raise _unknown(event)
        if callback is None:

            def decorator(function: C) -> C:
                return self.on(event, function)

            return decorator
        if not callable(callback):
            raise TypeError(f"an event callback must be callable, not {callback!r}")
        with self._lock:
            current = self._listeners[event]
            if callback not in current:
                self._listeners = {**self._listeners, event: (*current, callback)}
        return callback

    def off(self, event: str, callback: Callback) -> bool:
        """Stop calling ``callback`` on ``event``. -> whether it was registered."""
        if event not in self._listeners:
            raise _unknown(event)
        with self._lock:
            current = self._listeners[event]
            if callback not in current:
                return False
            kept = tuple(registered for registered in current if registered != callback)
            self._listeners = {**self._listeners, event: kept}
        return True

    def listening(self, event: str) -> bool:
        """Whether ``emit(event, ...)`` would call anything now (in this thread): check it before building
        costly arguments."""
        try:
            callbacks = self._listeners[event]
        except KeyError:
            raise _unknown(event) from None
        if not callbacks:
            return False
        return not (self._local.depth and event in PER_JOB_EVENTS)

    def emit(self, event: str, /, **fields: Any) -> None:
        """Call each callback of ``event`` with ``**fields``. A callback that raises an ``Exception`` is
        logged (``queue_max_django.engine.events``) and the others still run; nothing propagates."""
        try:
            callbacks = self._listeners[event]
        except KeyError:
            raise _unknown(event) from None
        if not callbacks:
            return
        if self._local.depth and event in PER_JOB_EVENTS:
            return
        for callback in callbacks:
            try:
                callback(**fields)
            except Exception:
                logger.exception("the %s callback %r raised; the queue operation goes on", event, callback)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Silence the per-job events (all but ``ALERT``) in this thread while inside. Nestable."""
        local = self._local
        local.depth += 1
        try:
            yield
        finally:
            local.depth -= 1

    @property
    def batching(self) -> bool:
        """Whether this thread is inside ``batch()``."""
        return bool(self._local.depth)
