"""Run ONE claimed job: look its task up by name in this process's registry, call it, record the outcome.

The worker, the immediate mode and the in-process test helper (testing.py) all run jobs through
``run_job``. Nothing is ever imported from a job's data. A job whose name no task of this process has waits:
during a rolling deploy the web side may enqueue a new task before every worker has the new code, so the job
is given back (not counted as an attempt) and tried again later, for ``QUEUE_MAX["UNKNOWN_TASK_GRACE"]``
seconds after it was enqueued; then it is a dead letter with the error ``TaskNotRegistered``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from ..conf import get_config
from ..context import RunningJob, enter, leave
from ..encryption.jobs import corrupted, open_payload, pack_result
from ..encryption.keys import EncryptionNotConfigured
from ..engine import (
    InvalidMetadata,
    PayloadNotSerializable,
    PayloadTooLarge,
    Queue,
    Record,
    backoff_delay,
    classify,
    is_interrupt,
)
from ..engine.codec import Packed
from ..engine.sealing import SealBroken, is_sealed
from ..observability import tracing
from .completer import INLINE, Completer, Verdict
from .outcome import DJANGO_TASK_KEY, Outcome, _run_coroutine, claim_now
from .registry import RegisteredTask, registry
from .workflow_inputs import AFTER_KEY, ParentResultsMissing, with_parents

__all__ = [
    "TaskNotRegistered",
    "call_task",
    "run_job",
    "run_now",
    "unknown_task_message",
    "unknown_task_wait",
]

# A job of a task this process does not have is tried again after waiting as long as it has waited since it
# was enqueued (so the waits double), at least UNKNOWN_TASK_WAIT_MIN and at most UNKNOWN_TASK_WAIT_MAX
# seconds, and never past the end of its grace period (QUEUE_MAX["UNKNOWN_TASK_GRACE"]).
UNKNOWN_TASK_WAIT_MIN = 1.0
UNKNOWN_TASK_WAIT_MAX = 300.0


class TaskNotRegistered(LookupError):
    """A job names a task that no module imported by this process registered. Most often the worker runs
    older code than the process that enqueued the job (a deploy updated the web side first): restart or
    update your workers. Otherwise the task was renamed or removed since the job was enqueued (give it
    ``name="the.old.name"`` while such jobs drain), or the module that defines it is not imported (an
    installed app's ``tasks.py`` is). The job waits ``QUEUE_MAX["UNKNOWN_TASK_GRACE"]`` seconds for a worker
    that has the task, then it is a dead letter with this error."""


def unknown_task_message(name: str | None) -> str:
    return (
        f"no task named {name!r} is registered in this process: is the module that defines it imported "
        f"(an installed app's tasks.py), and is the task name unchanged since the job was enqueued? If the "
        f"code that enqueued it is newer than this worker's, restart or update your workers."
    )


def unknown_task_wait(age: float, grace: float) -> float | None:
    """Seconds that a job of a task this process does not have waits before it is tried again, when it was
    enqueued ``age`` seconds ago and the grace period (``UNKNOWN_TASK_GRACE``) is ``grace`` seconds: ``age``
    (so the waits double), within UNKNOWN_TASK_WAIT_MIN..UNKNOWN_TASK_WAIT_MAX, and never past the end of the
    grace period. None once the grace period is over (at once when it is 0): the job is a dead letter."""
    left = grace - age
    if left <= 0:
        return None
    return min(max(age, UNKNOWN_TASK_WAIT_MIN), UNKNOWN_TASK_WAIT_MAX, left)


_CALL_KEYS = frozenset(("args", "kwargs"))


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]] | None:
    if type(payload) is not dict or not payload.keys() <= _CALL_KEYS:
        return None
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if type(args) is not list or type(kwargs) is not dict:
        return None
    if kwargs and not all(isinstance(key, str) for key in kwargs):
        return None
    return args, kwargs


def call_task(task: RegisteredTask, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call the task's function (not its direct-call retries); a coroutine function runs to completion."""
    result = task.func(*args, **kwargs)
    if result is not None and inspect.iscoroutine(result):
        result = _run_coroutine(result)
    return result


def run_job(
    record: Record,
    *,
    retry_delay: float | None = None,
    final: bool = False,
    clock: Callable[[], float] = time.time,
    completer: Completer = INLINE,
) -> Outcome:
    """Run the claimed job ``record`` and end it through ``completer`` (completer.py; by default the
    inline one, which writes at once): done with the return value, or failed with the exception classified
    by ``engine.classify`` (the task's ``retry_on``/``permanent_on``; a task's own ``retry_backoff`` gives
    the delay when it differs from the queue's). ``retry_delay`` overrides every retry delay. ``final``: a
    failure is not retried (the immediate mode). A task that raises ``SystemExit`` (``sys.exit()``,
    argparse or click given bad arguments) or ``KeyboardInterrupt`` fails like any other exception and
    nothing propagates, except a ``KeyboardInterrupt`` on the main thread, where it is the user's Ctrl-C:
    the job is released (no attempt counted) and it propagates (a worker's jobs never run on its main
    thread). A result is packed (checked to be storable) once, when the task returns; the worker's
    completer acknowledges it later, in a batch. A django.tasks job (its payload has ``DJANGO_TASK_KEY``)
    is run by backend.py, which needs Django >= 6.0. A job whose task this process does not have is given
    back to wait (``unknown_task_wait``; not counted as an attempt; its ``Outcome`` is scheduled, with a
    ``TaskNotRegistered`` error), unless ``final`` or its grace period is over (a dead letter). ``clock``:
    now, in unix seconds (tests pass a fake one). While the task runs, ``current_job()`` is its job
    (context.py); metadata it changed is saved when it returns or raises, before the outcome. An outcome
    the store cannot take as it is still ends the job (``Completer.run``): metadata that cannot be stored
    fails it with ``InvalidMetadata``, an error's text is stored escaped, and as a last resort the job is
    failed for good with ``OutcomeNotStored``."""
    return completer.run(record, _run_job, retry_delay=retry_delay, final=final, clock=clock)


def _run_job(
    record: Record,
    completer: Completer,
    *,
    retry_delay: float | None,
    final: bool,
    clock: Callable[[], float],
) -> Outcome:
    call = record.payload
    if is_sealed(call) and (record.name is None or registry.get(record.name) is None):
        try:  # no @task of this process: an encrypted django.tasks job's, maybe (its routing is inside)
            call = open_payload(call)
        except SealBroken as exc:  # tampered, or its key removed: as a @task's below
            return completer.write(record, Verdict.failed(corrupted(record.job_id, exc), permanent=True))
        except EncryptionNotConfigured:
            pass  # no key here: it waits as a job of a task this process does not have
    if isinstance(call, dict) and DJANGO_TASK_KEY in call:
        try:
            from ..backend import lookup, run_django_task_job, unknown_django_task_message
        except ImportError as exc:  # Django < 6.0: the job cannot run in this process
            message = f"job {record.job_id} is a django.tasks job: {exc}"
            return completer.write(record, Verdict.failed(message, permanent=True))
        module_path = call.get("task")
        if lookup(module_path, call.get("backend")) is None:
            named = isinstance(module_path, str)
            verdict = _unknown_task(record, final, clock, unknown_django_task_message(module_path), named)
            return completer.write(record, verdict)
        return run_django_task_job(record, completer, retry_delay=retry_delay, final=final, payload=call)
    task = registry.get(record.name) if record.name is not None else None
    if task is None:
        message = unknown_task_message(record.name)
        return completer.write(record, _unknown_task(record, final, clock, message, record.name is not None))
    try:
        payload = open_payload(record.payload)  # an encrypted job's, opened (encryption/jobs.py)
    except SealBroken as exc:  # tampered, or its key removed: quarantined as a corrupted dead letter
        return completer.write(record, Verdict.failed(corrupted(record.job_id, exc), permanent=True))
    except EncryptionNotConfigured as exc:  # this process has no key: a dead letter to retry once it has
        return completer.write(record, Verdict.failed(exc, permanent=True))
    if type(payload) is dict and AFTER_KEY in payload:  # a workflow step: its parents' results go first
        try:
            payload = with_parents(payload, record.metadata, record._owner)
        except (ParentResultsMissing, ValueError) as exc:
            return completer.write(record, Verdict.failed(f"job {record.job_id}: {exc}", permanent=True))
    arguments = _arguments(payload)
    if arguments is None:
        message = (
            f"the payload of job {record.job_id} is not a task call ({{'args': [...], 'kwargs': {{...}}}}): "
            f"{record.payload!r:.200}"
        )
        return completer.write(record, Verdict.failed(message, permanent=True))
    job = RunningJob(record, task.name)  # current_job() inside the task (its JobContext made if asked for)
    token = enter(job)
    try:
        traced = tracing.processing(task.name, record.queue, record.job_id, record.attempts, record.metadata)
        if traced is tracing.UNTRACED:  # nothing to trace: no span, no ``with``
            ended = _call(record, task, arguments, job, tracing.NOT_PROCESSED, completer, retry_delay, final)
        else:
            with traced as span:
                ended = _call(record, task, arguments, job, span, completer, retry_delay, final)
    finally:
        leave(token)
    if isinstance(ended, Outcome):
        return ended
    result, problem = ended
    if problem is not None:  # the attempt fails for good: the same code would fail the same way again
        error = InvalidMetadata(f"task {task.name!r} left metadata that cannot be stored: {problem}")
        return completer.write(record, Verdict.failed(error, permanent=True))
    try:
        packed = None if result is None else Packed(result, pack_result(record, result))
    except (PayloadNotSerializable, PayloadTooLarge) as exc:
        message = f"task {task.name!r} returned a value that cannot be stored as its result: {exc}"
        return completer.write(record, Verdict.failed(message, permanent=True))
    return completer.write(record, Verdict.done(packed))


def _call(
    record: Record,
    task: RegisteredTask,
    arguments: tuple[list[Any], dict[str, Any]],
    job: RunningJob,
    span: tracing.Processing,
    completer: Completer,
    retry_delay: float | None,
    final: bool,
) -> Outcome | tuple[Any, InvalidMetadata | None]:
    """Call the task, the job current (and its run span open): -> the Outcome of a task that raised (its
    failure written, after the metadata it changed), else (its return value, the metadata it changed
    if that could not be saved)."""
    try:
        result = call_task(task, *arguments)
    except Exception as exc:
        span.failed(exc)
        job.save_at_end()  # metadata the task changed, before the outcome (its own error wins)
        return completer.write(record, _failed(record, task, exc, retry_delay, final))
    except BaseException as exc:
        if is_interrupt(exc):
            if not record.finished:
                completer.write(record, Verdict.released())
            raise
        span.failed(exc)
        job.save_at_end()
        return completer.write(record, _failed(record, task, exc, retry_delay, final))
    return result, job.save_at_end()


def _unknown_task(
    record: Record, final: bool, clock: Callable[[], float], message: str, named: bool
) -> Verdict:
    """The job names no task of this process (an ``@task`` one, or a ``django.tasks`` one: ``message`` says
    which): give it back to wait for a worker that has the task, or, a job that names no task at all
    (``named`` false), out of its grace period or run ``final``, a dead letter."""
    grace = get_config().unknown_task_grace
    wait = None
    if named and not final:
        wait = unknown_task_wait(clock() - record.enqueued_at, grace)
    if wait is None:
        reason = "its task is not registered in this process"
        if grace and named and not final:
            message += f" It waited QUEUE_MAX['UNKNOWN_TASK_GRACE'] ({grace:g} s) for a worker that has it."
            reason = "no worker had its task within QUEUE_MAX['UNKNOWN_TASK_GRACE']"
        return Verdict.failed(TaskNotRegistered(message), permanent=True, reason=reason)
    error = TaskNotRegistered(message)
    return Verdict.released(delay=wait, error=error, reason=f"waits {wait:.1f} s for its task")


def _failed(
    record: Record, task: RegisteredTask, exc: BaseException, retry_delay: float | None, final: bool = False
) -> Verdict:
    decision = classify(exc, retry_on=task.retry_on, permanent_on=task.permanent_on, now=time.time())
    delay = decision.delay
    if decision.retry and retry_delay is not None:
        delay = retry_delay
    elif decision.retry and delay is None and task.retry_backoff is not None:
        config = get_config()
        if task.retry_backoff != config.retry_backoff:
            delay = backoff_delay(record.retries + 1, task.retry_backoff, config.retry_backoff_max)
    return Verdict.failed(exc, delay=delay, permanent=final or not decision.retry, reason=decision.reason)


def run_now(queue: Queue, job_id: int) -> Outcome | None:
    """Claim job ``job_id`` and run it here, once: the immediate mode. A failure is final (the job goes to
    the dead letters), as with Django's ``ImmediateBackend``. -> None if the job was not waiting."""
    record = claim_now(queue, job_id)
    return None if record is None else run_job(record, final=True)
