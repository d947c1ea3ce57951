"""What a worker skips per job when it has nothing to do, and that it still does it when it has (issue 35, CPU
per job): ``close_old_connections()`` only in a thread that opened a database connection
(``worker/dbconns.py``), a task's ``JobContext`` made only when the task asks for it (``RunningJob``), and no
run span when tracing would record nothing, while a stored enqueue context still reaches the task."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from queue_max_django import conf, context, current_job, signals, task
from queue_max_django.engine import State
from queue_max_django.observability import tracing
from queue_max_django.running.outcome import Outcome
from queue_max_django.testing import run_queued
from queue_max_django.worker import dbconns
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess

seen: list[Any] = []


@task(name="tests.hot_path.no_database")
def no_database(n: int) -> int:
    seen.append(("no_database", n, dbconns.opened()))
    return n


@task(name="tests.hot_path.database")
def database() -> None:
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    seen.append(("database", None, dbconns.opened()))
    # Django never closes a connection to an in-memory test database (its close() does nothing there):
    # this thread's is closed here, or it would be left to the garbage collector once the thread ended
    BaseDatabaseWrapper.close(connection)


@task(name="tests.hot_path.asks_twice")
def asks_twice() -> bool:
    first = current_job()
    first.metadata["seen"] = first.job_id
    return current_job() is first


@task(name="tests.hot_path.trace_id")
def trace_id() -> None:
    from opentelemetry import trace

    seen.append(trace.get_current_span().get_span_context().trace_id)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[None]:
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "store", "SHARDS": 1}):  # one shard: FIFO
        conf.reset()
        signals.reset_stats()
        seen.clear()
        yield
        conf.reset()
        signals.reset_stats()


def drain() -> None:
    """Run everything queued through one worker thread of a worker process, in this process (burst)."""
    options = WorkerOptions(processes=1, threads=1, burst=True, scheduler=False, verbosity=0)
    assert WorkerProcess(conf.get_queue(), options, 0).run() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("store")
def test_close_old_connections_runs_around_jobs_only_once_the_thread_opened_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = dbconns.close_old_connections

    def counted() -> None:
        calls.append(threading.current_thread().name)
        real()

    monkeypatch.setattr(dbconns, "close_old_connections", counted)
    for n in range(2):
        no_database.delay(n)
    database.delay()
    for n in range(2, 4):
        no_database.delay(n)
    drain()

    assert seen == [("no_database", 0, False), ("no_database", 1, False), ("database", None, True),
                    ("no_database", 2, True), ("no_database", 3, True)]  # fmt: skip
    # none around the first two jobs, none before the one that connects; after it, and around the last two
    assert len(calls) == 1 + 2 * 2
    assert all(name.startswith("queue-worker-0-") for name in calls)
    assert conf.get_queue().stats()["done"] == 5


@pytest.mark.usefixtures("store")
def test_a_jobs_context_is_made_only_when_its_task_asks_and_then_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[int] = []
    real_init = context.JobContext.__init__

    def init(self: context.JobContext, record: Any, task_name: str | None) -> None:
        made.append(record.job_id)
        real_init(self, record, task_name)

    monkeypatch.setattr(context.JobContext, "__init__", init)
    no_database.delay(7)
    asking = asks_twice.delay()
    outcomes = run_queued()

    assert [outcome.state for outcome in outcomes] == [State.DONE, State.DONE]
    assert made == [asking.job_id]  # the task that never asked made none; the one that asked twice, one
    assert outcomes[1].result is True
    stored = conf.get_queue().job(asking.job_id)
    assert stored is not None and stored.metadata.get("seen") == asking.job_id  # what it changed is saved


def test_outcome_done_is_the_outcome_the_dataclass_builds() -> None:
    built = Outcome(12, State.DONE, result={"a": 1})
    fast = Outcome.done(12, {"a": 1})
    assert fast == built and hash(Outcome.done(3)) == hash(Outcome(3, State.DONE))
    assert (fast.job_id, fast.state, fast.result, fast.error, fast.reason) == (
        12,
        State.DONE,
        {"a": 1},
        None,
        None,
    )
    with pytest.raises(AttributeError):
        fast.state = State.FAILED  # type: ignore[misc]  # frozen, as the dataclass's


@pytest.mark.usefixtures("store")
def test_without_an_sdk_a_run_makes_no_span_but_a_stored_enqueue_context_still_reaches_the_task() -> None:
    from opentelemetry import trace

    assert tracing.enabled()
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"  # no SDK set in this process
    assert tracing.processing("t", "default", 1, 1, None) is tracing.UNTRACED
    assert tracing.processing("t", "default", 1, 1, {"user": 1}) is tracing.UNTRACED

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.processing("t", "default", 1, 1, {tracing.TRACE_KEY: {"traceparent": parent}}) is not (
        tracing.UNTRACED
    )
    trace_id.delay()
    conf.get_queue().put(
        {"args": [], "kwargs": {}},
        name="tests.hot_path.trace_id",
        metadata={tracing.TRACE_KEY: {"traceparent": parent}},
    )  # as an enqueue span stores it
    run_queued()
    assert sorted(seen) == [0, 0x0AF7651916CD43DD8448EB211C80319C]  # none; the enqueue's trace, in the task


PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.usefixtures("store")
def test_without_an_sdk_an_enqueue_makes_no_span_but_carries_a_remote_parent_it_runs_under() -> None:
    """``tracing.sending`` with the API's no-op tracer: no span (about 8 us of a .delay()'s 36 on LMDB);
    the job's metadata gets no ``_trace`` unless a context is current (a remote parent an instrumentation
    made current), which it then carries as it is, so that the run joins that trace."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"  # no SDK set in this process
    options: dict[str, Any] = {"metadata": None}
    with tracing.sending("t", "default", options) as handle:
        assert handle.carrier == {} and options == {"metadata": None}
    remote = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331, is_remote=True,
        trace_flags=trace.TraceFlags(1),
    )  # fmt: skip
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
    try:
        with tracing.sending("t", "default") as handle:
            assert handle._span is None  # no span started: it would have recorded nothing
            assert handle.carrier == {
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            }
        job_id = trace_id.delay().job_id
    finally:
        otel_context.detach(token)
    job = conf.get_queue().job(job_id)
    assert job is not None
    assert job.metadata[tracing.TRACE_KEY] == {"traceparent": PARENT}
    seen.clear()
    run_queued()
    assert seen == [0x0AF7651916CD43DD8448EB211C80319C]  # the task ran in the remote parent's trace


def test_without_an_sdk_an_enqueue_in_an_empty_context_asks_no_propagator() -> None:
    """With the no-op tracer and no context current (OpenTelemetry's empty ``Context``) there is nothing
    to carry: ``tracing.sending`` does not call the propagator at all (its cost was a tenth of a single
    put's Python on PostgreSQL), and still does when a context is current."""
    from opentelemetry import context as otel_context
    from opentelemetry import propagate

    calls: list[dict[str, Any]] = []

    class Spy:
        fields: set[str] = {"x-spy"}

        def inject(self, carrier: dict[str, str], context: Any = None, setter: Any = None) -> None:
            calls.append(dict(otel_context.get_current()))
            carrier["x-spy"] = "1"

        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            return context

    before = propagate.get_global_textmap()
    propagate.set_global_textmap(Spy())  # type: ignore[arg-type]
    try:
        assert not otel_context.get_current()
        with tracing.sending("t", "default") as handle:
            assert handle.carrier == {}
        assert calls == []
        token = otel_context.attach(otel_context.set_value("a", 1))
        try:
            with tracing.sending("t", "default") as handle:
                assert handle.carrier == {"x-spy": "1"}
        finally:
            otel_context.detach(token)
        assert calls == [{"a": 1}]
    finally:
        propagate.set_global_textmap(before)
