"""``current_job()``: the job this code runs in, as its task sees it: id, task name, attempt, and its
metadata, which the task may change and save (progress: ``{"done": 40, "of": 100}``).

The runner (runner.py for ``@task`` jobs, backend.py for ``django.tasks`` ones) makes a ``RunningJob`` for
each job it runs, which makes the job's ``JobContext`` when the task first asks for it, and makes it current
for the task's call (a ``contextvars`` variable: each worker thread,
and each coroutine task started from it, sees its own job). Outside a running job ``current_job()`` raises
``NoCurrentJob``: calling a task function directly runs no job.

Metadata follows Django's Tasks rules (``django.tasks.TaskContext``): keys that start with ``_`` are
reserved for the backend and libraries. ``JobContext.metadata`` is a mutable copy without them; saving
keeps the stored reserved keys as they are and drops any ``_`` key the task set. The runner saves metadata
the task changed when the task returns or raises, before the job's outcome is stored (while the worker
still holds the job); ``save_metadata()`` saves it at once, e.g. for progress that other processes read
with ``JobResult.metadata``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
from collections.abc import Iterator
from typing import Any

from .encryption.jobs import open_metadata, seal_saved_metadata
from .engine import Cancelled, InvalidMetadata, QueueCorrupted, Record
from .engine.metadata import RESERVED_PREFIX
from .running import cancels

__all__ = ["JobContext", "NoCurrentJob", "current_job", "user_metadata"]


class NoCurrentJob(RuntimeError):
    """``current_job()`` was called outside a running job: only code that a worker, the immediate mode or
    ``run_queued()`` runs as a job's task has one (a task function called directly runs no job)."""


def user_metadata(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``raw`` a task sees and sets: all but the reserved ones (``_`` first). A key that is not
    a str (a task's ``metadata[1] = ...``) is kept, for the save to refuse it (``InvalidMetadata``)."""
    return {
        key: value
        for key, value in raw.items()
        if not (isinstance(key, str) and key.startswith(RESERVED_PREFIX))
    }


class JobContext:
    """The running job, for its task: ``current_job()`` returns it. ``metadata`` is a mutable copy of the
    job's metadata without its reserved keys; ``save_metadata()`` stores it now."""

    def __init__(self, record: Record, task_name: str | None) -> None:
        self._record = record
        self._raw: dict[str, Any] = open_metadata(record.metadata)  # as stored (opened), reserved keys too
        self.task_name = task_name
        self.metadata: dict[str, Any] = copy.deepcopy(user_metadata(self._raw))

    def __repr__(self) -> str:
        return f"<JobContext id={self.id} task={self.task_name!r} attempt={self.attempt}>"

    @property
    def id(self) -> str:
        """The job's id as ``JobResult.id`` has it (a str)."""
        return str(self._record.job_id)

    @property
    def job_id(self) -> int:
        return self._record.job_id

    @property
    def attempt(self) -> int:
        """This attempt's number: 1 the first time, 2 on the first retry, ..."""
        return self._record.attempts

    @property
    def queue(self) -> str:
        return self._record.queue

    @property
    def cancelled(self) -> bool:
        """Was a cancel of this job requested (``JobResult.cancel()``, ``queue_cancel``, the admin)? The
        worker learns it at its next heartbeat; a task that checks stops where it is safe to, by returning
        or by raising ``Cancelled`` (either way a dead letter with ``Cancelled``, not retried). Always False
        outside a worker (the immediate mode, ``run_queued()``)."""
        return cancels.is_requested(self._record.job_id)

    @property
    def raw_metadata(self) -> dict[str, Any]:
        """A copy of the metadata as last stored, reserved keys included."""
        return copy.deepcopy(self._raw)

    @property
    def metadata_modified(self) -> bool:
        """Has ``metadata`` changed since it was last stored?"""
        return self.metadata != user_metadata(self._raw)

    def save_metadata(self) -> None:
        """Store ``metadata`` now (the stored reserved keys kept; ``_`` keys set here dropped).
        ``InvalidMetadata`` (nothing stored) for metadata that is not JSON or over 64 KiB;
        ``QueueCorrupted`` when this worker no longer holds the job (its lease expired). Then ``Cancelled``
        when a cancel of the job was requested (``cancelled``): the progress saved, the task stops there
        unless it catches it."""
        reserved = {key: value for key, value in self._raw.items() if key.startswith(RESERVED_PREFIX)}
        self.save_raw({**reserved, **user_metadata(self.metadata)})
        if self.cancelled:
            raise Cancelled(f"job {self._record.job_id} ({self.task_name}) was cancelled")

    async def asave_metadata(self) -> None:
        """``save_metadata()`` from async code, on a thread: the event loop never waits for the store."""
        await asyncio.to_thread(self.save_metadata)

    def save_raw(self, raw: dict[str, Any]) -> None:
        """Store ``raw`` as the job's whole metadata, reserved keys too (the django.tasks backend's
        ``save_metadata``, which Django's ``TaskContext`` calls with them). ``metadata`` (the same dict)
        then holds what was stored, as it reads back (tuples as lists)."""
        self._record.save_metadata(seal_saved_metadata(self._record, raw))  # an encrypted job's: sealed
        self._raw = open_metadata(self._record.metadata)
        self.metadata.clear()
        self.metadata.update(copy.deepcopy(user_metadata(self._raw)))

    def save_at_end(self) -> InvalidMetadata | None:
        """The runner's save when the task returned or raised: ``metadata`` if it changed. -> the error if
        it cannot be stored (nothing is). A lost lease is left to the outcome's own store call to report."""
        if not self.metadata_modified:
            return None
        try:
            self.save_metadata()
        except InvalidMetadata as exc:
            return exc
        except QueueCorrupted:
            pass
        return None


class RunningJob:
    """What is current while a job's task runs: its record and task name, and its ``JobContext`` once
    something asked for it (``current_job()``). Most tasks never ask: the runner then makes no
    ``JobContext`` (no copy of the metadata) and has nothing to save at the end."""

    __slots__ = ("context", "record", "task_name")

    def __init__(self, record: Record, task_name: str | None) -> None:
        self.record = record
        self.task_name = task_name
        self.context: JobContext | None = None

    def job_context(self) -> JobContext:
        """The job's ``JobContext``, made on the first call."""
        context = self.context
        if context is None:
            context = self.context = JobContext(self.record, self.task_name)
        return context

    def save_at_end(self) -> InvalidMetadata | None:
        """``JobContext.save_at_end`` of the context, if one was made (else nothing can have changed)."""
        context = self.context
        return None if context is None else context.save_at_end()


_current: contextvars.ContextVar[RunningJob | None] = contextvars.ContextVar("queue_max_job", default=None)


def current_job() -> JobContext:
    """The job this code runs in. ``NoCurrentJob`` outside one."""
    job = _current.get()
    if job is None:
        raise NoCurrentJob(
            "current_job() is only available inside a running job: in a task run by queue_worker, the "
            "immediate mode (QUEUE_MAX['IMMEDIATE']) or testing.run_queued(), not in a direct call"
        )
    return job.job_context()


def running_context(job_id: int) -> JobContext | None:
    """The current context if it is job ``job_id``'s (the django.tasks backend's ``save_metadata``)."""
    job = _current.get()
    return job.job_context() if job is not None and job.record.job_id == job_id else None


def enter(job: RunningJob) -> contextvars.Token[RunningJob | None]:
    """Make ``job`` current (the runner's fast path; ``leave`` with the token when the task returned)."""
    return _current.set(job)


def leave(token: contextvars.Token[RunningJob | None]) -> None:
    _current.reset(token)


@contextlib.contextmanager
def running(record: Record, task_name: str | None) -> Iterator[JobContext]:
    """``record``'s ``JobContext``, current while the block runs (the runner calls the task inside)."""
    job = RunningJob(record, task_name)
    context = job.job_context()
    token = _current.set(job)
    try:
        yield context
    finally:
        _current.reset(token)
