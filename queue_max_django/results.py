"""The result handle of one job: what ``.delay()`` returns. It mirrors ``django.tasks.TaskResult``.

A handle holds a job id and a snapshot of the job read from the store; ``refresh()`` reads it again, from any
process, until the store forgets the job (``RESULT_TTL`` after it finished). A job enqueued inside a
database transaction is "not committed yet" until that commits, on either store (commits.py): its handle's
``status`` is ``READY``, its ``repr`` says so, and ``refresh()`` raises ``JobNotCommitted``, except in the
thread whose transaction wrote it (PostgreSQL), which reads it through that transaction.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import datetime as dt
import enum
import time
from dataclasses import dataclass
from typing import Any

from .commits import COMMITTED, OPEN, Commit, find
from .conf import caller_connection, get_queue
from .encryption.jobs import opened_job
from .engine import CancelOutcome, Job, State


class JobStatus(enum.StrEnum):
    """The same strings as ``django.tasks.TaskResultStatus`` (so they compare equal to its members)."""

    READY = "READY"  # pending or scheduled (also between retries)
    RUNNING = "RUNNING"
    SUCCESSFUL = "SUCCESSFUL"
    FAILED = "FAILED"  # in the dead letters


STATUS_OF_STATE: dict[State, JobStatus] = {
    State.PENDING: JobStatus.READY,
    State.SCHEDULED: JobStatus.READY,
    State.RUNNING: JobStatus.RUNNING,
    State.DONE: JobStatus.SUCCESSFUL,
    State.FAILED: JobStatus.FAILED,
}
FINISHED = frozenset({JobStatus.SUCCESSFUL, JobStatus.FAILED})


class JobNotFound(LookupError):
    """The store holds no job with this id: it never existed, was cancelled, purged, or vacuumed."""


class JobMismatch(JobNotFound):
    """``Task.get_result(id)``: the job exists but is another task's (as ``django.tasks``'
    ``TaskResultMismatch``)."""


class JobNotCommitted(JobNotFound):
    """The job was enqueued inside a database transaction that has not committed yet: written in it (the
    PostgreSQL store in that database), or stored when it commits (``ENQUEUE_ON_COMMIT``). No other
    connection sees it until then; nothing is stored if it rolls back."""


class JobNotEnqueued(JobNotFound):
    """The handle's job waits for the database transaction to commit (``ENQUEUE_ON_COMMIT``): it has no id
    yet, and never will if the transaction rolls back."""


class LeaseExpired(Exception):
    """Not raised: what ``exception_class_path`` names for an attempt that failed because its worker stopped
    renewing the lease (killed, crashed or stalled); the engine stores the error type ``"LeaseExpired"``."""


class Corrupted(Exception):
    """Not raised: what ``exception_class_path`` names for a job moved to the dead letters because its stored
    data did not decode; the engine stores the error type ``"Corrupted"``."""


ENGINE_MARKERS: dict[str, type[Exception]] = {"LeaseExpired": LeaseExpired, "Corrupted": Corrupted}
"""The error types the engine records for failures that no exception of the task caused."""


def exception_class_path(error_type: str | None) -> str:
    """The full dotted path of a stored error type, the one rule of ``JobResult.errors`` and of the
    ``django.tasks`` backend's ``TaskError``: the engine stores a builtin's type bare (``"ValueError"``),
    which is ``"builtins.ValueError"`` here; a dotted type stays as stored; the engine's markers name the
    classes above; an error stored as text only (no type) is ``"builtins.Exception"``."""
    if not error_type:
        return "builtins.Exception"
    if "." in error_type:
        return error_type
    marker = ENGINE_MARKERS.get(error_type)
    if marker is not None:
        return f"{marker.__module__}.{marker.__qualname__}"
    found = getattr(builtins, error_type, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{error_type}"
    return error_type  # a bare name of no known class (not written by this version): shown as stored


@dataclass(frozen=True)
class JobError:
    """One recorded failure, as ``django.tasks.TaskError``: the exception's full class path (the rule of
    ``exception_class_path()``: ``"builtins.ValueError"``) and traceback. ``message`` is the error text the
    engine stored."""

    exception_class_path: str
    traceback: str
    message: str


def attempt_errors(job: Job) -> list[tuple[str, str, str]]:
    """(error type, traceback, message) of each failed attempt, oldest first; the traceback is only kept for
    the last one. Jobs stored before the engine kept a history give their last error only."""
    history = [(kind or "", "", message or "") for kind, message in job.errors]
    if job.error is not None:
        last = (job.error_type or "", job.traceback or "", job.error)
        if history and history[-1][0] == last[0] and history[-1][2] == last[2]:
            history[-1] = last
        elif not history:
            history = [last]
    return history


def attempt_workers(attempts: int, recorded: tuple[str, ...]) -> list[str]:
    """One id per attempt: the recorded ones (the last 10), "attempt-N" for attempts nobody recorded."""
    known = list(recorded)[-attempts:] if attempts else []
    return [f"attempt-{n}" for n in range(1, attempts - len(known) + 1)] + known


def _aware(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


class JobResult:
    """One job, as the store last said it was. ``refresh()`` reads it again; ``wait()`` until finished."""

    def __init__(
        self,
        job_id: int | None,
        job: Job | None = None,
        *,
        task_name: str | None = None,
        commit: Commit | None = None,
        deduplicated: bool = False,
    ) -> None:
        self._job_id = job_id
        # True: the enqueue stored nothing new, its unique key was held: this is the holder's handle
        # (skipped, or the holder took the new arguments: on_duplicate="replace").
        self.deduplicated = deduplicated  # None: stored when the transaction commits (see bind())
        self.task_name = task_name if task_name is not None or job is None else job.name
        self._loaded = None if job is None else opened_job(job)  # None: read from the store on first use
        self._commit = commit  # the transaction it was enqueued in (None: none, or committed before)

    @property
    def job_id(self) -> int:
        """The engine's job id; ``JobNotEnqueued`` while the job waits for a commit to be stored."""
        if self._job_id is None:
            what = f"this {self.task_name} job"
            if self._commit is None:
                raise JobNotEnqueued(f"{what} has no id")
            raise JobNotEnqueued(f"{self._commit.explain(what)}; it has no id until it is stored")
        return self._job_id

    @property
    def is_enqueued(self) -> bool:
        """False while the job waits for the transaction to commit to be stored (``ENQUEUE_ON_COMMIT``)."""
        return self._job_id is not None

    @property
    def is_committed(self) -> bool:
        """False while the transaction the job was enqueued in has not committed (on either store: the job
        is written in it, or stored when it commits), and after it rolled back. True otherwise."""
        return self._commit is None or self._commit.state == COMMITTED

    def bind(self, other: JobResult) -> None:
        """Become the handle of ``other``'s job (the on-commit enqueue calls this)."""
        self._job_id, self._loaded, self.deduplicated = other._job_id, other._loaded, other.deduplicated

    @property
    def _job(self) -> Job:
        if self._loaded is None:
            self.refresh()
            assert self._loaded is not None
        return self._loaded

    @classmethod
    def load(cls, job_id: int | str) -> JobResult:
        """The handle of a stored job by id (from any process). ``JobNotFound`` if the store has none
        (``JobNotCommitted`` when this process enqueued it in a transaction not committed yet)."""
        number = int(job_id)
        job = read_job(number)
        if job is None:
            commit = find(number)
            if commit is not None:
                raise JobNotCommitted(commit.explain(f"job {number}"))
            raise JobNotFound(f"no job with id {number} in the store (never existed, or already removed)")
        return cls(number, job)

    def __repr__(self) -> str:
        """Never raises (logging, debuggers and error trackers call it): what cannot be read is said."""
        try:
            where = "" if self._job_id is None else f"id={self._job_id} "
            commit = self._commit
            if commit is not None and commit.state not in (OPEN, COMMITTED):  # rolled back, or failed
                return f"<JobResult {where}task={self.task_name!r} ({commit.note()})>"
            note = " (not committed yet)" if commit is not None and commit.state == OPEN else ""
            try:
                status = f"status={self.status}"
            except Exception as exc:
                status = f"status=? ({type(exc).__name__}: {exc})"
            return f"<JobResult {where}task={self.task_name!r} {status}{note}>"
        except Exception as exc:  # pragma: no cover - a last resort
            return f"<JobResult {object.__repr__(self)} ({type(exc).__name__})>"

    def _label(self) -> str:
        return f"this {self.task_name} job" if self._job_id is None else f"job {self._job_id}"

    @property
    def id(self) -> str:
        return str(self.job_id)

    @property
    def job(self) -> Job:
        """The engine's snapshot this handle was last refreshed from."""
        return self._job

    @property
    def status(self) -> JobStatus:
        """READY (also while its transaction has not committed yet), RUNNING, SUCCESSFUL or FAILED."""
        if self._loaded is None and not self.is_committed:
            try:
                self.refresh()
            except JobNotCommitted:
                return JobStatus.READY
        return STATUS_OF_STATE[self._job.state]

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def return_value(self) -> Any:
        """What the task returned; ``ValueError`` unless the job is ``SUCCESSFUL`` (as Django's)."""
        if self.status is not JobStatus.SUCCESSFUL:
            raise ValueError(f"{self._label()} has no return value: its status is {self.status}")
        return self._job.result

    @property
    def errors(self) -> list[JobError]:
        """One ``JobError`` per failed attempt, oldest first (the engine keeps the last 10); only the last
        one carries the traceback. Empty when no attempt has failed."""
        return [
            JobError(exception_class_path(kind), traceback, message)
            for kind, traceback, message in attempt_errors(self._job)
        ]

    @property
    def worker_ids(self) -> list[str]:
        """Who ran each attempt (the worker process id ``queue_worker`` registers, else ``host:pid``)."""
        job = self._job
        return attempt_workers(job.attempts, job.worker_ids)

    @property
    def attempts(self) -> int:
        return self._job.attempts

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the job's metadata as last read (``refresh()``), without the keys reserved for the
        backend (``_`` first), as ``django.tasks.TaskResult.metadata``. ``{}`` when it has none."""
        return {key: copy.deepcopy(value) for key, value in self._job.metadata.items() if key[:1] != "_"}

    @property
    def raw_metadata(self) -> dict[str, Any]:
        """A copy of all of the job's metadata, reserved keys included."""
        return copy.deepcopy(self._job.metadata)

    @property
    def retries(self) -> int:
        return self._job.retries

    @property
    def enqueued_at(self) -> dt.datetime:
        enqueued = _aware(self._job.enqueued_at)
        assert enqueued is not None
        return enqueued

    @property
    def started_at(self) -> dt.datetime | None:
        return _aware(self._job.started_at)

    @property
    def finished_at(self) -> dt.datetime | None:
        return _aware(self._job.finished_at)

    @property
    def last_attempted_at(self) -> dt.datetime | None:
        return self.started_at

    def cancel(self, *, by: str | None = None) -> CancelOutcome:
        """Cancel the job, whatever its state. -> what happened (``CancelOutcome``, a str). ``by``: who asks,
        or why (a user name, a reason: 200 characters kept), noted with the time in a running job's metadata
        (``cancelled_by``, ``cancelled_at``):

        - ``"removed"``: it was waiting or scheduled; it is gone and never runs;
        - ``"requested"``: it is running; its worker sees the request at its next heartbeat and stops it (the
          task stops by itself when it checks, else its worker process is ended after the worker's cancel
          grace period). It then fails with ``Cancelled``: ``status`` is ``FAILED`` (after ``refresh()``),
          and it is kept with the dead letters, not retried;
        - ``"finished"``: it already ended (successful or failed): nothing to cancel, nothing changed;
        - ``"missing"``: the store no longer has it (purged, vacuumed, or cancelled before it ran).

        The handle's snapshot is not read again: call ``refresh()`` to see the job's state."""
        return get_queue().request_cancel(self.job_id, by=by)

    @property
    def cancelled(self) -> bool:
        """Did the job end because it was cancelled while it ran (``status`` ``FAILED``, error ``Cancelled``)?
        As of the last ``refresh()``."""
        return self._job.cancelled

    @property
    def cancelled_by(self) -> str | None:
        """Who asked to cancel the job (``cancel(by=)``, the admin user, ``"queue_cancel command"``); None
        if it was not cancelled or nobody was named. As of the last ``refresh()``."""
        note = self._job.cancel_note
        return note.by if note is not None and self._job.cancelled else None

    @property
    def cancelled_at(self) -> dt.datetime | None:
        """When the cancel was asked for (aware, UTC); None if the job was not cancelled."""
        note = self._job.cancel_note
        return _aware(note.at) if note is not None and self._job.cancelled else None

    @property
    def cancel_requested(self) -> bool:
        """Is the job running with a cancel requested (``cancel()`` said ``"requested"``), its worker yet to
        stop it? Read from the store now, with the state as of the last ``refresh()``."""
        return self.status is JobStatus.RUNNING and get_queue().cancel_requested(self.job_id)

    async def acancel(self, *, by: str | None = None) -> CancelOutcome:
        """``cancel()`` from async code, off the event loop."""
        return await asyncio.to_thread(self.cancel, by=by)

    def refresh(self) -> None:
        """Read the job again from the store. ``JobNotFound`` once the store no longer has it;
        ``JobNotCommitted`` while the transaction it was enqueued in has not committed (in the thread of
        that transaction, a job written in it is read through it: PostgreSQL)."""
        commit = self._commit
        if commit is not None and self._job_id is None:
            error = JobNotCommitted if commit.state == OPEN else JobNotFound
            raise error(commit.explain(self._label()))
        self._take(read_job(self.job_id))

    def _take(self, job: Job | None) -> None:
        if job is None:
            commit = self._commit
            if commit is not None and commit.state != COMMITTED:
                error = JobNotCommitted if commit.state == OPEN else JobNotFound
                raise error(commit.explain(self._label()))
            raise JobNotFound(f"job {self.id} is no longer in the store (cancelled, purged or vacuumed)")
        self._loaded = opened_job(job)  # an encrypted job's data opened (encryption/jobs.py)
        if self.task_name is None:
            self.task_name = job.name

    async def arefresh(self) -> None:
        """``refresh()`` from async code: the store is read on a thread of the event loop's default executor
        (``asyncio.to_thread``, what the engine's ``AsyncQueue`` does), never on the loop itself."""
        self._take(await asyncio.to_thread(_read, self.job_id))

    @classmethod
    async def aload(cls, job_id: int | str) -> JobResult:
        """``load()`` from async code, without blocking the event loop."""
        return await asyncio.to_thread(cls.load, job_id)

    async def await_result(self, timeout: float | None = None, *, poll_interval: float = 0.01) -> JobResult:
        """``wait()`` from async code: ``arefresh()`` until the job is ``SUCCESSFUL`` or ``FAILED``, sleeping
        with ``asyncio.sleep`` in between, so that the event loop runs other work all along; ``TimeoutError``
        after ``timeout`` seconds (None: no limit). -> self (then read ``return_value``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = min(poll_interval, 0.001)
        while True:
            await self.arefresh()
            if self.is_finished:
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} did not finish within {timeout} s (status {self.status})")
            await asyncio.sleep(interval)
            interval = min(interval * 2, poll_interval)

    def wait(self, timeout: float | None = None, *, poll_interval: float = 0.01) -> JobResult:
        """Refresh until the job is ``SUCCESSFUL`` or ``FAILED``; ``TimeoutError`` after ``timeout`` seconds
        (None: no limit). -> self."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = min(poll_interval, 0.001)
        while True:
            self.refresh()
            if self.is_finished:
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} did not finish within {timeout} s (status {self.status})")
            time.sleep(interval)
            interval = min(interval * 2, poll_interval)


def read_job(job_id: int) -> Job | None:
    """Job ``job_id`` as the store has it, or None. A job that this thread's open transaction wrote (the
    PostgreSQL store in that database) is read through that transaction, the only one that sees it."""
    queue = get_queue()
    job = queue.job(job_id)
    if job is None:
        joined = caller_connection()
        if joined is not None:
            with queue.on_connection(joined):
                job = queue.job(job_id)
    return job


def _read(job_id: int) -> Job | None:
    return get_queue().job(job_id)  # opens this process's queue on first use: off the loop too
