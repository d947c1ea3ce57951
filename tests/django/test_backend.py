"""QueueMaxBackend: Django's Tasks framework (django.tasks, Django >= 6.0) on the queue_max store.

Jobs are run in-process by ``testing.run_queued()`` (the worker's runner). On Django 5.2 every test here is
skipped but one, which checks that importing the backend gives a clear ImportError.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import importlib.util
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from queue_max_django.testing import run_queued
from tests.engine.locations import StoreLocation

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")

if HAS_TASKS:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    from queue_max_django.backend import QueueMaxBackend, unknown_django_task_message
    from tests.testapp import django_tasks as dt_tasks

BACKEND = "queue_max_django.backend.QueueMaxBackend"
IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"
Configure = Callable[..., override_settings]


def tasks_setting(backend: str = BACKEND, **params: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": backend, **params}}


@pytest.fixture
def store(queue_max: Configure) -> Iterator[None]:
    if not HAS_TASKS:
        pytest.skip("django.tasks needs Django >= 6.0")
    with queue_max(), override_settings(TASKS=tasks_setting()):
        yield


@needs_tasks
def test_the_backend_supports_defer_async_results_and_priority(store: None) -> None:
    backend = task_backends["default"]
    assert isinstance(backend, QueueMaxBackend)
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


@needs_tasks
def test_enqueue_puts_one_job_and_returns_a_ready_result(store: None) -> None:
    result = dt_tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([2, 3], {}, "default")
    assert result.enqueued_at is not None and result.started_at is None
    job = get_queue().job(int(result.id))
    assert job is not None
    assert (job.state, job.name, job.queue, job.priority) == (
        State.PENDING,
        "tests.testapp.django_tasks.add",
        "default",
        0,
    )


@needs_tasks
def test_a_run_job_is_successful_with_its_return_value_read_back_from_the_store(
    store: None, location: StoreLocation
) -> None:
    result = dt_tasks.add.enqueue(2, 3)
    (outcome,) = run_queued()
    assert (outcome.state, outcome.result) == (State.DONE, 5)
    conf.reset()  # the store is read again from scratch: a new Queue, a new backend
    with override_settings(TASKS=tasks_setting()):
        fresh = task_backends["default"].get_result(result.id)
    assert (fresh.status, fresh.return_value, fresh.errors) == (TaskResultStatus.SUCCESSFUL, 5, [])
    assert fresh.enqueued_at and fresh.started_at and fresh.finished_at and fresh.last_attempted_at
    assert fresh.enqueued_at <= fresh.started_at <= fresh.finished_at
    assert fresh.attempts == 1 and fresh.is_finished
    with location.open_queue() as raw:  # what any process opening the store sees
        job = raw.job(int(result.id))
        assert job is not None and (job.state, job.result) == (State.DONE, 5)
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert dt_tasks.add.get_result(result.id).return_value == 5


@needs_tasks
def test_aget_result_reads_the_result_too(store: None) -> None:
    result = dt_tasks.pair.enqueue(1, 2)
    run_queued()
    fresh = asyncio.run(task_backends["default"].aget_result(result.id))
    assert fresh.return_value == [1, 2]  # normalized to JSON, as Django does


@needs_tasks
def test_unknown_result_ids_raise_task_result_does_not_exist(store: None) -> None:
    backend = task_backends["default"]
    for result_id in ("not-a-number", "0", "123456789"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)
    own_job = get_queue().put({"args": [], "kwargs": {}}, name="tests.testapp.tasks.add")
    with pytest.raises(TaskResultDoesNotExist):  # a job of our own @task is not a django.tasks result
        backend.get_result(str(own_job))


@needs_tasks
def test_higher_priority_runs_first(store: None) -> None:
    low = dt_tasks.low.enqueue()
    default = dt_tasks.add.enqueue(1, 1)
    high = dt_tasks.high.enqueue()
    boosted = dt_tasks.add.using(priority=100).enqueue(0, 0)
    assert get_queue().job(int(boosted.id)).priority == 100  # type: ignore[union-attr]
    order = [str(outcome.job_id) for outcome in run_queued()]
    assert order == [boosted.id, high.id, default.id, low.id]


@needs_tasks
def test_run_after_keeps_the_job_scheduled_until_then(store: None) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    result = dt_tasks.add.using(run_after=later).enqueue(1, 2)
    assert run_queued() == []
    job = get_queue().job(int(result.id))
    assert job is not None and job.state is State.SCHEDULED
    assert job.eta == pytest.approx(later.timestamp(), abs=0.01)
    assert task_backends["default"].get_result(result.id).status == TaskResultStatus.READY


@needs_tasks
def test_a_failure_is_failed_with_the_exception_class_and_traceback(store: None) -> None:
    result = dt_tasks.fail.enqueue("boom")
    outcomes = run_queued()  # retry_delay=0: retried at once until out of retries (MAX_RETRIES 3)
    assert [o.state for o in outcomes] == [State.PENDING] * 3 + [State.FAILED]  # delay 0: pending again
    fresh = task_backends["default"].get_result(result.id)
    assert fresh.status == TaskResultStatus.FAILED and fresh.is_finished
    assert [e.exception_class_path for e in fresh.errors] == ["builtins.ValueError"] * 4  # one per attempt
    assert [e.traceback for e in fresh.errors[:3]] == ["boom"] * 3  # earlier attempts keep their message
    error = fresh.errors[-1]  # the last one keeps its traceback
    assert len(set(fresh.worker_ids)) == 1 and len(fresh.worker_ids) == 4  # this process ran all four
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "raise ValueError(message)" in error.traceback and "ValueError: boom" in error.traceback
    assert fresh.attempts == 4 and fresh.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        fresh.return_value  # noqa: B018


@needs_tasks
def test_the_backend_and_job_result_give_one_class_path_for_each_error(store: None) -> None:
    from queue_max_django.results import JobResult

    failed = dt_tasks.fail.enqueue("boom")
    run_queued()
    by_hand = dt_tasks.add.enqueue(1, 2)
    get_queue().get(0).nack("given up by hand", permanent=True)  # no exception: no type stored
    for result, path in ((failed, "builtins.ValueError"), (by_hand, "builtins.Exception")):
        fresh = task_backends["default"].get_result(result.id)
        handle = JobResult.load(result.id)  # the same stored job through this app's own handle
        assert {e.exception_class_path for e in fresh.errors} == {path}
        paths = [e.exception_class_path for e in fresh.errors]
        assert [e.exception_class_path for e in handle.errors] == paths
    stored = get_queue().job(int(failed.id))
    assert stored is not None and stored.error_type == "ValueError"  # stored bare; read with its module


@needs_tasks
def test_the_async_api_aenqueue_arefresh_aget_result_runs_in_an_event_loop(store: None) -> None:
    """Django's async names on this backend; the loop keeps running other coroutines while a coroutine
    polls ``arefresh()``, and the job runs only after they made progress."""

    async def scenario() -> tuple[Any, Any, list[int]]:
        result = await dt_tasks.add.aenqueue(2, 3)
        assert result.status == TaskResultStatus.READY

        async def poll() -> None:
            while not result.is_finished:
                await result.arefresh()
                await asyncio.sleep(0.005)

        waiting = asyncio.create_task(asyncio.wait_for(poll(), 10))
        progress = []
        for step in range(3):
            await asyncio.sleep(0.01)
            assert not waiting.done()
            progress.append(step)
        await asyncio.to_thread(run_queued)
        await waiting
        return result, await dt_tasks.add.aget_result(result.id), progress

    result, got, progress = asyncio.run(scenario())
    assert progress == [0, 1, 2]
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert (got.id, got.status, got.return_value) == (result.id, TaskResultStatus.SUCCESSFUL, 5)
    job = get_queue().job(int(result.id))
    assert job is not None and (job.state, job.result) == (State.DONE, 5)
    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(task_backends["default"].aget_result("0"))


@needs_tasks
def test_a_job_waiting_for_a_retry_is_ready_with_the_last_error(store: None) -> None:
    result = dt_tasks.fail.enqueue("boom")
    (outcome,) = run_queued(retry_delay=None)  # keep the backoff: the retry waits
    assert outcome.state is State.SCHEDULED
    fresh = task_backends["default"].get_result(result.id)
    assert (fresh.status, fresh.attempts, fresh.finished_at) == (TaskResultStatus.READY, 1, None)
    assert [e.exception_class_path for e in fresh.errors] == ["builtins.ValueError"]


@needs_tasks
def test_retry_with_a_delay_schedules_the_next_attempt_then(store: None) -> None:
    result = dt_tasks.retry_in_an_hour.enqueue()
    before = time.time()
    (outcome,) = run_queued(retry_delay=None)
    assert outcome.state is State.SCHEDULED
    job = get_queue().job(int(result.id))
    assert job is not None and job.eta is not None
    assert before + 3600 <= job.eta <= time.time() + 3600  # Retry's delay, not the 1 s backoff


@needs_tasks
def test_options_max_retries_bounds_the_attempts(queue_max: Configure) -> None:
    with queue_max(), override_settings(TASKS=tasks_setting(OPTIONS={"MAX_RETRIES": 0})):
        result = dt_tasks.fail.enqueue("once")
        assert [o.state for o in run_queued()] == [State.FAILED]
        assert task_backends["default"].get_result(result.id).attempts == 1


@needs_tasks
def test_takes_context_gets_the_attempt_and_the_running_task_result(store: None) -> None:
    result = dt_tasks.with_context.enqueue(7)
    run_queued()
    value = task_backends["default"].get_result(result.id).return_value
    assert value == {"attempt": 1, "id_is_set": True, "status": "RUNNING", "value": 7}


@needs_tasks
def test_a_coroutine_task_runs(store: None) -> None:
    result = dt_tasks.async_add.enqueue(4, 5)
    run_queued()
    assert task_backends["default"].get_result(result.id).return_value == 9


@needs_tasks
def test_enqueued_started_and_finished_signals_are_sent(store: None) -> None:
    seen: list[tuple[str, Any, str, str]] = []

    def receiver(name: str) -> Callable[..., None]:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, sender, task_result.id, str(task_result.status)))

        return receive

    signals = ((task_enqueued, "enqueued"), (task_started, "started"), (task_finished, "finished"))
    receivers = [(signal, receiver(name)) for signal, name in signals]
    for signal, function in receivers:
        signal.connect(function)
    try:
        ok = dt_tasks.add.enqueue(1, 2)
        bad = dt_tasks.fail.using(priority=-1).enqueue("x")
        run_queued(retry_delay=None)
    finally:
        for signal, function in receivers:
            signal.disconnect(function)
    assert seen == [
        ("enqueued", QueueMaxBackend, ok.id, "READY"),
        ("enqueued", QueueMaxBackend, bad.id, "READY"),
        ("started", QueueMaxBackend, ok.id, "RUNNING"),
        ("finished", QueueMaxBackend, ok.id, "SUCCESSFUL"),
        ("started", QueueMaxBackend, bad.id, "RUNNING"),
        ("finished", QueueMaxBackend, bad.id, "READY"),  # a retry is scheduled: ready to run again
    ]


@pytest.mark.inv_6
@needs_tasks
def test_a_job_naming_an_unregistered_task_waits_then_is_a_dead_letter_and_nothing_is_imported(
    queue_max: Configure,
) -> None:
    """A django.tasks job of a task this process lacks waits out UNKNOWN_TASK_GRACE (a rolling deploy) as
    an @task job does, uncounted, then is a dead letter; nothing is ever imported from the job's data."""
    payload = {"django_task": 1, "task": "os.system", "backend": "default", "args": ["true"], "kwargs": {}}
    with override_settings(TASKS=tasks_setting()):
        with queue_max(UNKNOWN_TASK_GRACE=3600):
            job_id = get_queue().put(payload, name="os.system")
            (outcome,) = run_queued()
            assert outcome.state is State.SCHEDULED
            assert "restart or update your workers" in str(outcome.error)
            job = get_queue().job(job_id)
            assert job is not None and (job.state, job.attempts, job.retries) == (State.SCHEDULED, 0, 0)
        with queue_max(UNKNOWN_TASK_GRACE=0):
            job_id = get_queue().put(payload, name="os.system")
            (outcome,) = run_queued()
            assert outcome.state is State.FAILED
            job = get_queue().job(job_id)
            assert job is not None and job.error == unknown_django_task_message("os.system")
            assert job.error_type == "queue_max_django.running.runner.TaskNotRegistered"
            assert job.retries == 1  # permanent: not retried


@needs_tasks
def test_modules_listed_in_options_are_imported_to_find_tasks(
    queue_max: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queue_max_django import backend

    # As in a fresh worker process: the fixture module is not imported and no django.tasks task registered.
    monkeypatch.setattr(backend.registered, "_tasks", {})
    monkeypatch.delitem(sys.modules, dt_tasks.__name__)
    payload = {"django_task": 1, "task": "tests.testapp.django_tasks.add", "backend": "default",
               "args": [1, 2], "kwargs": {}}  # fmt: skip
    setting = tasks_setting(OPTIONS={"MODULES": ["tests.testapp.django_tasks"]})
    with queue_max(), override_settings(TASKS=setting):
        job_id = get_queue().put(payload, name="tests.testapp.django_tasks.add")
        (outcome,) = run_queued()
    assert (outcome.job_id, outcome.state, outcome.result) == (job_id, State.DONE, 3)
    assert "tests.testapp.django_tasks.add" in backend.registered


@needs_tasks
def test_check_reports_queues_the_engine_does_not_accept(queue_max: Configure) -> None:
    setting = tasks_setting(QUEUES=["default", "reports"], OPTIONS={"COLOR": 1, "MODULES": ["no.such.mod"]})
    with queue_max(QUEUES=["default"]), override_settings(TASKS=setting):
        messages = task_backends["default"].check()
    ids = sorted(m.id for m in messages)
    assert ids == [
        "queue_max_django.backend.E001",
        "queue_max_django.backend.E003",
        "queue_max_django.backend.E005",
    ]
    assert any("'reports'" in m.msg for m in messages)
    with queue_max(QUEUES=["default", "reports"]), override_settings(TASKS=tasks_setting(QUEUES=["reports"])):
        assert task_backends["default"].check() == []


def _outcomes(results: list[Any]) -> list[tuple[str, Any]]:
    return [
        (
            str(r.status),
            r.return_value
            if r.status == TaskResultStatus.SUCCESSFUL
            else [e.exception_class_path for e in r.errors],
        )
        for r in results
    ]


@needs_tasks
def test_the_same_task_module_gives_the_same_results_under_immediate_backend_and_ours(
    queue_max: Configure,
) -> None:
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (dt_tasks.add, (2, 3), {}),
        (dt_tasks.echo, (1, "a"), {"k": [1, 2]}),
        (dt_tasks.pair, (3, 4), {}),
        (dt_tasks.high, (), {}),
        (dt_tasks.fail, ("boom",), {}),
        (dt_tasks.with_context, (5,), {}),
        (dt_tasks.async_add, (1, 1), {}),
        (dt_tasks.exits, (1,), {}),
    ]
    with override_settings(TASKS=tasks_setting(IMMEDIATE)):
        immediate = [task.enqueue(*args, **kwargs) for task, args, kwargs in calls]
    with queue_max(), override_settings(TASKS=tasks_setting(OPTIONS={"MAX_RETRIES": 0})):
        enqueued = [task.enqueue(*args, **kwargs) for task, args, kwargs in calls]
        run_queued()
        ours = [task_backends["default"].get_result(r.id) for r in enqueued]
    with queue_max(IMMEDIATE=True), override_settings(TASKS=tasks_setting()):  # ours, inline
        inline = [task.enqueue(*args, **kwargs) for task, args, kwargs in calls]
    assert _outcomes(ours) == _outcomes(inline) == _outcomes(immediate)
    assert [r.attempts for r in ours] == [r.attempts for r in immediate] == [1] * len(calls)
    assert [r.attempts for r in inline] == [1] * len(calls)
    assert _outcomes(ours)[4] == ("FAILED", ["builtins.ValueError"])
    assert _outcomes(ours)[7] == ("FAILED", ["builtins.SystemExit"])


# ------------------------------------------------------------------ results rebuilt from their own job


def _two_backends() -> dict[str, Any]:
    """Two aliases of our backend over the one store of QUEUE_MAX."""
    return {"default": {"BACKEND": BACKEND}, "other": {"BACKEND": BACKEND}}


@needs_tasks
def test_get_result_reports_the_jobs_own_run_after_priority_queue_and_alias(queue_max: Configure) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    tasks = {**_two_backends(), "default": {"BACKEND": BACKEND, "QUEUES": ["default", "mail"]}}
    with queue_max(QUEUES=["default", "mail"]), override_settings(TASKS=tasks):
        deferred = dt_tasks.add.using(run_after=later, priority=7, queue_name="mail").enqueue(1, 2)
        plain = dt_tasks.add.enqueue(3, 4)
        elsewhere = dt_tasks.add.using(backend="other", priority=-3).enqueue(5, 6)
        dt_tasks.add.using(run_after=later + dt.timedelta(days=1), priority=99)  # validated last: registered
        backend = task_backends["default"]
        stored = {r.id: get_queue().job(int(r.id)) for r in (deferred, plain, elsewhere)}
        results = {r.id: backend.get_result(r.id) for r in (deferred, plain, elsewhere)}
    job = stored[deferred.id]
    assert job is not None and (job.state, job.eta, job.priority, job.queue) == (
        State.SCHEDULED, pytest.approx(later.timestamp(), abs=1e-3), 7, "mail"
    )  # fmt: skip
    assert job.payload["run_after"] == later.isoformat() and job.payload["backend"] == "default"
    assert stored[elsewhere.id].payload["backend"] == "other"  # type: ignore[union-attr]
    options = {
        rid: (r.task.run_after, r.task.priority, r.task.queue_name, r.task.backend, r.backend)
        for rid, r in results.items()
    }
    assert options == {
        deferred.id: (later, 7, "mail", "default", "default"),
        plain.id: (None, 0, "default", "default", "default"),
        elsewhere.id: (None, -3, "default", "other", "other"),
    }
    # As Django's own tests ask of a backend: a result read back right after enqueue equals the enqueued one.
    assert results == {r.id: r for r in (deferred, plain, elsewhere)}


@needs_tasks
def test_refresh_goes_through_the_backend_the_job_was_enqueued_with(queue_max: Configure) -> None:
    with queue_max(), override_settings(TASKS=_two_backends()):
        result = dt_tasks.add.using(backend="other").enqueue(2, 2)
        dt_tasks.add.enqueue(0, 0)  # the registered task is the default-alias one now
        run_queued()
        fresh = task_backends["default"].get_result(result.id)
        fresh.refresh()  # task.get_backend(): "other"
    assert (fresh.task.backend, fresh.backend, fresh.return_value) == ("other", "other", 4)


@needs_tasks
def test_queue_max_timeout_is_the_time_limit_of_django_tasks_jobs(queue_max: Configure) -> None:
    with queue_max(TIMEOUT=2.5), override_settings(TASKS=tasks_setting()):
        job = get_queue().job(int(dt_tasks.add.enqueue(1, 1).id))
    assert job is not None and job.timeout == 2.5


@needs_tasks
def test_a_whole_float_priority_is_stored_as_an_int(store: None) -> None:
    result = dt_tasks.add.using(priority=3.0).enqueue(1, 1)  # Django accepts it; the engine takes ints
    job = get_queue().job(int(result.id))
    assert job is not None and job.priority == 3 and type(job.priority) is int


@needs_tasks
def test_a_naive_run_after_is_in_the_current_time_zone_without_use_tz(queue_max: Configure) -> None:
    with queue_max(), override_settings(TASKS=tasks_setting(), USE_TZ=False, TIME_ZONE="Europe/Paris"):
        from django.utils import timezone

        later = dt.datetime.now() + dt.timedelta(hours=2)  # naive: Django allows it with USE_TZ = False
        result = dt_tasks.add.using(run_after=later).enqueue(1, 2)
        job = get_queue().job(int(result.id))
        fresh = task_backends["default"].get_result(result.id)
        expected = timezone.make_aware(later).timestamp()
    assert job is not None and job.state is State.SCHEDULED
    assert job.eta == pytest.approx(expected, abs=1e-3)
    assert fresh.task.run_after == later and fresh.enqueued_at is not None
    assert timezone.is_naive(fresh.enqueued_at)


@needs_tasks
def test_arguments_that_are_not_json_data_are_refused_and_nothing_is_stored(store: None) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):  # Django's normalize_json, as in its tests
        dt_tasks.echo.enqueue(dt.datetime.now(dt.UTC))
    assert get_queue().stats()["total"] == 0


@needs_tasks
def test_a_return_value_that_is_not_json_data_fails_the_job_with_type_error(store: None) -> None:
    result = dt_tasks.unstorable.enqueue()
    (outcome,) = run_queued()  # not retried: the same value would come back
    assert outcome.state is State.FAILED
    fresh = task_backends["default"].get_result(result.id)
    assert [e.exception_class_path for e in fresh.errors] == ["builtins.TypeError"]
    assert "Unsupported type" in fresh.errors[0].traceback


@needs_tasks
def test_aenqueue_stores_a_ready_job_and_get_result_matches_the_task(store: None) -> None:
    from django.tasks.exceptions import TaskResultMismatch

    result = asyncio.run(dt_tasks.add.aenqueue(1, 2))
    assert (result.status, result.task, result.args) == (TaskResultStatus.READY, dt_tasks.add, [1, 2])
    job = get_queue().job(int(result.id))
    assert job is not None and job.state is State.PENDING
    assert asyncio.run(task_backends["default"].aget_result(int(result.id))) == result  # an int id too
    with pytest.raises(TaskResultMismatch):
        dt_tasks.echo.get_result(result.id)


@needs_tasks
def test_a_queue_the_backend_does_not_list_is_refused_before_anything_is_stored(queue_max: Configure) -> None:
    from django.tasks.exceptions import InvalidTask

    with override_settings(TASKS=tasks_setting(QUEUES=["default", "mail"])):
        mail = dt_tasks.add.using(queue_name="mail")  # valid where it was made
    with queue_max(), override_settings(TASKS=tasks_setting(QUEUES=["default"])):
        with pytest.raises(InvalidTask, match="Queue 'mail' is not valid for backend"):
            dt_tasks.add.using(queue_name="mail")
        with pytest.raises(InvalidTask, match="Queue 'mail' is not valid for backend"):
            mail.enqueue(1, 2)  # enqueue validates again, as Django's backends do
        assert get_queue().stats()["total"] == 0


@needs_tasks
def test_a_result_read_back_pickles_and_compares_equal(store: None) -> None:
    result = dt_tasks.add.using(priority=5).enqueue(1, 2)
    run_queued()
    fresh = task_backends["default"].get_result(result.id)
    again = pickle.loads(pickle.dumps(fresh))
    assert again == fresh and again.task == dt_tasks.add.using(priority=5)


# ------------------------------------------------------------------ checks


@needs_tasks
def test_check_is_an_error_when_the_app_is_not_installed(queue_max: Configure) -> None:
    apps_without = ["django.contrib.contenttypes", "django.contrib.auth"]
    with queue_max(), override_settings(TASKS=tasks_setting(), INSTALLED_APPS=apps_without):
        messages = task_backends["default"].check()
    assert [(m.id, m.msg, m.hint) for m in messages] == [
        (
            "queue_max_django.backend.E006",
            "TASKS['default'] uses QueueMaxBackend, but 'queue_max_django' is not in INSTALLED_APPS: its "
            "jobs would be stored and never run (no queue_worker command, no task autodiscovery)",
            "Add 'queue_max_django' to INSTALLED_APPS.",
        )
    ]
    with queue_max(), override_settings(TASKS=tasks_setting()):
        assert task_backends["default"].check() == []


# ------------------------------------------------------------------ SystemExit and KeyboardInterrupt


@needs_tasks
def test_a_task_calling_sys_exit_is_failed_with_system_exit_after_its_retries(store: None) -> None:
    result = dt_tasks.exits.enqueue(2)
    outcomes = run_queued()  # nothing propagates: the loop goes on
    assert [o.state for o in outcomes] == [State.PENDING] * 3 + [State.FAILED]
    job = get_queue().job(int(result.id))
    assert job is not None and (job.state, job.error_type, job.retries) == (State.FAILED, "SystemExit", 4)
    fresh = task_backends["default"].get_result(result.id)
    assert fresh.status == TaskResultStatus.FAILED and fresh.attempts == 4
    assert [e.exception_class_path for e in fresh.errors] == ["builtins.SystemExit"] * 4
    assert fresh.errors[-1].exception_class is SystemExit
    assert "sys.exit(code)" in fresh.errors[-1].traceback


@needs_tasks
def test_a_keyboard_interrupt_in_a_worker_thread_is_a_failure_and_does_not_kill_the_thread(
    queue_max: Configure,
) -> None:
    with queue_max(), override_settings(TASKS=tasks_setting(OPTIONS={"MAX_RETRIES": 0})):
        result = dt_tasks.interrupted.enqueue()
        after = dt_tasks.add.using(priority=-1).enqueue(1, 1)  # runs after it, in the same thread
        ran: list[Any] = []
        thread = threading.Thread(target=lambda: ran.extend(run_queued()))
        thread.start()
        thread.join(30)
        fresh = task_backends["default"].get_result(result.id)
        later = task_backends["default"].get_result(after.id)
    assert [(str(o.job_id), o.state) for o in ran] == [(result.id, State.FAILED), (after.id, State.DONE)]
    assert (fresh.status, [e.exception_class_path for e in fresh.errors]) == (
        TaskResultStatus.FAILED, ["builtins.KeyboardInterrupt"]
    )  # fmt: skip
    assert later.return_value == 2


@needs_tasks
def test_a_keyboard_interrupt_on_the_main_thread_releases_the_job_and_propagates(store: None) -> None:
    result = dt_tasks.interrupted.enqueue()  # on the main thread it may be the user's Ctrl-C
    with pytest.raises(KeyboardInterrupt, match="from the task"):
        run_queued()
    job = get_queue().job(int(result.id))
    assert job is not None and (job.state, job.retries, job.error) == (State.PENDING, 0, None)


# ------------------------------------------------------------------ QUEUE_MAX["IMMEDIATE"]


@pytest.fixture
def immediate(queue_max: Configure) -> Iterator[None]:
    if not HAS_TASKS:
        pytest.skip("django.tasks needs Django >= 6.0")
    with queue_max(IMMEDIATE=True), override_settings(TASKS=tasks_setting()):
        yield


@needs_tasks
def test_immediate_runs_the_job_at_once_and_stores_its_result(
    immediate: None, location: StoreLocation
) -> None:
    result = dt_tasks.add.enqueue(2, 3)
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 5, 1)
    assert result.enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]
    assert result.task == dt_tasks.add and (result.args, result.kwargs) == ([2, 3], {})
    with location.open_queue() as raw:
        job = raw.job(int(result.id))
        assert job is not None and (job.state, job.result, job.attempts) == (State.DONE, 5, 1)
    assert run_queued() == []  # nothing left for a worker
    assert task_backends["default"].get_result(result.id) == result


@needs_tasks
def test_immediate_ignores_run_after_and_keeps_it_on_the_result(immediate: None) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    result = dt_tasks.add.using(run_after=later).enqueue(1, 1)
    assert (result.status, result.return_value, result.task.run_after) == (
        TaskResultStatus.SUCCESSFUL,
        2,
        later,
    )


@needs_tasks
def test_immediate_failure_is_final_and_recorded(immediate: None) -> None:
    result = dt_tasks.fail.enqueue("boom")  # MAX_RETRIES 3 is not used: one attempt, as ImmediateBackend
    assert (result.status, result.attempts, result.is_finished) == (TaskResultStatus.FAILED, 1, True)
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert result.errors[0].traceback.endswith("ValueError: boom\n")
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    job = get_queue().job(int(result.id))
    assert job is not None and (job.state, job.retries, job.error) == (State.FAILED, 1, "boom")


@needs_tasks
def test_immediate_sys_exit_is_failed_and_does_not_propagate(immediate: None) -> None:
    result = dt_tasks.exits.enqueue(3)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is SystemExit
    job = get_queue().job(int(result.id))
    assert job is not None and (job.state, job.error_type) == (State.FAILED, "SystemExit")


@needs_tasks
def test_immediate_keyboard_interrupt_propagates_and_leaves_the_job_waiting(immediate: None) -> None:
    with pytest.raises(KeyboardInterrupt):  # ImmediateBackend lets it through too
        dt_tasks.interrupted.enqueue()
    (job,) = get_queue().jobs(State.PENDING)  # released: no attempt counted
    assert (job.name, job.retries, job.error) == ("tests.testapp.django_tasks.interrupted", 0, None)


@needs_tasks
def test_immediate_sends_enqueued_started_finished_in_order(immediate: None) -> None:
    seen: list[tuple[str, str]] = []

    def receiver(name: str) -> Callable[..., None]:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, str(task_result.status)))

        return receive

    receivers = [(task_enqueued, receiver("enqueued")), (task_started, receiver("started")),
                 (task_finished, receiver("finished"))]  # fmt: skip
    for signal, function in receivers:
        signal.connect(function)
    try:
        dt_tasks.add.enqueue(1, 2)
    finally:
        for signal, function in receivers:
            signal.disconnect(function)
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


@needs_tasks
def test_immediate_aenqueue_runs_sync_and_async_tasks(immediate: None) -> None:
    async def both() -> list[Any]:
        return [await dt_tasks.add.aenqueue(1, 2), await dt_tasks.async_add.aenqueue(3, 4)]

    results = asyncio.run(both())
    assert [(r.status, r.return_value) for r in results] == [
        (TaskResultStatus.SUCCESSFUL, 3),
        (TaskResultStatus.SUCCESSFUL, 7),
    ]


@pytest.mark.skipif(HAS_TASKS, reason="checks the import error on Django < 6.0")
def test_importing_the_backend_before_django_6_is_a_clear_import_error() -> None:
    with pytest.raises(ImportError, match=r"needs Django's Tasks framework \(django.tasks\), added in"):
        importlib.import_module("queue_max_django.backend")


@pytest.mark.skipif(HAS_TASKS, reason="checks Django < 6.0")
def test_a_django_tasks_job_on_django_before_6_is_a_dead_letter(queue_max: Configure) -> None:
    payload = {"django_task": 1, "task": "tests.testapp.django_tasks.add", "backend": "default",
               "args": [1, 2], "kwargs": {}}  # fmt: skip
    with queue_max():
        job_id = get_queue().put(payload, name="tests.testapp.django_tasks.add")
        (outcome,) = run_queued()
        job = get_queue().job(job_id)
    assert outcome.state is State.FAILED
    assert job is not None and "needs Django's Tasks framework" in (job.error or "")
