"""@task / @retryable_task: registration, enqueueing (what lands on disk), options, .map, IMMEDIATE,
on-commit."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

import queue_max_django
from queue_max_django.conf import get_queue
from queue_max_django.engine import PayloadNotSerializable, State, parse_rate
from queue_max_django.results import JobNotEnqueued, JobResult, JobStatus
from queue_max_django.tasks import RetryableTask, Task, registry, task
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max():
        yield


@pytest.fixture(autouse=True)
def _clean_fixture_state() -> Iterator[None]:
    t.CALLS.clear()
    t.ATTEMPTS.clear()
    yield
    t.CALLS.clear()
    t.ATTEMPTS.clear()


def on_disk(result: JobResult) -> Any:
    job = get_queue().job(result.job_id)
    assert job is not None
    return job


# ------------------------------------------------------------------------------------------ registration


def test_package_exports_the_decorators_lazily() -> None:
    assert queue_max_django.task is task
    assert queue_max_django.retryable_task.__module__ == "queue_max_django.tasks"
    with pytest.raises(AttributeError):
        _ = queue_max_django.no_such_name  # type: ignore[attr-defined]


def test_autodiscovered_tasks_are_registered_under_module_qualname() -> None:
    assert registry["tests.testapp.tasks.add"] is t.add
    assert registry["testapp.custom"] is t.custom_name
    assert isinstance(t.add, Task)
    assert isinstance(t.flaky_direct, RetryableTask)


def test_a_direct_call_runs_the_function_here() -> None:
    assert t.add(2, 3) == 5
    assert t.add.__name__ == "add"
    assert t.add.__doc__ is None


@pytest.mark.usefixtures("scratch_registry")  # the conflict it makes would fail later tests' system checks
def test_a_second_function_under_a_taken_name_is_refused_and_reported() -> None:
    def other() -> None: ...

    before = registry["testapp.custom"]
    task(name="testapp.custom")(other)
    assert registry["testapp.custom"] is before
    refused = f"{other.__module__}.{other.__qualname__}"
    assert ("testapp.custom", before.path, refused) in registry.conflicts()


def test_bad_options_fail_at_decoration() -> None:
    def f() -> None: ...

    with pytest.raises(ValueError, match="priority"):
        Task(f, priority=101)
    with pytest.raises(ValueError, match="max_retries"):
        Task(f, max_retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        Task(f, timeout=0)
    with pytest.raises(ValueError, match="rate"):
        Task(f, rate_limit="often")
    with pytest.raises(TypeError, match="retry_on"):
        Task(f, retry_on=("not an exception",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="THRESHOLD"):
        Task(f, circuit_breaker={"LIMIT": 3})


# ------------------------------------------------------------------------------------------ enqueueing


@pytest.mark.usefixtures("store")
def test_delay_stores_one_pending_job_named_after_the_task() -> None:
    result = t.add.delay(2, b=3)
    job = on_disk(result)
    assert job.state is State.PENDING
    assert job.name == "tests.testapp.tasks.add"
    assert job.payload == {"args": [2], "kwargs": {"b": 3}}
    assert job.queue == "default" and job.priority == 0
    assert job.max_retries == 3  # the queue's default
    assert result.id == str(job.job_id)
    assert result.status is JobStatus.READY


@pytest.mark.usefixtures("store")
def test_enqueue_is_delay() -> None:
    job = on_disk(t.echo.enqueue("x", flag=True))
    assert job.payload == {"args": ["x"], "kwargs": {"flag": True}}


@pytest.mark.usefixtures("store")
def test_task_options_are_stored_with_the_job() -> None:
    job = on_disk(t.send_mail.delay("a@example.com"))
    assert (job.queue, job.priority, job.max_retries, job.timeout) == ("mail", 10, 0, 5.0)
    assert on_disk(t.custom_name.delay()).name == "testapp.custom"


def test_the_default_timeout_comes_from_the_settings(queue_max: Configure) -> None:
    with queue_max(TIMEOUT=42):
        assert on_disk(t.add.delay(1, 2)).timeout == 42.0
        assert on_disk(t.send_mail.delay("x")).timeout == 5.0


@pytest.mark.usefixtures("store")
def test_using_returns_a_copy_with_other_options() -> None:
    urgent = t.send_mail.using(priority=50, queue="urgent")
    job = on_disk(urgent.delay("b@example.com"))
    assert (job.queue, job.priority, job.name) == ("urgent", 50, "tests.testapp.tasks.send_mail")
    assert (t.send_mail.priority, t.send_mail.queue) == (10, "mail")
    assert registry["tests.testapp.tasks.send_mail"] is t.send_mail
    with pytest.raises(ValueError, match="priority"):
        t.add.using(priority=-101)


@pytest.mark.usefixtures("store")
def test_schedule_in_and_at_store_scheduled_jobs() -> None:
    before = time.time()
    job = on_disk(t.add.schedule_in(60, 1, 2))
    assert job.state is State.SCHEDULED
    assert before + 59 <= job.eta <= time.time() + 61
    when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = on_disk(t.add.schedule_at(when, 1, 2))
    assert job.state is State.SCHEDULED
    assert job.eta == pytest.approx(when.timestamp(), abs=0.01)
    assert on_disk(t.add.using(delay=30).delay(1, 2)).state is State.SCHEDULED
    assert t.add.delay_seconds is None


@pytest.mark.usefixtures("store")
def test_an_argument_msgpack_cannot_encode_fails_at_delay_naming_it() -> None:
    with pytest.raises(PayloadNotSerializable, match=r"argument 'b' of task 'tests.testapp.tasks.add'"):
        t.add.delay(1, object())
    with pytest.raises(PayloadNotSerializable, match=r"argument \"kwargs\['when'\]\""):
        t.echo.delay(1, when=dt.datetime.now(dt.UTC))
    with pytest.raises(PayloadNotSerializable, match=r"argument 'args\[1\]'"):
        t.echo.delay(1, {1, 2})
    assert get_queue().stats()["total"] == 0


@pytest.mark.usefixtures("store")
def test_arguments_that_do_not_fit_the_signature_fail_at_delay() -> None:
    with pytest.raises(TypeError, match="cannot be called with these arguments"):
        t.add.delay(1)  # type: ignore[call-arg]
    assert get_queue().stats()["total"] == 0


@pytest.mark.usefixtures("store")
def test_rate_limit_is_applied_to_the_store_at_first_enqueue() -> None:
    queue = get_queue()
    assert "name:tests.testapp.tasks.limited" not in queue.rate_limits()
    t.limited.delay()
    assert queue.rate_limits()["name:tests.testapp.tasks.limited"] == parse_rate("10/m")


def test_circuit_breakers_are_applied_at_first_enqueue(queue_max: Configure) -> None:
    with queue_max(CIRCUIT_BREAKER={"THRESHOLD": 7, "TIMEOUT": 9}):
        t.guarded.delay()
        t.guarded_default.delay()
        breakers = get_queue().circuit_breakers()
        assert breakers["name:tests.testapp.tasks.guarded"]["threshold"] == 2
        assert breakers["name:tests.testapp.tasks.guarded"]["recovery_timeout"] == 30.0
        assert breakers["name:tests.testapp.tasks.guarded_default"]["threshold"] == 7
        assert breakers["name:tests.testapp.tasks.guarded_default"]["recovery_timeout"] == 9.0


# ------------------------------------------------------------------------------------------ .map


@pytest.mark.lmdb  # four shards (the PostgreSQL store has one: a .map() is one put_many there)
def test_map_puts_one_job_per_item_spread_over_the_shards(queue_max: Configure) -> None:
    with queue_max(SHARDS=4):
        results = t.add.map(range(20), 100)
        jobs = [on_disk(result) for result in results]
        assert [job.payload for job in jobs] == [{"args": [i, 100], "kwargs": {}} for i in range(20)]
        assert {job.shard for job in jobs} == {0, 1, 2, 3}
        assert all(job.name == "tests.testapp.tasks.add" for job in jobs)
        assert t.add.map([]) == []


@pytest.mark.usefixtures("store")
def test_map_writes_nothing_when_one_item_cannot_be_stored() -> None:
    with pytest.raises(PayloadNotSerializable, match=r"argument 'a' of task .* \(item 2 of .map\(\)\)"):
        t.add.map([1, 2, object(), 4], 1)
    assert get_queue().stats()["total"] == 0


# ------------------------------------------------------------------------------------------ IMMEDIATE


def test_immediate_runs_the_job_inline_and_returns_a_finished_handle(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        result = t.add.delay(2, 3)
        assert result.status is JobStatus.SUCCESSFUL
        assert result.return_value == 5
        assert on_disk(result).state is State.DONE


def test_immediate_failure_gives_a_failed_handle_and_nothing_propagates(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True, MAX_RETRIES=2):
        result = t.fail_always.delay("boom")
        assert result.status is JobStatus.FAILED
        assert result.attempts == 1  # one run, as Django's ImmediateBackend: a failure is final
        assert result.errors[0].exception_class_path == "builtins.ValueError"
        assert on_disk(result).state is State.FAILED


def test_immediate_runs_only_its_own_job_once(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=False):
        waiting = t.add.delay(1, 1)  # stored, not run: a worker's job
    with queue_max(IMMEDIATE=True):
        result = t.flaky.delay("k", 2)
        assert result.status is JobStatus.FAILED  # flaky fails its first run; no inline retries
        assert result.attempts == 1
        assert on_disk(waiting).state is State.PENDING  # the job queued before was not run on the way


def test_immediate_map_and_schedule_run_at_once(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        assert [r.return_value for r in t.add.map([1, 2, 3], 10)] == [11, 12, 13]
        assert t.add.schedule_in(3600, 1, 1).return_value == 2


# ------------------------------------------------------------------------------------------ on commit


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("store")
def test_delay_on_commit_enqueues_after_commit_and_never_on_rollback() -> None:
    queue = get_queue()
    with transaction.atomic():
        assert t.record_call.delay_on_commit("kept") is None
        assert queue.stats()["total"] == 0
    assert [job.payload["args"] for job in queue.jobs(State.PENDING)] == [["kept"]]
    with pytest.raises(RuntimeError), transaction.atomic():
        t.record_call.delay_on_commit("dropped")
        raise RuntimeError
    assert queue.stats()["total"] == 1


# ------------------------------------------------------------------------------------------ retryable


def test_retryable_task_retries_a_direct_call_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(RetryableTask, "sleep", staticmethod(pauses.append))
    assert t.flaky_direct("a", 2) == "ok"
    assert t.ATTEMPTS["a"] == 3
    assert len(pauses) == 2
    assert 0.4 <= pauses[0] <= 0.6 and 0.8 <= pauses[1] <= 1.2


def test_retryable_task_gives_up_after_max_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RetryableTask, "sleep", staticmethod(lambda seconds: None))
    with pytest.raises(ConnectionError, match="attempt 3"):
        t.flaky_direct("b", 5)
    assert t.ATTEMPTS["b"] == 3


@pytest.mark.usefixtures("store")
def test_retryable_task_still_delays_like_a_task() -> None:
    job = on_disk(t.flaky_direct.delay("c", 0))
    assert job.state is State.PENDING and job.max_retries == 2
    assert t.ATTEMPTS["c"] == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_makes_delay_wait_for_the_commit(queue_max: Configure) -> None:
    with queue_max(ENQUEUE_ON_COMMIT=True):
        queue = get_queue()
        with transaction.atomic():
            handle = t.record_call.delay("kept")
            assert not handle.is_enqueued and handle.status is JobStatus.READY
            with pytest.raises(JobNotEnqueued):
                _ = handle.id
            with pytest.raises(PayloadNotSerializable, match="argument 'value'"):
                t.record_call.delay(object())
            assert queue.stats()["total"] == 0
        assert handle.is_enqueued
        assert on_disk(handle).payload == {"args": ["kept"], "kwargs": {}}
        with pytest.raises(RuntimeError), transaction.atomic():
            dropped = t.record_call.delay("dropped")
            raise RuntimeError
        assert not dropped.is_enqueued
        assert queue.stats()["total"] == 1
        assert t.record_call.delay("outside").is_enqueued  # no transaction: at once


def test_importing_the_package_does_not_import_django() -> None:
    code = "import sys, queue_max_django; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _plain(a: int, b: int) -> None: ...
def _defaults(a: int, b: int = 2) -> None: ...
def _keyword_only(a: int, *, b: int) -> None: ...
def _var(*args: int, **kwargs: int) -> None: ...
def _none() -> None: ...


@pytest.mark.parametrize("func", [_plain, _defaults, _keyword_only, _var, _none])
def test_a_call_is_refused_or_accepted_exactly_as_signature_bind_says(func: Callable[..., None]) -> None:
    """``.delay()``'s argument check skips ``Signature.bind`` for a call of exactly the parameters of a
    function whose parameters are all positional without defaults; every call is accepted or refused as
    ``bind`` would."""
    import inspect

    made = Task(func)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1,), {"b": 2}), ((), {"a": 1, "b": 2}),
        ((1, 2), {"b": 3}),
    ]  # fmt: skip
    for args, kwargs in calls:
        try:
            inspect.signature(func).bind(*args, **kwargs)
        except TypeError:
            with pytest.raises(TypeError, match="cannot be called with these arguments"):
                made._bind(args, kwargs)
        else:
            made._bind(args, kwargs)
