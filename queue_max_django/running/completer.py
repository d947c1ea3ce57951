"""How a claimed job ends: its runner judges the attempt into a ``Verdict``, and one ``Completer`` writes it.

The shape of river's ``jobexecutor`` and ``jobcompleter``. A runner (runner.py for ``@task`` jobs,
backend.py for django.tasks jobs) calls the task and builds a verdict: done with its result (packed once,
here, when the task returns), a failed attempt to retry, a dead letter, released (given back unrun), or
cancelled. It hands the verdict to the completer it was given, which writes it to the store through the
``Record`` (``ack``, ``nack``, ``release``) and says what became of the job (``Outcome``). A runner never
writes to the store itself and never knows whether a success is acknowledged now or in a batch.

Two completers, chosen in one place each: ``Completer`` (this module's; ``INLINE``) writes every verdict at
once: the immediate mode (``runner.run_now``, ``backend.QueueMaxBackend``), ``testing.run_queued()`` and a
direct ``runner.run_job``. The worker gives each of its threads a ``worker.acks.Batch``, which holds the
successes and writes them together (``Queue.ack_many``), from the worker thread or from the process's
``AckLine`` thread (``Batch.flush`` chooses); that one also applies the cancel rules, since only a worker
learns of cancel requests (``worker/cancels.py``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..encryption.jobs import sealed_error
from ..engine import QueueCorrupted, Record, State
from ..engine.codec import Packed
from ..engine.sealing import is_sealed
from ..engine.workflows import WORKFLOW_KEY
from .outcome import UNSTORED, Outcome, OutcomeNotStored
from .workflow_ends import node_ended

__all__ = ["INLINE", "Completer", "Kind", "Verdict"]

logger = logging.getLogger("queue_max_django.runner")


class Kind(enum.Enum):
    """What an attempt of a job came to."""

    DONE = "done"  # the task returned: acknowledged with its result
    RETRY = "retry"  # it failed: retried later (``delay``, else the backoff) while retries are left
    DEAD = "dead"  # it failed for good: a dead letter, not retried
    RELEASED = "released"  # given back unrun (not counted as an attempt); ``delay``: scheduled that far
    CANCELLED = "cancelled"  # a dead letter with ``Cancelled``: an outcome someone asked for, not a failure


@dataclass(slots=True)  # not frozen: built once per job on the worker's hot path (a frozen one costs 5x)
class Verdict:
    """An attempt's end as its runner judged it, before anything is written. Built with the class methods,
    and not changed after (a completer that decides otherwise builds another)."""

    kind: Kind
    result: Packed | None = None  # DONE: the return value with its stored bytes (None: it returned None)
    error: BaseException | str | None = None  # RETRY, DEAD, CANCELLED; RELEASED: why, for the Outcome
    delay: float | None = None  # RETRY: instead of the backoff; RELEASED: scheduled that many seconds
    reason: str | None = None  # why an error was judged as it was (the Outcome's)
    at_once: bool = False  # DONE: written now by every completer (the runner acts on it right after)

    @classmethod
    def done(cls, result: Packed | None, *, at_once: bool = False) -> Verdict:
        if result is None and not at_once:
            return _DONE_NONE  # the no-result success, one for all (a verdict is never changed)
        return cls(Kind.DONE, result=result, at_once=at_once)

    @classmethod
    def failed(
        cls,
        error: BaseException | str,
        *,
        delay: float | None = None,
        permanent: bool = False,
        reason: str | None = None,
    ) -> Verdict:
        """A failed attempt: a dead letter when ``permanent``, else retried while it has retries left."""
        return cls(Kind.DEAD if permanent else Kind.RETRY, error=error, delay=delay, reason=reason)

    @classmethod
    def released(
        cls, *, delay: float | None = None, error: BaseException | None = None, reason: str | None = None
    ) -> Verdict:
        return cls(Kind.RELEASED, error=error, delay=delay, reason=reason)

    @classmethod
    def cancelled(cls, error: BaseException) -> Verdict:
        return cls(Kind.CANCELLED, error=error, reason="cancelled")


_DONE_NONE = Verdict(Kind.DONE)

Runner = Callable[..., Outcome]  # runner(record, completer, **options): runs the job, -> completer.write(...)


class Completer:
    """Writes verdicts: every one at once, in the calling thread (the inline completer, ``INLINE``).

    ``run`` is the one path every claimed job takes to its end, for ``@task`` and django.tasks jobs alike:
    the runner, then the last resort should that raise. Every end of a job this process writes goes
    through ``write`` (the runners' verdicts, the last resort, and the worker's own: a timeout, a cancel
    past its grace, a release at shutdown), and each job that ended is then passed to ``_ended``, once,
    after the store took its end: by ``_write`` here, and for the successes a batching completer holds, by
    its batch write (``worker.acks.write_successes``, through ``_ended_done``). What must happen when a job
    ends, whatever ended it and in every mode (a workflow releasing the jobs that wait for this one), goes
    in ``_ended`` (and ``_ended_done`` then calls it for each job of the batch).
    """

    def run(self, record: Record, runner: Runner, /, **options: Any) -> Outcome:
        """``runner(record, self, **options)``, which runs the claimed job ``record`` and hands its verdict
        to ``write``, and the job ended even when that raised: it is then failed for good with
        ``OutcomeNotStored`` (the last resort), so that it is never left running, held by a process that
        renews its lease. Passed on: a ``QueueCorrupted`` (this process no longer holds the job: its lease
        expired, another may run it), what is raised once the job ended (``record.finished``), what is not
        an ``Exception`` (a ``KeyboardInterrupt``), and an error of the last resort's own store call (the
        store fails: the caller gives the job up, and its lease brings it back, an attempt counted)."""
        first = self._before(record)
        if first is not None:
            return first
        try:
            return runner(record, self, **options)
        except QueueCorrupted:
            raise
        except Exception as exc:
            if record.finished:
                raise
            kind = type(exc).__qualname__
            shown = None if is_sealed(record.payload) else exc  # an encrypted job's: its type only
            logger.error("job %s (%s): its outcome could not be stored (%s); it is failed for good instead",
                         record.job_id, record.name, kind, exc_info=shown)  # fmt: skip
            error = OutcomeNotStored(UNSTORED.format(kind=kind))
            return self._write(record, Verdict.failed(error, permanent=True, reason=_UNSTORED_REASON))

    def write(self, record: Record, verdict: Verdict) -> Outcome:
        """Write ``verdict`` of the job ``record`` holds. -> what became of the job."""
        return self._write(record, verdict)

    def _before(self, record: Record) -> Outcome | None:
        """Before the runner: the Outcome of a job ended without running it, or None to run it."""
        return None

    def _write(self, record: Record, verdict: Verdict) -> Outcome:
        """The store call of ``verdict``: one ``Record`` operation. -> the Outcome, with the new state."""
        kind = verdict.kind
        if kind is Kind.DONE:
            result = verdict.result
            record.ack(result)
            self._ended(record, State.DONE)
            return Outcome.done(record.job_id, None if result is None else result.value)
        if kind is Kind.RELEASED:
            record.release(delay=verdict.delay)
            state = State.SCHEDULED if verdict.delay else State.PENDING
            return Outcome(record.job_id, state, error=verdict.error, reason=verdict.reason)
        error = verdict.error if kind is Kind.CANCELLED else sealed_error(record, verdict.error)  # encrypted
        state = record.nack(error, delay=verdict.delay, permanent=kind is not Kind.RETRY)
        self._ended(record, state)
        return Outcome(record.job_id, state, error=verdict.error, reason=verdict.reason)

    def _ended(self, record: Record, state: State) -> None:
        """The job of ``record`` ended this attempt in ``state`` (done, scheduled for a retry, or failed for
        good), and the store has it: the one place for what follows a job's end. A workflow's node: the
        store released its children in the transaction that ended it; here, the workflow's end is
        signalled (workflow_ends.py)."""
        if WORKFLOW_KEY in record.metadata:
            node_ended(record, state)

    def _ended_done(self, records: list[Record]) -> None:
        """``_ended(record, State.DONE)`` of each of ``records``, acknowledged together by a batching
        completer (a worker's hot path: one dict lookup per job that is no workflow's node)."""
        for record in records:
            if WORKFLOW_KEY in record.metadata:
                node_ended(record, State.DONE)


_UNSTORED_REASON = "its outcome could not be stored"

INLINE = Completer()
"""The inline completer: stateless, shared."""
