"""OpenTelemetry spans (observability/tracing.py) with the SDK's in-memory exporter: the enqueue span is a
PRODUCER child of the enqueuing code's span, its context travels in the job's metadata, and the run span is a
CONSUMER child of it, in the same trace; a failed run is an error span. Without the API installed, nothing is
imported and nothing is added to the metadata. Through the Django layer: ``.delay()``, ``.map()`` and the
django.tasks backend store the context under the reserved key ``_trace`` (not in ``JobResult.metadata``),
and running the job (in-process, as the worker's runner does) makes the CONSUMER span in the same trace."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from queue_max_django import JobResult
from queue_max_django.conf import get_queue
from queue_max_django.observability import tracing
from queue_max_django.testing import run_queued
from tests.testapp import tasks as t


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test, from an SDK provider of the test's own that tracing.py's tracer
    comes from for the test (never the global provider: set once, it would trace every later test's jobs)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.enabled()
    trace_api, propagate, status, _tracer = tracing._api
    monkeypatch.setattr(
        tracing, "_api", (trace_api, propagate, status, provider.get_tracer("queue_max_django"))
    )
    monkeypatch.setattr(sys.modules[__name__], "TEST_TRACER", provider.get_tracer("test"))
    yield exporter
    provider.shutdown()


TEST_TRACER: trace.Tracer = trace.get_tracer("test")  # the fixture's provider's, during a test


def test_a_job_run_is_a_consumer_child_of_the_producer_span_that_enqueued_it(
    spans: InMemorySpanExporter,
) -> None:
    with TEST_TRACER.start_as_current_span("GET /signup") as request:
        with tracing.sending("app.send_mail", "mail") as sending:
            sending.sent(4096)
        metadata = tracing.metadata_with_trace({"user": 7}, sending)
    assert metadata is not None and metadata["user"] == 7
    assert set(metadata[tracing.TRACE_KEY]) >= {"traceparent"}

    with tracing.processing("app.send_mail", "mail", 4096, 1, metadata):
        pass  # another thread or machine in real life: only the metadata connects them

    by_name = {span.name: span for span in spans.get_finished_spans()}
    send, process = by_name["send mail"], by_name["process mail"]
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.context.trace_id == send.context.trace_id == request.get_span_context().trace_id
    assert send.attributes["messaging.destination.name"] == "mail"
    assert send.attributes["messaging.message.id"] == "4096"
    assert dict(process.attributes) == {
        "messaging.system": "queue_max_django",
        "messaging.operation.type": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": "4096",
        "queue_max.task": "app.send_mail",
        "queue_max.attempt": 1,
    }
    assert process.status.status_code is StatusCode.UNSET


def test_a_failed_run_records_its_exception_and_an_error_status(spans: InMemorySpanExporter) -> None:
    with tracing.processing("app.charge", "default", 512, 3, None) as run:
        run.failed(ValueError("card declined"))
    (span,) = spans.get_finished_spans()
    assert span.parent is None  # nothing was stored: a root span
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: card declined"
    assert [event.name for event in span.events] == ["exception"]
    assert span.attributes["queue_max.attempt"] == 3


def test_an_exception_raised_inside_an_enqueue_span_is_recorded_and_propagates(
    spans: InMemorySpanExporter,
) -> None:
    with pytest.raises(RuntimeError), tracing.sending("app.task", "default"):
        raise RuntimeError("store unavailable")
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR


def test_without_the_api_nothing_is_imported_and_the_metadata_is_unchanged() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        from queue_max_django.observability import tracing
        assert not tracing.enabled()
        with tracing.sending("t", "default") as sending:
            sending.sent(1)
        assert sending.carrier == {}
        assert tracing.metadata_with_trace(None, sending) is None
        assert tracing.metadata_with_trace({"a": 1}, sending) == {"a": 1}
        with tracing.processing("t", "default", 1, 1, {"_trace": {"traceparent": "x"}}) as run:
            run.failed(ValueError("x"))
        assert not any(name.startswith("opentelemetry.") for name in sys.modules)
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------------------------------------------ the Django layer


def raw_metadata(result: JobResult) -> dict[str, object]:
    job = get_queue().job(result.job_id)
    assert job is not None
    return job.metadata


def test_a_delayed_task_runs_in_a_span_that_is_a_child_of_the_request_that_enqueued_it(
    spans: InMemorySpanExporter, queue_max: object
) -> None:
    with queue_max():  # type: ignore[operator]
        with TEST_TRACER.start_as_current_span("POST /orders") as request:
            result = t.add.using(metadata={"order": 9}).delay(2, 3)
        assert set(raw_metadata(result)) == {"order", tracing.TRACE_KEY}
        assert result.metadata == {"order": 9}  # the reserved key is the backend's, not the user's
        run_queued()
        result.refresh()
        assert result.return_value == 5
    by_name = {span.name: span for span in spans.get_finished_spans()}
    send, process = by_name["send default"], by_name["process default"]
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.context.trace_id == request.get_span_context().trace_id
    assert send.attributes["messaging.message.id"] == str(result.job_id)
    assert process.attributes["queue_max.task"] == t.add.name
    assert process.attributes["queue_max.attempt"] == 1


def test_a_failing_job_ends_its_span_with_the_error(spans: InMemorySpanExporter, queue_max: object) -> None:
    with queue_max():  # type: ignore[operator]
        t.fail_always.using(max_retries=0).delay("card declined")
        run_queued()
    (process,) = [span for span in spans.get_finished_spans() if span.name.startswith("process")]
    assert process.status.status_code is StatusCode.ERROR
    assert [event.name for event in process.events] == ["exception"]


def test_a_map_is_one_send_span_whose_context_every_job_carries(
    spans: InMemorySpanExporter, queue_max: object
) -> None:
    with queue_max():  # type: ignore[operator]
        results = t.add.map([1, 2, 3], 10)
        carriers = {str(raw_metadata(result)[tracing.TRACE_KEY]) for result in results}
        run_queued()
    sends = [span for span in spans.get_finished_spans() if span.name.startswith("send")]
    processes = [span for span in spans.get_finished_spans() if span.name.startswith("process")]
    assert len(sends) == 1 and len(carriers) == 1
    assert sends[0].attributes["messaging.batch.message_count"] == 3
    assert len(processes) == 3
    assert {span.parent.span_id for span in processes if span.parent} == {sends[0].context.span_id}


def test_with_the_api_but_no_sdk_configured_nothing_is_added_to_a_job(queue_max: object) -> None:
    """OpenTelemetry's default provider makes no-op spans: there is no context to carry."""
    assert tracing.enabled()
    with queue_max():  # type: ignore[operator]
        result = t.add.delay(1, 2)
        assert raw_metadata(result) == {}


@pytest.mark.skipif(
    importlib.util.find_spec("django.tasks") is None, reason="django.tasks needs Django >= 6.0"
)
def test_a_django_tasks_job_is_traced_like_an_at_task_one(
    spans: InMemorySpanExporter, queue_max: object
) -> None:
    from tests.testapp import metadata_django_tasks as dmt

    with (
        queue_max(),  # type: ignore[operator]
        override_settings(TASKS={"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}),
    ):
        with TEST_TRACER.start_as_current_span("GET /report") as request:
            result = dmt.noop_task.enqueue()
        assert tracing.TRACE_KEY in get_queue().job(int(result.id)).metadata  # type: ignore[union-attr]
        run_queued()
    by_kind = {span.kind: span for span in spans.get_finished_spans() if span.name != "GET /report"}
    send, process = by_kind[SpanKind.PRODUCER], by_kind[SpanKind.CONSUMER]
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert process.attributes["queue_max.task"] == dmt.noop_task.module_path
