"""Django signals sent from the engine's events, and the per-process task counters of ``Task.get_stats()``.

``conf.get_queue()`` connects this module's callbacks to the events of the process's engine ``Queue`` when
it builds it (``connect(queue)``); the engine never imports Django. Every job signal is sent with ``sender`` =
the job's name (for a ``@task``, the task name; None for an engine job put without a name) and the keyword
arguments ``job_id``, ``queue``, ``name`` plus the event's own fields (docs/reference/signals.md).

A job put in the caller's transaction (the PostgreSQL store in the ``DATABASE`` alias, inside
``transaction.atomic()`` on it) exists only once that transaction commits: its ``job_enqueued``, and its
count in ``Task.get_stats()``, wait for the commit (``transaction.on_commit``), and a rollback sends none.
The puts that join the caller's transaction run inside ``in_callers_transaction(alias)``.

A receiver that raises is logged (logger ``queue_max_django.signals``, naming the receiver) and never breaks
the queue operation nor the other receivers (``send_robust``). With no receiver connected a signal costs a
``has_listeners()`` call; the task counters are kept whether anyone listens or not.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from .engine import (
    ALERT,
    JOB_CANCELLED,
    JOB_ENQUEUED,
    JOB_FAILED,
    JOB_LOST,
    JOB_RETRIED,
    JOB_STARTED,
    JOB_SUCCEEDED,
    Queue,
)
from .observability.lostjobs import log_lost

__all__ = [
    "job_cancelled",
    "job_enqueued",
    "job_failed",
    "job_retried",
    "job_started",
    "job_succeeded",
    "queue_alert",
    "reset_stats",
    "task_stats",
    "workflow_finished",
]

logger = logging.getLogger("queue_max_django.signals")

job_enqueued = Signal()  # job_id, queue, name
job_started = Signal()  # job_id, queue, name, attempt
job_succeeded = Signal()  # job_id, queue, name, result
job_retried = Signal()  # job_id, queue, name, error, state
job_failed = Signal()  # job_id, queue, name, error, state (the job is a dead letter)
job_cancelled = Signal()  # job_id, queue, name, error, state (cancelled while it ran: not a failure)
queue_alert = Signal()  # kind, pending, threshold (sender None)
workflow_finished = Signal()  # workflow_id, status (sender None): succeeded, failed or cancelled

_NAMES: dict[Signal, str] = {
    job_enqueued: "job_enqueued",
    job_started: "job_started",
    job_succeeded: "job_succeeded",
    job_retried: "job_retried",
    job_failed: "job_failed",
    job_cancelled: "job_cancelled",
    queue_alert: "queue_alert",
    workflow_finished: "workflow_finished",
}

# The alias whose transaction the puts being made in this context join (``in_callers_transaction``)
_joined_alias: contextvars.ContextVar[str | None] = contextvars.ContextVar("queue_max_joined", default=None)

MAX_TIMED_JOBS = 10_000  # started jobs whose start time is kept to measure their run (oldest forgotten first)


def _label(receiver: Any) -> str:
    module = getattr(receiver, "__module__", None)
    qualname = getattr(receiver, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(receiver)


def send(signal: Signal, sender: str | None, **kwargs: Any) -> None:
    """``signal.send_robust(sender, **kwargs)`` if anyone listens; each receiver that raised is logged.
    ``sender`` is interned, as ``Task.name`` is: Django matches a receiver's ``sender=`` by identity, so
    ``connect(receiver, sender=my_task.name)`` gets that task's jobs only."""
    if not signal.receivers:  # the common case, checked first: nobody connected at all
        return
    if sender is not None:
        sender = sys.intern(sender)
    if not signal.has_listeners(sender):
        return
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "the %s receiver %s raised; the job goes on",
                _NAMES.get(signal, "queue_max_django"),
                _label(receiver),
                exc_info=(type(response), response, response.__traceback__),
            )


class TaskStats:
    """Counts per job name of what this process saw the engine do, and the monotonic run times between a
    job's start and its outcome (success, retry or failure) in this process. Thread-safe."""

    def __init__(self, max_timed: int = MAX_TIMED_JOBS) -> None:
        self._lock = threading.Lock()
        self._max_timed = max_timed
        self._counts: dict[str, dict[str, int]] = {}
        self._run_time: dict[str, tuple[float, int]] = {}  # name -> (total seconds, runs timed)
        self._started: dict[int, float] = {}  # job_id -> monotonic start, oldest first

    def _count(self, name: str, key: str, many: int = 1) -> None:
        counts = self._counts.get(name)
        if counts is None:
            counts = self._counts[name] = {"enqueued": 0, "succeeded": 0, "failed": 0, "retried": 0,
                                           "cancelled": 0}  # fmt: skip
        counts[key] += many

    def enqueued(self, name: str | None) -> None:
        if name is not None:
            with self._lock:
                self._count(name, "enqueued")

    def started(self, job_id: int) -> None:
        started = self._started
        with self._lock:
            started.pop(job_id, None)  # a job started again goes to the end (the newest)
            started[job_id] = time.monotonic()
            if len(started) > self._max_timed:
                del started[next(iter(started))]  # dicts keep insertion order: the oldest start

    def finished(self, job_id: int, name: str | None, key: str) -> None:
        now = time.monotonic()
        with self._lock:
            start = self._started.pop(job_id, None)
            if name is not None:
                self._ran(name, key, None if start is None else now - start)

    def ran(self, name: str, key: str | None, seconds: float) -> None:
        """Count an attempt measured by its runner (the worker, when no job signal has a receiver): its
        outcome ``key`` unless the outcome's event counts it, and its run time."""
        with self._lock:
            self._ran(name, key, seconds)

    def ran_many(self, runs: dict[tuple[str, str | None], list[float]]) -> None:
        """``ran`` of several attempts at once: ``{(name, key): [attempts, total seconds]}``."""
        with self._lock:
            for (name, key), (attempts, seconds) in runs.items():
                many = int(attempts)
                if key is not None:
                    self._count(name, key, many)
                total, timed = self._run_time.get(name, (0.0, 0))
                self._run_time[name] = (total + seconds, timed + many)

    def _ran(self, name: str, key: str | None, seconds: float | None) -> None:
        if key is not None:
            self._count(name, key)
        if seconds is not None:
            total, runs = self._run_time.get(name, (0.0, 0))
            self._run_time[name] = (total + seconds, runs + 1)

    def get(self, name: str) -> dict[str, Any]:
        with self._lock:
            counts = dict(
                self._counts.get(
                    name, {"enqueued": 0, "succeeded": 0, "failed": 0, "retried": 0, "cancelled": 0}
                )
            )
            total, runs = self._run_time.get(name, (0.0, 0))
        return {**counts, "mean_run_time": total / runs if runs else None}

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self._run_time.clear()
            self._started.clear()


_stats = TaskStats()


def task_stats(name: str) -> dict[str, Any]:
    """This process's counters of the jobs named ``name`` (``Task.get_stats()``)."""
    return _stats.get(name)


def record_run(name: str | None, seconds: float, outcome: str | None = None) -> None:
    """A runner that silenced the per-job events (``job_signals_connected()`` was False) reports each
    attempt here: its run time, and its ``outcome`` ("succeeded", ...) when no event counted it."""
    if name is not None:
        _stats.ran(name, outcome, seconds)


def record_runs(runs: dict[tuple[str, str | None], list[float]]) -> None:
    """``record_run`` of several attempts at once (a worker thread's batch): ``{(name, outcome): [attempts,
    total seconds]}``; ``runs`` is emptied."""
    if runs:
        _stats.ran_many(runs)
        runs.clear()


def job_signals_connected() -> bool:
    """Whether any receiver listens to a job's start or outcome. When none does, the worker skips the
    engine's per-job events for claims and acknowledgements (two callbacks a job) and reports to
    ``record_run`` itself: ``Task.get_stats()`` stays the same."""
    signals = (job_started, job_succeeded, job_retried, job_failed, job_cancelled)
    return any(signal.receivers for signal in signals)


def reset_stats() -> None:
    """Forget every task's counters in this process (for tests)."""
    _stats.clear()


# ---------------------------------------------------------------------- engine callbacks


def in_callers_transaction(alias: str | None) -> contextlib.AbstractContextManager[None]:
    """Around a put that joins the caller's transaction on ``alias`` (None: one that does not): the jobs
    it stores are announced when that transaction commits, not before. (A put of its own outside any such
    block, the common case, costs no context manager of its own.)"""
    if alias is None and _joined_alias.get() is None:
        return _OUTSIDE
    return _joining(alias)


_OUTSIDE = contextlib.nullcontext()


@contextlib.contextmanager
def _joining(alias: str | None) -> Iterator[None]:
    token = _joined_alias.set(alias)
    try:
        yield
    finally:
        _joined_alias.reset(token)


def _on_enqueued(*, job_id: int, queue: str, name: str | None) -> None:
    alias = _joined_alias.get()
    if alias is None:
        _announce_enqueued(job_id, queue, name)
    else:  # the job is not stored until the caller's transaction commits; a rollback leaves none
        transaction.on_commit(functools.partial(_announce_enqueued, job_id, queue, name), using=alias)


def _announce_enqueued(job_id: int, queue: str, name: str | None) -> None:
    _stats.enqueued(name)
    send(job_enqueued, name, job_id=job_id, queue=queue, name=name)


def _on_started(*, job_id: int, queue: str, name: str | None, attempt: int) -> None:
    _stats.started(job_id)
    send(job_started, name, job_id=job_id, queue=queue, name=name, attempt=attempt)


def _on_succeeded(*, job_id: int, queue: str, name: str | None, result: Any) -> None:
    _stats.finished(job_id, name, "succeeded")
    send(job_succeeded, name, job_id=job_id, queue=queue, name=name, result=result)


def _on_retried(*, job_id: int, queue: str, name: str | None, error: str, state: Any) -> None:
    _stats.finished(job_id, name, "retried")
    send(job_retried, name, job_id=job_id, queue=queue, name=name, error=error, state=state)


def _on_failed(*, job_id: int, queue: str, name: str | None, error: str, state: Any) -> None:
    _stats.finished(job_id, name, "failed")
    send(job_failed, name, job_id=job_id, queue=queue, name=name, error=error, state=state)


def _on_cancelled(*, job_id: int, queue: str, name: str | None, error: str, state: Any) -> None:
    _stats.finished(job_id, name, "cancelled")
    send(job_cancelled, name, job_id=job_id, queue=queue, name=name, error=error, state=state)


def _on_alert(*, type: str, pending: int, threshold: int, **fields: Any) -> None:
    send(queue_alert, None, kind=type, pending=pending, threshold=threshold)


CALLBACKS = (
    (JOB_ENQUEUED, _on_enqueued),
    (JOB_STARTED, _on_started),
    (JOB_SUCCEEDED, _on_succeeded),
    (JOB_RETRIED, _on_retried),
    (JOB_FAILED, _on_failed),
    (JOB_CANCELLED, _on_cancelled),
    (JOB_LOST, log_lost),  # a log line, no signal: job_retried or job_failed went out for it already
    (ALERT, _on_alert),
)


def connect(queue: Queue) -> None:
    """Turn ``queue``'s engine events into this module's signals and counters (``conf.get_queue()`` does
    it for the process's queue). Connecting twice changes nothing."""
    for event, callback in CALLBACKS:
        queue.events.on(event, callback)
