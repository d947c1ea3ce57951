"""``@task`` and ``@retryable_task``: a task is the decorated function; a job is one stored execution of it.

Tasks are registered in this process's ``registry`` under ``module.qualname`` (or ``name=``); that name is the
job's ``name`` in the engine, and the worker finds the function by it. A job's payload is msgpack data:
``{"args": [...], "kwargs": {...}}``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import msgpack
from asgiref.sync import sync_to_async
from django.db import transaction

from .commits import Commit, waits_for_commit, written
from .conf import Applied, QueueMaxConfig, caller_connection, callers_alias, get_config, get_queue, lent_to
from .coordination import unique as unique_jobs
from .coordination.concurrency import TaskConcurrency, job_limits, store_by_limits
from .coordination.flow import apply_flow, breaker_policy
from .coordination.unique import KeyOption, UniqueOptions
from .encryption.jobs import check_encrypt, seal_puts
from .engine import (
    PayloadNotSerializable,
    PayloadTooLarge,
    Queue,
    Rate,
    backoff_delay,
    codec,
    parse_rate,
)
from .engine.classify import ExceptionTypes, exception_types
from .engine.job import PRIORITY_MAX, PRIORITY_MIN
from .engine.metadata import normalized as normalized_metadata
from .engine.tags import check_tags, with_tags
from .engine.uniqueness import SKIP, STARTED
from .engine.validate import validate_queue_name
from .observability import tracing
from .results import JobMismatch, JobResult
from .running.registry import Registry
from .running.registry import registry as _registry
from .running.runner import run_now
from .signals import in_callers_transaction
from .workflows import Signature

P = ParamSpec("P")
R = TypeVar("R")


# The registry (registry.py) typed with what it holds: every task registered is a Task (the decorators below
# register them), though runner.py and checks.py, which cannot import this module, see only RegisteredTask.
registry = cast("Registry[Task[..., Any]]", _registry)


def _check_options(
    *, priority: int, queue: str, max_retries: int | None, retry_backoff: float | None, timeout: float | None
) -> None:
    """``ValueError`` naming the bad one of a task's own options (``@task(...)``, ``.using(...)``)."""
    if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}")
    validate_queue_name(queue)
    if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
        raise ValueError(f"max_retries must be None or an int >= 0, not {max_retries!r}")
    for label, value, minimum in (("retry_backoff", retry_backoff, 0.0), ("timeout", timeout, 0.001)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < minimum
        ):  # fmt: skip
            raise ValueError(f"{label} must be None or a number of seconds >= {minimum:g}, not {value!r}")


class Task(Generic[P, R]):
    """A decorated function. Called directly it runs here and now; ``.delay()`` stores a job for a worker."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        priority: int = 0,
        queue: str = "default",
        max_retries: int | None = None,
        retry_backoff: float | None = None,
        timeout: float | None = None,
        rate_limit: str | int | tuple[int, float] | None = None,
        circuit_breaker: bool | Mapping[str, Any] | None = None,
        retry_on: ExceptionTypes = (),
        permanent_on: ExceptionTypes = (),
        unique_key: KeyOption = None,
        unique_until: str | float = STARTED,
        on_duplicate: str = SKIP,
        concurrency: int | None = None,
        concurrency_key: str | Callable[..., str] | None = None,
        tags: Sequence[str] = (),
        encrypt: bool | None = None,
    ) -> None:
        if not callable(func):
            raise TypeError(f"@task decorates a function, not {func!r}")
        _check_options(
            priority=priority,
            queue=queue,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            timeout=timeout,
        )
        self.func = func
        self.path = f"{func.__module__}.{func.__qualname__}"
        self.name = self.path if name is None else name
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str, not {self.name!r}")
        self.name = sys.intern(self.name)  # the signals' sender: Django matches senders by identity
        self.priority = priority
        self.queue = queue
        self.max_retries = max_retries
        self.retry_backoff = None if retry_backoff is None else float(retry_backoff)
        self.timeout = None if timeout is None else float(timeout)
        self.rate_limit: Rate | None = None if rate_limit is None else parse_rate(rate_limit)
        self.circuit_breaker = breaker_policy(circuit_breaker)
        self.retry_on = exception_types(retry_on, name="retry_on")
        self.permanent_on = exception_types(permanent_on, name="permanent_on")
        self.unique = UniqueOptions.make(unique_key, unique_until, on_duplicate)  # coordination/unique.py
        self.delay_seconds: float | None = None
        self.eta: float | dt.datetime | None = None
        self.metadata: dict[str, Any] = {}  # stored with each job (using(metadata=...))
        self.tags = check_tags(tags)  # each job's tags (engine/tags.py): InvalidJob now, not at enqueue
        self.encrypt = check_encrypt(encrypt)  # None: QUEUE_MAX["ENCRYPT"] (encryption/jobs.py seals at put)
        self.enqueue_on_commit: bool | None = None  # None: QUEUE_MAX["ENQUEUE_ON_COMMIT"]
        self.is_async = inspect.iscoroutinefunction(func)
        self._signature = inspect.signature(func)
        params = self._signature.parameters.values()  # a call of len(params) positionals binds, if plain:
        plain = all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params
        )
        self._arity = len(params) if plain else None  # (_bind skips Signature.bind then)
        # at most ``concurrency`` jobs running (per key, with ``concurrency_key``): concurrency.py
        self.concurrency = TaskConcurrency(self.name, self._signature, concurrency, concurrency_key)
        self._flow_applied = Applied()  # this task's limit and breaker, in the store (_prepare)
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    # ------------------------------------------------------------------ options

    def using(
        self,
        *,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        eta: float | dt.datetime | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        metadata: dict[str, Any] | None = None,
        enqueue_on_commit: bool | None = None,
        unique_key: KeyOption = None,
        unique_until: str | float | None = None,
        on_duplicate: str | None = None,
        tags: Sequence[str] | None = None,
        encrypt: bool | None = None,
    ) -> Task[P, R]:
        """A copy with other options (not registered: jobs still name this task). ``enqueue_on_commit``:
        inside a transaction, wait for its commit to store the job (True) or store it at once (False), for
        this copy's jobs, whatever ``QUEUE_MAX["ENQUEUE_ON_COMMIT"]`` says. ``metadata``: a small
        JSON dict stored with each job (``JobResult.metadata``; ``current_job().metadata`` inside the
        task); ``InvalidMetadata`` unless it is a dict of str keys that JSON encodes within 64 KiB. Keys
        that start with ``_`` are reserved for the backend and libraries, as in Django's Tasks: stored,
        but not in ``JobResult.metadata`` nor in what the task sees. ``unique_key``, ``unique_until``,
        ``on_duplicate``: as ``@task``'s, each replacing the task's (``unique_key=False``: none). ``tags``:
        added to the task's own (``@task(tags=...)``), at most 16 in all (docs/howto/tags.md). ``encrypt``:
        True or False: this copy's jobs encrypted or not, whatever the task and ``ENCRYPT`` say
        (docs/security.md)."""
        clone = copy.copy(self)
        if encrypt is not None:
            clone.encrypt = check_encrypt(encrypt)  # refused before anything is stored: ValueError
        if tags is not None:
            clone.tags = check_tags([*self.tags, *check_tags(tags)])
        clone.unique = UniqueOptions.using(self.unique, unique_key, unique_until, on_duplicate)
        if metadata is not None:
            clone.metadata = normalized_metadata(metadata)  # checked now: nothing is written if bad
        clone.priority = self.priority if priority is None else priority
        clone.queue = self.queue if queue is None else queue
        clone.max_retries = self.max_retries if max_retries is None else max_retries
        clone.timeout = self.timeout if timeout is None else float(timeout)
        _check_options(priority=clone.priority, queue=clone.queue, max_retries=clone.max_retries,
                       retry_backoff=clone.retry_backoff, timeout=clone.timeout)  # fmt: skip
        if delay is not None or eta is not None:
            clone.delay_seconds, clone.eta = delay, eta
        if enqueue_on_commit is not None:
            clone.enqueue_on_commit = bool(enqueue_on_commit)
        return clone

    def get_stats(self) -> dict[str, Any]:
        """This task's ``enqueued``, ``succeeded``, ``failed`` (dead-lettered) and ``retried`` counts and
        ``mean_run_time`` (seconds; None before any timed run), as seen by THIS process since it started:
        per-process counters of the engine's events (signals.py), not store-wide figures."""
        from .signals import task_stats

        return task_stats(self.name)

    # ------------------------------------------------------------------ enqueueing

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step that gets its parents' results first among its arguments (workflows.py)."""
        return Signature(self, args, kwargs, takes_result=True)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step that gets only these arguments, never its parents' results."""
        return Signature(self, args, kwargs, takes_result=False)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """Store one job calling this task with these arguments. -> its result handle. In ``IMMEDIATE``
        mode the job is run here, now, and the handle is finished. Inside ``transaction.atomic()`` the job
        is the transaction's, on either store: with the PostgreSQL store in the ``DATABASE`` alias and the
        transaction on that alias, it is written in the transaction; otherwise, with ``ENQUEUE_ON_COMMIT``
        (the default), inside a transaction of the default database, it is stored when it commits and the
        handle has no id until then. Either way it is "not committed yet" until the commit (the handle's
        ``is_committed``), and nothing is stored on rollback."""
        return self._enqueue_maybe_on_commit(args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """The same as ``delay`` (Django's Tasks name)."""
        return self._enqueue_maybe_on_commit(args, kwargs)

    def schedule_in(self, seconds: float | dt.timedelta, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """Store a job that becomes runnable in ``seconds``."""
        if isinstance(seconds, dt.timedelta):
            seconds = seconds.total_seconds()
        return self.using(delay=seconds)._enqueue_maybe_on_commit(args, kwargs)

    def schedule_at(self, when: dt.datetime | float, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """Store a job that becomes runnable at ``when`` (an aware datetime, or unix seconds)."""
        return self.using(eta=when)._enqueue_maybe_on_commit(args, kwargs)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Store the job when the current database transaction commits (at once outside one); nothing is
        stored on rollback. Returns None: the job does not exist yet."""
        transaction.on_commit(functools.partial(self._enqueue, args, kwargs))

    def map(self, iterable: Iterable[Any], *args: Any, **kwargs: Any) -> list[JobResult]:
        """One job per item (the item first, then ``args``/``kwargs``), spread over the store in parts
        (``Queue.put_parts``: one per shard, each all or nothing) so that workers drain them in parallel.
        Inside a transaction they are its jobs, as ``delay()``'s. -> the handles, in the items' order."""
        calls = [((item, *args), kwargs) for item in iterable]
        for index, (call_args, call_kwargs) in enumerate(calls):
            self._bind(call_args, call_kwargs, label=f"item {index} of .map()")
        payloads = [self._payload(a, k) for a, k in calls]
        if codec.unstorable(payloads) is not None:
            for index, (call_args, call_kwargs) in enumerate(calls):
                self._check_storable(call_args, call_kwargs, label=f"item {index} of .map()")
        self._check_sizes(payloads)  # the item's index in the message (put_parts checks them all too)
        if not payloads:
            return []
        keys = unique_jobs.keys_of(self, calls)  # before anything is stored: a bad key fails here
        if get_config().immediate:
            return [self._run_now(payload) for payload in payloads]
        limits = [self._limits(a, k) for a, k in calls]  # a bad key raises before anything is written
        joined = caller_connection()
        if joined is None and waits_for_commit(self.enqueue_on_commit, get_config().enqueue_on_commit):
            handles = [JobResult(None, task_name=self.name) for _ in payloads]

            def store() -> None:
                for handle, put in zip(handles, self._store_many(payloads, None, keys, limits), strict=True):
                    handle._job_id, handle.deduplicated = put

            waiting = Commit(store=store)
            for handle in handles:
                handle._commit = waiting
            return handles
        puts = self._store_many(payloads, joined, keys, limits)
        commit = written(callers_alias(joined), [job_id for job_id, _dup in puts])
        return [JobResult(i, task_name=self.name, commit=commit, deduplicated=dup) for i, dup in puts]

    def _store_many(
        self, payloads: list[dict[str, Any]], joined: Any, keys: list[str] | None, limits: list[Any]
    ) -> list[tuple[int, bool]]:
        """``.map()``'s puts: spread over the shards, or in the caller's transaction on ``joined``; with
        unique ``keys``, each on its key's shard (``coordination/unique.py``); items under different
        concurrency limits (``limits``, one per item) each put with theirs. -> (id, deduplicated) each."""
        if any(item != limits[0] for item in limits):
            return store_by_limits(
                limits,
                lambda part, lim: self._store_many(
                    [payloads[i] for i in part], joined, None if keys is None else [keys[i] for i in part],
                    [lim] * len(part),
                ),
            )  # fmt: skip
        queue = self._prepare(get_queue(), joined)
        payloads, options = seal_puts(self, payloads, self._put_options())  # encrypted tasks' (encryption/)
        options["concurrency"] = limits[0]
        if keys is not None:
            return unique_jobs.store_many(self, queue, payloads, keys, joined, options)
        with tracing.sending(self.name, self.queue, options) as sending:
            if joined is None:
                ids = queue.put_parts(payloads, **options)
            else:  # the PostgreSQL store has one shard: one put_many is what put_parts would do, in the
                # caller's transaction; all it asks of the store on the caller's connection (lent_to)
                with in_callers_transaction(callers_alias(joined)), lent_to(queue, joined):
                    ids = queue.put_many(payloads, connection=joined, **options)
            sending.sent_many(ids)
        return [(job_id, False) for job_id in ids]

    # ------------------------------------------------------------------ results

    def get_result(self, result_id: int | str) -> JobResult:
        """The handle of this task's job ``result_id`` (``JobResult.load``), as ``django.tasks.Task``'s:
        ``JobNotFound`` if the store has no such job, ``JobMismatch`` if it is another task's."""
        result = JobResult.load(result_id)
        if result.job.name != self.name:
            raise JobMismatch(f"job {result.id} is a job of {result.job.name!r}, not of {self.name!r}")
        return result

    # ------------------------------------------------------------------ from async code
    # Django's Tasks names (``aenqueue``, ``aget_result``): the same jobs and handles as the sync forms. An
    # enqueue runs in Django's thread for sync code (``sync_to_async``, thread-sensitive, as Django's own
    # ``BaseTaskBackend.aenqueue``): it may run your code there (``job_enqueued`` receivers; the task itself
    # in IMMEDIATE mode) and that code may use the ORM, whose connections belong to a thread; in that thread
    # a surrounding ``transaction.atomic()`` of a sync caller is seen, as by ``.delay()``. The event loop
    # only awaits it.

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """``enqueue()`` from async code, without blocking the event loop."""
        return await sync_to_async(self._enqueue_maybe_on_commit, thread_sensitive=True)(args, kwargs)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """``delay()`` from async code, without blocking the event loop."""
        return await sync_to_async(self._enqueue_maybe_on_commit, thread_sensitive=True)(args, kwargs)

    async def aschedule_in(
        self, seconds: float | dt.timedelta, *args: P.args, **kwargs: P.kwargs
    ) -> JobResult:
        """``schedule_in()`` from async code, without blocking the event loop."""
        return await sync_to_async(self.schedule_in, thread_sensitive=True)(seconds, *args, **kwargs)

    async def aschedule_at(self, when: dt.datetime | float, *args: P.args, **kwargs: P.kwargs) -> JobResult:
        """``schedule_at()`` from async code, without blocking the event loop."""
        return await sync_to_async(self.schedule_at, thread_sensitive=True)(when, *args, **kwargs)

    async def amap(self, iterable: Iterable[Any], *args: Any, **kwargs: Any) -> list[JobResult]:
        """``map()`` from async code, without blocking the event loop (``iterable`` is read first, here)."""
        items = list(iterable)
        return await sync_to_async(self.map, thread_sensitive=True)(items, *args, **kwargs)

    async def aget_result(self, result_id: int | str) -> JobResult:
        """``get_result()`` from async code: the store is read on a thread of the event loop's default
        executor (a read runs none of your code, so it need not wait for Django's thread for sync code)."""
        return await asyncio.to_thread(self.get_result, result_id)

    # ------------------------------------------------------------------ internals

    def _payload(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {"args": list(args), "kwargs": dict(kwargs)}

    def _check_sizes(self, payloads: list[dict[str, Any]]) -> None:
        """``PayloadTooLarge`` naming the first item of ``.map()`` over ``MAX_PAYLOAD_BYTES``."""
        limit = get_config().max_payload_bytes
        for index, payload in enumerate(payloads):
            size = len(msgpack.packb(payload, use_bin_type=True, datetime=False))
            if size > limit:
                raise PayloadTooLarge(
                    f"item {index} of .map() of task {self.name!r} is {size:,} bytes encoded, over the limit "
                    f"of {limit:,} bytes (max_payload_bytes); nothing was stored. Store large data elsewhere "
                    f"and pass a reference."
                )

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, label: str = "") -> None:
        if not kwargs and len(args) == self._arity:
            return  # what Signature.bind would accept, without its cost (a single put's CPU counts)
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            where = f" ({label})" if label else ""
            message = f"task {self.name!r} cannot be called with these arguments{where}: {exc}"
            raise TypeError(message) from None

    def _check_storable(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, label: str = "") -> None:
        """``PayloadNotSerializable`` naming the first argument msgpack cannot encode."""
        bound = self._signature.bind(*args, **kwargs).arguments
        params = self._signature.parameters
        for pname, value in bound.items():
            kind = params[pname].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                items: list[tuple[str, Any]] = [(f"{pname}[{i}]", v) for i, v in enumerate(value)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                items = [(f"{pname}[{k!r}]", v) for k, v in value.items()]
            else:
                items = [(pname, value)]
            for argument, item in items:
                problem = codec.unstorable(item)
                if problem is not None:
                    where = f" ({label})" if label else ""
                    raise PayloadNotSerializable(
                        f"argument {argument!r} of task {self.name!r}{where} cannot be stored: "
                        f"{type(item).__name__} is not msgpack data ({problem}). Pass None, bool, int, "
                        f"float, str, bytes, or lists/dicts of those (an id rather than a model instance)."
                    )

    def _put_options(self, config: QueueMaxConfig | None = None) -> dict[str, Any]:
        timeout = self.timeout if self.timeout is not None else (config or get_config()).timeout
        return {
            "priority": self.priority,
            "queue": self.queue,
            "name": self.name,
            "max_retries": self.max_retries,
            "timeout": timeout,
            "delay": self.delay_seconds,
            "eta": self.eta,
            "metadata": (with_tags(self.metadata, self.tags) if self.tags else self.metadata) or None,
        }

    def _limits(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], config: QueueMaxConfig | None = None
    ) -> tuple[tuple[str, int], ...] | None:
        """The concurrency limits of one call (``concurrency.job_limits``; None: none)."""
        return job_limits(
            self.concurrency, self.queue, (config or get_config()).queue_concurrency, args, kwargs
        )

    def _prepare(self, queue: Queue, joined: Any = None) -> Queue:
        """Apply this task's rate limit and breaker to the store, once per ``Queue`` (the first enqueue in
        a process, and again after the settings changed). With ``joined`` (the caller's connection, in the
        transaction the job joins) they are read on it, and written after it commits (``conf.Applied``)."""
        if self._flow_applied.due(queue):
            self._flow_applied.apply(queue, joined, functools.partial(self._apply_flow, queue))
        return queue

    def _apply_flow(self, queue: Queue, write: bool) -> bool:
        """Read this task's limit and breaker in the store, and set them where they differ if ``write``.
        -> whether they differed (``coordination/flow.py``)."""
        return apply_flow(queue, self.name, self.rate_limit, self.circuit_breaker, write)

    def _enqueue_maybe_on_commit(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> JobResult:
        config = get_config()  # read once for the whole enqueue (a single put's client CPU counts)
        joined = caller_connection(config)  # the store's database, if the caller is in a transaction on it
        if joined is not None:  # stronger than waiting for the commit
            return self._enqueue(args, kwargs, connection=joined, config=config)
        if config.immediate or not waits_for_commit(self.enqueue_on_commit, config.enqueue_on_commit):
            return self._enqueue(args, kwargs, config=config)
        self._bind(args, kwargs)  # fail now, not at commit, on arguments that cannot be stored
        unique_jobs.keys_of(self, [(args, kwargs)])  # and on a key function that fails
        if codec.unstorable(self._payload(args, kwargs)) is not None:
            self._check_storable(args, kwargs)
        handle = JobResult(None, task_name=self.name)
        handle._commit = Commit(store=lambda: handle.bind(self._enqueue(args, kwargs)))
        return handle

    def _enqueue(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, connection: Any = None,
        config: QueueMaxConfig | None = None,
    ) -> JobResult:  # fmt: skip
        """Store the job now: on the store's own connection, or on ``connection`` (the caller's, in its
        transaction: ``conf.caller_connection()``). ``config``: ``get_config()``, if the caller has it."""
        config = config or get_config()
        self._bind(args, kwargs)
        payload = self._payload(args, kwargs)
        if codec.unstorable(payload) is not None:
            self._check_storable(args, kwargs)
        if config.immediate:
            return self._run_now(payload)
        queue = self._prepare(get_queue(), connection)
        options = self._put_options(config)
        options["concurrency"] = self._limits(args, kwargs, config)
        alias = None if connection is None else callers_alias(connection, config)
        with tracing.sending(self.name, self.queue, options) as sending:
            with in_callers_transaction(alias), lent_to(queue, connection):  # (a clock's reading too)
                job_id, dup = unique_jobs.store_one(self, queue, payload, args, kwargs, connection, options)
            sending.sent(job_id)
        return JobResult(job_id, task_name=self.name, commit=written(alias, [job_id]), deduplicated=dup)

    def _run_now(self, payload: dict[str, Any]) -> JobResult:
        """IMMEDIATE: store the job, then claim exactly that job and run it here, once, through the runner
        (a failure is final, as with Django's ImmediateBackend)."""
        queue = self._prepare(get_queue())
        options = {**self._put_options(), "delay": None, "eta": None}
        with tracing.sending(self.name, self.queue, options) as sending:
            job_id, dup = unique_jobs.store_one(
                self, queue, payload, payload["args"], payload["kwargs"], None, options
            )
            sending.sent(job_id)
        if not dup:
            run_now(queue, job_id)
        result = JobResult(job_id, task_name=self.name, deduplicated=dup)
        result.refresh()
        return result


class RetryableTask(Task[P, R]):
    """A task whose direct call retries in-process: an exception of ``retry_on`` is retried after the
    backoff, up to ``max_retries`` times. ``.delay()`` works as for any task (the worker retries)."""

    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def __init__(self, func: Callable[P, R], **options: Any) -> None:
        super().__init__(func, **options)
        # The direct call retries these; with no retry_on given, any Exception (the worker still classifies
        # with the engine's rules, so an HTTP 4xx fails there for good).
        self.direct_retry_on = self.retry_on or (Exception,)

    def _direct_retries(self) -> int:
        return 3 if self.max_retries is None else self.max_retries

    def _pause(self, attempt: int) -> float:
        base = 1.0 if self.retry_backoff is None else self.retry_backoff
        return backoff_delay(attempt, base)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.is_async:
            return self._call_async(*args, **kwargs)  # type: ignore[return-value]
        attempt = 0
        while True:
            try:
                return self.func(*args, **kwargs)
            except self.direct_retry_on:
                attempt += 1
                if attempt > self._direct_retries():
                    raise
                type(self).sleep(self._pause(attempt))

    async def _call_async(self, *args: Any, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                return await self.func(*args, **kwargs)  # type: ignore[misc]
            except self.direct_retry_on:
                attempt += 1
                if attempt > self._direct_retries():
                    raise
                await asyncio.sleep(self._pause(attempt))


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...
@overload
def task(
    *,
    name: str | None = ...,
    priority: int = ...,
    queue: str = ...,
    max_retries: int | None = ...,
    retry_backoff: float | None = ...,
    timeout: float | None = ...,
    rate_limit: str | int | tuple[int, float] | None = ...,
    circuit_breaker: bool | Mapping[str, Any] | None = ...,
    retry_on: ExceptionTypes = ...,
    permanent_on: ExceptionTypes = ...,
    unique_key: KeyOption = ...,
    unique_until: str | float = ...,
    on_duplicate: str = ...,
    tags: Sequence[str] = ...,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...
def task(func: Callable[P, R] | None = None, /, **options: Any) -> Any:
    """Make a function a task: ``@task`` or ``@task(priority=..., queue=..., ...)``; registers it."""

    def decorate(function: Callable[P, R]) -> Task[P, R]:
        made: Task[P, R] = Task(function, **options)
        registry.register(made)
        return made

    return decorate if func is None else decorate(func)


@overload
def retryable_task(func: Callable[P, R], /) -> RetryableTask[P, R]: ...
@overload
def retryable_task(
    *,
    max_retries: int | None = ...,
    retry_on: ExceptionTypes = ...,
    retry_backoff: float | None = ...,
    name: str | None = ...,
    priority: int = ...,
    queue: str = ...,
    timeout: float | None = ...,
    rate_limit: str | int | tuple[int, float] | None = ...,
    circuit_breaker: bool | Mapping[str, Any] | None = ...,
    permanent_on: ExceptionTypes = ...,
) -> Callable[[Callable[P, R]], RetryableTask[P, R]]: ...
def retryable_task(func: Callable[P, R] | None = None, /, **options: Any) -> Any:
    """``@task`` whose direct call also retries: ``retry_on`` (default: ``Exception``) errors are retried
    ``max_retries`` times (default 3) after the backoff (``retry_backoff``, default 1 s, doubling)."""

    def decorate(function: Callable[P, R]) -> RetryableTask[P, R]:
        made: RetryableTask[P, R] = RetryableTask(function, **options)
        registry.register(made)
        return made

    return decorate if func is None else decorate(func)
