"""OpenTelemetry spans for enqueueing and running jobs, when ``opentelemetry-api`` is installed (the ``otel``
extra); without it nothing here imports anything or costs more than one flag check per job.

- Enqueueing is a ``PRODUCER`` span, ``send {queue}``, in the enqueuing code's current context (a request's
  span, under Django's or any other instrumentation). Its context travels with the job, in the job's
  metadata under the reserved key ``_trace`` (W3C ``traceparent``/``tracestate``, through the globally
  configured propagator).
- Running is a ``CONSUMER`` span, ``process {queue}``, whose parent is that context: a job's span is a child
  of the span that enqueued it, in the same trace, on whichever machine runs it. A failed attempt records
  its exception and sets the span's status to error.

Attributes follow OpenTelemetry's messaging conventions: ``messaging.system`` (``queue_max_django``),
``messaging.operation.type`` (``send``/``process``), ``messaging.destination.name`` (the queue),
``messaging.message.id`` (the job id); and ``queue_max.task`` (the task's name) and ``queue_max.attempt``
(the attempt being run, from 1).

The spans are made by the tracer provider the project configures (``opentelemetry-sdk`` and an exporter:
see docs/howto/monitoring.md); with the API alone they are OpenTelemetry's no-op spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from ..engine.validate import error_text

TRACE_KEY = "_trace"  # the job metadata's key for the enqueuing span's context (``_`` keys: the backend's)
SYSTEM = "queue_max_django"

_api: Any = None  # (trace, propagate, StatusCode, tracer) once imported; False when not installed
_no_op: Any = ()  # the API's NoOpTracer class, once imported (no class matches the empty tuple before)
_current: Any = None  # the API's context.get_current, once imported


def _load() -> Any:
    global _api, _no_op, _current
    if _api is None:
        try:
            from opentelemetry import context, propagate, trace
            from opentelemetry.trace import StatusCode
        except ImportError:
            _api = False
        else:
            _no_op = getattr(trace, "NoOpTracer", ())
            _api = (trace, propagate, StatusCode, trace.get_tracer("queue_max_django"))
            _current = context.get_current
    return _api


def _records_nothing(tracer: Any) -> bool:
    """Is ``tracer`` OpenTelemetry's no-op one: the API without an SDK (its proxy tracer's stand-in until a
    tracer provider is set), or a ``NoOpTracerProvider``'s? Its spans record nothing and carry only the
    context they were started in."""
    inner = getattr(tracer, "_tracer", tracer)  # a ProxyTracer: what it hands calls to now
    return isinstance(inner, _no_op)


def enabled() -> bool:
    """Is ``opentelemetry-api`` importable here? (Imported once, on the first call.)"""
    return bool(_load())


class Sending:
    """The enqueue span's handle: ``carrier`` is what goes into the job's metadata (empty when nothing is
    traced); ``sent(job_id)`` names the job once the store gave it an id."""

    __slots__ = ("_span", "carrier")

    def __init__(self, span: Any, carrier: dict[str, str]) -> None:
        self._span = span
        self.carrier = carrier

    def sent(self, job_id: int | None) -> None:
        if self._span is not None and job_id is not None:
            self._span.set_attribute("messaging.message.id", str(job_id))

    def sent_many(self, job_ids: list[int]) -> None:
        if self._span is not None:
            self._span.set_attribute("messaging.batch.message_count", len(job_ids))


_NOT_TRACED = Sending(None, {})
_NULL_SEND = contextlib.nullcontext(_NOT_TRACED)  # reusable: what sending() is without the API


def sending(
    task_name: str, queue: str, options: dict[str, Any] | None = None
) -> contextlib.AbstractContextManager[Sending]:
    """Around one enqueue (or one batch of a ``.map()``): a PRODUCER span in the current context, and the
    carrier of its context for the jobs' metadata, put into ``options["metadata"]`` (the put's options)
    when there is one (``metadata_with_trace``). Without the API: a no-op context whose handle carries
    nothing, ``options`` untouched. With the API's no-op tracer (no SDK configured) no span is made: such a
    span would record nothing and carry only the current context, which is then put in the carrier as it is
    (a remote parent an instrumentation made current), or nothing when there is none (an empty
    context is not even handed to the propagator: a single put's CPU counts). An exception raised
    inside is recorded on the span and propagates."""
    api = _api or _load()
    if not api:
        return _NULL_SEND
    if _records_nothing(api[3]):
        if not _current():  # an empty context: nothing to carry (nor a propagator's cost to find so)
            return _NULL_SEND
        carrier: dict[str, str] = {}
        api[1].inject(carrier)
        if not carrier:
            return _NULL_SEND
        handle = Sending(None, carrier)
        if options is not None:
            options["metadata"] = metadata_with_trace(options.get("metadata"), handle)
        return contextlib.nullcontext(handle)
    return _sending(task_name, queue, options)


@contextlib.contextmanager
def _sending(task_name: str, queue: str, options: dict[str, Any] | None) -> Iterator[Sending]:
    trace, propagate, _status, tracer = _api
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "queue_max.task": task_name,
    }
    with tracer.start_as_current_span(
        f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        handle = Sending(span, carrier)
        if options is not None and carrier:  # the enqueue span's context, for the run's span
            options["metadata"] = metadata_with_trace(options.get("metadata"), handle)
        yield handle


def metadata_with_trace(metadata: Mapping[str, Any] | None, sending: Sending) -> dict[str, Any] | None:
    """``metadata`` with the enqueue span's context under ``TRACE_KEY`` (a copy), or as it was when nothing
    is traced."""
    if not sending.carrier:
        return None if metadata is None else dict(metadata)
    return {**(metadata or {}), TRACE_KEY: dict(sending.carrier)}


class Processing:
    """The run span's handle: ``failed(exc)`` records a failed attempt on it."""

    __slots__ = ("_span", "_status")

    def __init__(self, span: Any, status: Any) -> None:
        self._span = span
        self._status = status

    def failed(self, error: BaseException | str) -> None:
        span = self._span
        if span is None:
            return
        if isinstance(error, BaseException):
            span.record_exception(error)
            description = f"{type(error).__name__}: {error_text(error)}"
        else:
            description = error
        span.set_status(self._status.ERROR, description)


_NOT_PROCESSED = Processing(None, None)
_NULL_RUN = contextlib.nullcontext(_NOT_PROCESSED)
UNTRACED = _NULL_RUN  # what ``processing`` returns when nothing is traced: a caller may skip the ``with``
NOT_PROCESSED = _NOT_PROCESSED  # its handle


def processing(
    task_name: str | None, queue: str, job_id: int, attempt: int, metadata: Mapping[str, Any] | None
) -> contextlib.AbstractContextManager[Processing]:
    """Around one run of a job: a CONSUMER span whose parent is the context its enqueue stored in
    ``metadata`` (none stored: a root span, or a child of the current context). Without the API, or with
    the API's no-op tracer (no SDK configured) and no enqueue context stored: a no-op context
    (``UNTRACED``). Such a span would record nothing, and would only make the context it started in
    current again, which is current already. (With a stored context the no-op span still carries it to
    the task: what the task enqueues joins that trace.)"""
    api = _api or _load()
    if not api or (_records_nothing(api[3]) and not (metadata and TRACE_KEY in metadata)):
        return _NULL_RUN
    return _processing(task_name, queue, job_id, attempt, metadata)


@contextlib.contextmanager
def _processing(
    task_name: str | None, queue: str, job_id: int, attempt: int, metadata: Mapping[str, Any] | None
) -> Iterator[Processing]:
    trace, propagate, status, tracer = _api
    carrier = metadata.get(TRACE_KEY) if metadata else None
    parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": str(job_id),
        "queue_max.task": task_name or "",
        "queue_max.attempt": attempt,
    }
    with tracer.start_as_current_span(
        f"process {queue}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield Processing(span, status)
