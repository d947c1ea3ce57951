"""``QueueMaxBackend``: a backend for Django's Tasks framework (``django.tasks``, Django >= 6.0).

``TASKS = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}`` makes
``django.tasks.task``-decorated functions run on this app's store: ``enqueue`` puts one engine job, the worker
(or ``testing.run_queued``) runs it through ``runner.run_job``, which hands django.tasks jobs to
``run_django_task_job`` here, and ``get_result`` reads the job back from the store, from any process.

A job's payload is msgpack data: ``{DJANGO_TASK_KEY: 1, "task": <module path>, "backend": <alias>,
"run_after": <ISO 8601 text or None>, "args": [...], "kwargs": {...}}``; its engine name is the task's module
path, its priority and queue the task's. A result is rebuilt from these stored fields of its own job, never
from another ``using()`` variant of the task. With ``QUEUE_MAX["IMMEDIATE"]`` a job is run as soon as it is
stored, here, as ``runner.run_now`` would run it (a failure is final), as Django's ``ImmediateBackend`` does.

Invariant 6: the run side looks the module path up only among the ``django.tasks.Task`` objects this process
has registered (every Task this backend validates or enqueues, and those defined by the modules listed in
``OPTIONS["MODULES"]``, which come from settings, never from a job). Nothing is imported from a job's data.
"""

from __future__ import annotations

try:
    from django.tasks import Task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_REFRESH_ATTRS, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError as exc:  # Django < 6.0
    raise ImportError(
        "queue_max_django.backend needs Django's Tasks framework (django.tasks), added in Django 6.0; "
        "this is Django older than that. Everything else in queue_max_django works without it: remove "
        "QueueMaxBackend from the TASKS setting, or upgrade Django."
    ) from exc

import asyncio
import contextlib
import dataclasses
import datetime as dt
import importlib
import inspect
import threading
import time
import traceback
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.utils import timezone
from django.utils.json import normalize_json

from .commits import Commit, find, placeholder, waits_for_commit, written
from .conf import caller_connection, callers_alias, get_config, get_queue, lent_to
from .context import JobContext, NoCurrentJob, running, running_context
from .encryption.jobs import (
    corrupted,
    is_encrypted_job,
    open_metadata,
    open_payload,
    opened_job,
    pack_result,
    seal_put,
)
from .encryption.keys import EncryptionNotConfigured
from .engine import Job, PayloadNotSerializable, PayloadTooLarge, Record, State, classify, codec, is_interrupt
from .engine.codec import Packed
from .engine.nesting import depth
from .engine.sealing import SealBroken
from .engine.validate import validate_queue_name
from .observability import tracing
from .results import attempt_errors, attempt_workers, exception_class_path, read_job
from .running.completer import INLINE, Completer, Verdict
from .running.outcome import DJANGO_TASK_KEY, Outcome, _run_coroutine, claim_now
from .signals import in_callers_transaction

OPTION_KEYS = frozenset({"MODULES", "MAX_RETRIES", "ENQUEUE_ON_COMMIT"})
# Django's Tasks metadata (``Task.using(metadata=)``, ``TaskResult.raw_metadata``, ``TaskContext.metadata``/
# ``save_metadata()``), in Django releases that have it: feature-detected, so this backend uses it the day
# the installed Django ships it, and works as before where it does not.
HAS_METADATA = "raw_metadata" in {field.name for field in dataclasses.fields(TaskResult)}
CHECK_PREFIX = "queue_max_django.backend"

_STATUS = {
    State.PENDING: TaskResultStatus.READY,
    State.SCHEDULED: TaskResultStatus.READY,
    State.RUNNING: TaskResultStatus.RUNNING,
    State.DONE: TaskResultStatus.SUCCESSFUL,
    State.FAILED: TaskResultStatus.FAILED,
}


class _Registered:
    """This process's django.tasks ``Task`` objects by module path: the only tasks its jobs may run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, Task[..., Any]] = {}

    def add(self, task: Task[..., Any]) -> None:
        with self._lock:
            self._tasks[task.module_path] = task

    def get(self, module_path: Any) -> Task[..., Any] | None:
        return self._tasks.get(module_path) if isinstance(module_path, str) else None

    def __contains__(self, module_path: object) -> bool:
        return module_path in self._tasks


registered = _Registered()


def unknown_django_task_message(module_path: Any) -> str:
    return (
        f"no django.tasks task {module_path!r} is registered in this process: is the module that defines "
        f"it imported (an installed app's tasks.py, or listed in the backend's OPTIONS['MODULES'])? If the "
        f"code that enqueued it is newer than this worker's, restart or update your workers."
    )


def _datetime(seconds: float | None) -> dt.datetime | None:
    if seconds is None:
        return None
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def _import_modules(alias: Any) -> None:
    """Import the modules of ``OPTIONS["MODULES"]`` of the configured backend ``alias`` (names from
    settings, never from a job): their tasks register themselves when the backend validates them."""
    params = getattr(settings, "TASKS", {}).get(alias) if isinstance(alias, str) else None
    if not isinstance(params, dict):
        return
    for module in (params.get("OPTIONS") or {}).get("MODULES", ()):
        importlib.import_module(module)


def lookup(module_path: Any, alias: Any) -> Task[..., Any] | None:
    """The registered Task of ``module_path``; the backend's ``MODULES`` are imported once if missing."""
    found = registered.get(module_path)
    if found is None:
        _import_modules(alias)
        found = registered.get(module_path)
    return found


class QueueMaxBackend(BaseTaskBackend):
    """Django Tasks on the queue_max store: deferral, coroutine tasks, results and priorities are real."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    supports_metadata = True  # jobs keep metadata (a Django without the feature never asks)

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        registered.add(task)

    def _max_retries(self) -> int | None:
        value = self.options.get("MAX_RETRIES")
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        run_after = _aware(task.run_after)
        payload = {DJANGO_TASK_KEY: 1, "task": task.module_path, "backend": self.alias}
        payload.update(
            run_after=None if run_after is None else run_after.isoformat(), args=args, kwargs=kwargs
        )
        config, queue = get_config(), get_queue()
        options: dict[str, Any] = {
            "priority": int(task.priority),  # Django also accepts a whole float (3.0)
            "eta": None if config.immediate else run_after,
            "queue": task.queue_name,
            "name": task.module_path,
            "max_retries": self._max_retries(),
            "timeout": config.timeout,  # QUEUE_MAX["TIMEOUT"]: django.tasks has no per-task limit
            "metadata": getattr(task, "metadata", None) or None,  # Django validated it, the engine again
        }
        # In a transaction on the PostgreSQL store's own alias the job is part of it (conf.caller_connection);
        # in another transaction of the default database it is stored at the commit (ENQUEUE_ON_COMMIT)
        joined = caller_connection()
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
            **_raw_metadata(dict(getattr(task, "metadata", None) or {})),
        )
        if config.encrypt:  # QUEUE_MAX["ENCRYPT"]: the whole payload sealed, user metadata too (encryption/)
            payload, options = seal_put(task, payload, options)
        on_commit = waits_for_commit(self._on_commit(), config.enqueue_on_commit)
        if joined is None and not config.immediate and on_commit:
            codec.pack_value(payload, what="payload", limit=config.max_payload_bytes)  # fails now, not then
            commit = Commit(store=lambda: self._put(queue, task, payload, options, None, result))
            object.__setattr__(result, "id", placeholder(commit))  # the job's id once it is stored
            return result
        self._put(queue, task, payload, options, joined, result)
        if config.immediate:
            return self._run_inline(queue, int(result.id), result)
        return result

    def _on_commit(self) -> bool | None:
        """``OPTIONS["ENQUEUE_ON_COMMIT"]`` (None: ``QUEUE_MAX["ENQUEUE_ON_COMMIT"]``)."""
        value = self.options.get("ENQUEUE_ON_COMMIT")
        return value if isinstance(value, bool) else None

    def _put(
        self, queue: Any, task: Task[Any, Any], payload: Any, options: Any, joined: Any, result: Any
    ) -> None:
        """Store the job (in the caller's transaction on ``joined``) and give ``result`` its id and
        ``enqueued_at``; then ``task_enqueued``."""
        alias = callers_alias(joined)
        with tracing.sending(task.module_path, task.queue_name, options) as sending:
            # job_enqueued is sent at the commit; all the put asks of the store is on ``joined`` (lent_to)
            with in_callers_transaction(alias), lent_to(queue, joined):
                job_id = queue.put(payload, connection=joined, **options)
            sending.sent(job_id)
        written(alias, [job_id])
        job = queue.job(job_id) if joined is None else None  # not committed: the store cannot see it yet
        object.__setattr__(result, "id", str(job_id))
        object.__setattr__(result, "enqueued_at", _datetime(job.enqueued_at) if job else timezone.now())
        task_enqueued.send(type(self), task_result=result)

    def _run_inline(self, queue: Any, job_id: int, result: TaskResult[Any, Any]) -> TaskResult[Any, Any]:
        """IMMEDIATE: claim exactly this job and run it here, once (a failure is final, as with
        ``ImmediateBackend``); ``result`` is then updated from the store. What ``runner.run_now`` does,
        without the detour through ``runner.run_job``, which would hand this job back to this module."""
        record = claim_now(queue, job_id)
        if record is not None:
            INLINE.run(record, run_django_task_job, final=True)
        job = queue.job(job_id)
        if job is not None:  # None: the store forgot it at once (RESULT_TTL 0): the result stays READY
            job = opened_job(job)
            fresh = result_of(job, result.task, job.payload)
            for name in TASK_REFRESH_ATTRS:
                object.__setattr__(result, name, getattr(fresh, name))
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            commit = find(result_id) if isinstance(result_id, str) else None
            if commit is not None:  # a result's id before its job was stored at the commit
                raise TaskResultDoesNotExist(commit.explain(f"the job of result {result_id!r}")) from None
            raise TaskResultDoesNotExist(f"{result_id!r} is not a result id of this backend") from None
        job = read_job(job_id) if job_id > 0 else None
        if job is not None and is_encrypted_job(job):
            job = opened_job(job)  # what does not open stays sealed, and is no django.tasks payload
        payload = job.payload if job is not None else None
        if job is None or not isinstance(payload, dict) or DJANGO_TASK_KEY not in payload:
            commit = find(job_id) if job is None else None
            if commit is not None:
                raise TaskResultDoesNotExist(commit.explain(f"django.tasks job {result_id!r}"))
            raise TaskResultDoesNotExist(f"no django.tasks job {result_id!r} in the store")
        task = lookup(payload.get("task"), payload.get("backend"))
        if task is None:
            raise TaskResultDoesNotExist(unknown_django_task_message(payload.get("task")))
        return result_of(
            job, stored_task(task, payload, priority=job.priority, queue_name=job.queue), payload
        )

    def save_metadata(self, task_result: TaskResult[Any, Any], metadata: dict[str, Any]) -> None:
        """Store ``metadata`` (reserved keys too: Django's ``TaskContext.save_metadata`` passes them) as the
        job's, now. Only from inside the running job, in the worker that holds it (the store refuses a
        holder whose lease expired: ``QueueCorrupted``)."""
        context = running_context(int(task_result.id))
        if context is None:
            raise NoCurrentJob(
                f"QueueMaxBackend saves the metadata of job {task_result.id} only from inside that job, "
                f"while it runs (its worker holds it); read it anywhere with TaskResult.metadata"
            )
        context.save_raw(metadata)

    async def aget_result(self, result_id: str) -> TaskResult[Any, Any]:
        """``get_result`` from async code (``Task.aget_result``, ``TaskResult.arefresh``) on a thread of the
        event loop's default executor: a store read runs none of your code, so it need not wait for Django's
        thread for sync code as the base class's would. ``aenqueue`` stays the base class's (that thread):
        ``enqueue`` sends ``task_enqueued`` and, in IMMEDIATE mode, runs the task, code that may use the
        ORM, whose connections belong to a thread."""
        return await asyncio.to_thread(self.get_result, result_id)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = []
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("queue_max_django"):
            messages.append(
                checks.Error(
                    f"{where} uses QueueMaxBackend, but 'queue_max_django' is not in INSTALLED_APPS: its "
                    f"jobs would be stored and never run (no queue_worker command, no task autodiscovery)",
                    hint="Add 'queue_max_django' to INSTALLED_APPS.",
                    id=f"{CHECK_PREFIX}.E006",
                )
            )
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS'] has unknown keys: {', '.join(unknown)}",
                    hint=f"QueueMaxBackend takes {', '.join(sorted(OPTION_KEYS))}.",
                    id=f"{CHECK_PREFIX}.E001",
                )
            )
        on_commit = self.options.get("ENQUEUE_ON_COMMIT")
        if on_commit is not None and not isinstance(on_commit, bool):
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS']['ENQUEUE_ON_COMMIT'] must be None, True or False, not {on_commit!r}",
                    id=f"{CHECK_PREFIX}.E007",
                )
            )
        retries = self.options.get("MAX_RETRIES")
        if retries is not None and self._max_retries() is None:
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS']['MAX_RETRIES'] must be None or an int >= 0, not {retries!r}",
                    id=f"{CHECK_PREFIX}.E002",
                )
            )
        for module in self.options.get("MODULES", ()):
            try:
                importlib.import_module(module)
            except Exception as exc:
                messages.append(
                    checks.Error(
                        f"{where}['OPTIONS']['MODULES'] names {module!r}, which cannot be imported: {exc!r}",
                        id=f"{CHECK_PREFIX}.E003",
                    )
                )
        try:
            engine_queues = get_config().queues
        except Exception:  # QUEUE_MAX itself is wrong: queue_max_django's own checks report it
            engine_queues = None
        for name in sorted(self.queues):
            try:
                validate_queue_name(name)
            except Exception as exc:
                messages.append(checks.Error(f"{where}['QUEUES']: {exc}", id=f"{CHECK_PREFIX}.E004"))
                continue
            if engine_queues is not None and name not in engine_queues:
                messages.append(
                    checks.Error(
                        f"{where}['QUEUES'] names {name!r}, which QUEUE_MAX['QUEUES'] does not list",
                        hint="Add it to QUEUE_MAX['QUEUES'] (the engine refuses jobs for other queues).",
                        id=f"{CHECK_PREFIX}.E005",
                    )
                )
        return messages


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    """A naive ``run_after`` (allowed with ``USE_TZ = False``) is in the current time zone, as Django's."""
    if moment is None or timezone.is_aware(moment):
        return moment
    return timezone.make_aware(moment)


def _run_after(payload: dict[str, Any]) -> dt.datetime | None:
    """The ``run_after`` a job was enqueued with (None for jobs stored before the payload kept it)."""
    text = payload.get("run_after")
    if not isinstance(text, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if settings.USE_TZ or timezone.is_naive(moment) else timezone.make_naive(moment)


def stored_task(
    task: Task[Any, Any], payload: dict[str, Any], *, priority: int, queue_name: str
) -> Task[Any, Any]:
    """``task`` (the registered Task of the job's module path: any ``using()`` variant of it) with the
    options this job was stored with: its priority, queue, ``run_after`` and backend alias. Built without
    Django's validation, which would refuse what is true of a stored job (a ``run_after`` now past is fine,
    but an alias or queue this process does not configure is not)."""
    stored = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(stored, field.name, getattr(task, field.name))
    backend = payload.get("backend")
    changes = {"priority": priority, "queue_name": queue_name, "run_after": _run_after(payload)}
    if isinstance(backend, str):
        changes["backend"] = backend
    for name, value in changes.items():
        object.__setattr__(stored, name, value)
    return stored


def result_of(job: Job, task: Task[Any, Any], payload: dict[str, Any]) -> TaskResult[Any, Any]:
    """The ``TaskResult`` of a stored job (``task``: as ``stored_task`` rebuilt it). A job waiting for a
    retry is READY, with one error per failed attempt."""
    status = _STATUS[job.state]
    errors = [
        TaskError(exception_class_path=exception_class_path(kind), traceback=traceback or message)
        for kind, traceback, message in attempt_errors(job)
    ]
    finished = job.state in (State.DONE, State.FAILED)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.job_id),
        status=status,
        enqueued_at=_datetime(job.enqueued_at),
        started_at=_datetime(job.started_at),
        last_attempted_at=_datetime(job.started_at),
        finished_at=_datetime(job.finished_at) if finished else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=str(payload.get("backend")),
        errors=errors,
        worker_ids=attempt_workers(job.attempts, job.worker_ids),
        **_raw_metadata(job.metadata),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _raw_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``TaskResult``'s metadata argument, where the installed Django has one (``HAS_METADATA``)."""
    return {"raw_metadata": metadata} if HAS_METADATA else {}


# ---------------------------------------------------------------------------------------------- run side


def run_django_task_job(
    record: Record,
    completer: Completer = INLINE,
    *,
    retry_delay: float | None = None,
    final: bool = False,
    payload: dict[str, Any] | None = None,
) -> Outcome:
    """Run one claimed django.tasks job as ``ImmediateBackend._execute_task`` does (statuses, timestamps,
    ``TaskContext``, ``TaskError`` with the traceback, ``task_started``/``task_finished``), and end it
    through ``completer`` (completer.py): done with the return value, or failed (retried per the queue's
    ``MAX_RETRIES``; ``final``: not retried). A success is written at once by every completer
    (``Verdict.at_once``), and a failure is written inside its ``except`` block: ``task_finished`` follows
    each, with the job's new status, from the thread that ran it, where Django's receivers expect it. A
    ``SystemExit`` or ``KeyboardInterrupt`` the task raises is a failed attempt like any exception (Django's
    ``ImmediateBackend`` and django-tasks' database worker record them FAILED), except a
    ``KeyboardInterrupt`` on the main thread (a test's ``run_queued()``, the immediate mode): that is the
    user's Ctrl-C, so the job is released (no attempt counted) and it propagates, as ``ImmediateBackend``
    lets it. A worker never runs jobs on its main thread. ``payload``: the job's, opened where it is
    encrypted (the runner opened it to route it); the record's, opened, by default."""
    if payload is None:
        try:
            payload = open_payload(record.payload)
        except SealBroken as exc:  # tampered, or its key removed: quarantined as a corrupted dead letter
            return completer.write(record, Verdict.failed(corrupted(record.job_id, exc), permanent=True))
        except EncryptionNotConfigured as exc:  # this process has no key: a dead letter to retry
            return completer.write(record, Verdict.failed(exc, permanent=True))
    assert payload is not None
    module_path, alias = payload.get("task"), payload.get("backend")
    task = lookup(module_path, alias)
    if task is None:
        message = unknown_django_task_message(module_path)
        return completer.write(record, Verdict.failed(message, permanent=True))
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(alias, str):
        message = f"the payload of django.tasks job {record.job_id} is malformed"
        return completer.write(record, Verdict.failed(message, permanent=True))
    task = stored_task(task, payload, priority=record.priority, queue_name=record.queue)
    sender = QueueMaxBackend
    started = timezone.now()
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(record.job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=_datetime(record.enqueued_at),
        started_at=started,
        last_attempted_at=started,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=attempt_workers(record.attempts, record.worker_ids),
        **_raw_metadata(open_metadata(record.metadata)),
    )
    task_started.send(sender=sender, task_result=result)
    with (
        running(record, task.module_path) as ours,  # current_job() works in django.tasks tasks too
        tracing.processing(
            task.module_path, record.queue, record.job_id, record.attempts, record.metadata
        ) as span,
    ):
        django_context: TaskContext[Any, Any] | None = None
        if task.takes_context:
            django_context = TaskContext(task_result=result)
        try:
            call_args = [django_context, *result.args] if django_context is not None else result.args
            value = task.func(*call_args, **result.kwargs)
            if inspect.iscoroutine(value):
                value = _run_coroutine(value)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: as runner.run_job has it
            if is_interrupt(exc):
                if not record.finished:
                    completer.write(record, Verdict.released())
                raise
            span.failed(exc)
            with contextlib.suppress(Exception):  # changed metadata, saved; the task's own error wins
                _save_at_end(django_context, ours)
            decision = classify(exc, now=time.time())
            delay = (decision.delay if retry_delay is None else retry_delay) if decision.retry else None
            permanent = final or not decision.retry
            verdict = Verdict.failed(exc, delay=delay, permanent=permanent, reason=decision.reason)
            return _finish_failed(record, completer, result, exc, verdict)
        try:
            _save_at_end(django_context, ours)
        except Exception as exc:  # metadata that cannot be stored fails the attempt, as in Django
            verdict = Verdict.failed(exc, permanent=True, reason="the metadata cannot be stored")
            return _finish_failed(record, completer, result, exc, verdict)
    try:
        if depth(value, codec.MAX_DEPTH) > codec.MAX_DEPTH:  # refused before a recursive walk goes there
            raise PayloadNotSerializable(
                f"result cannot be stored: nested more than {codec.MAX_DEPTH} levels deep"
            )
        try:
            value = normalize_json(value)  # as Django requires: JSON data (which msgpack stores as is)
        except RecursionError:
            raise PayloadNotSerializable("result cannot be stored: it is nested too deep") from None
        packed = Packed(value, pack_result(record, value))  # sealed if the job is (encryption/)
        outcome = completer.write(record, Verdict.done(packed, at_once=True))
    except (TypeError, ValueError, PayloadNotSerializable, PayloadTooLarge) as exc:
        verdict = Verdict.failed(exc, permanent=True, reason="the return value cannot be stored")
        return _finish_failed(record, completer, result, exc, verdict)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender, task_result=result)
    return outcome


def _save_at_end(django_context: TaskContext[Any, Any] | None, ours: JobContext) -> None:
    """Metadata the task changed, saved as Django's ``ImmediateBackend`` does (``TaskContext.save_metadata``
    where the installed Django has it), and what it changed through ``current_job()``. An error (metadata
    that is not JSON: Django raises ``TypeError``) fails the attempt with it, as in Django."""
    if django_context is not None and getattr(django_context, "metadata_modified", False):
        django_context.save_metadata()  # type: ignore[attr-defined]  # -> QueueMaxBackend.save_metadata
    problem = ours.save_at_end()
    if problem is not None:
        raise problem


def _finish_failed(
    record: Record, completer: Completer, result: TaskResult[Any, Any], exc: BaseException, verdict: Verdict
) -> Outcome:
    """Write the failed ``verdict`` of ``exc``, record the error on ``result`` and send ``task_finished``
    (called inside the except block, so that Django's logging receiver sees the exception). A retried
    job's status is READY."""
    outcome = completer.write(record, verdict)
    state = outcome.state
    kind = type(exc)
    result.errors.append(
        TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(traceback.format_exception(exc)),
        )
    )
    if state is State.FAILED:
        object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", _STATUS[state])
    task_finished.send(QueueMaxBackend, task_result=result)
    return outcome


__all__ = ["QueueMaxBackend", "registered", "run_django_task_job", "task_backends"]
