"""The result handle: status, return value, errors, attempts, aware times, refresh, wait, load."""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings
from django.utils.module_loading import import_string

from queue_max_django.conf import get_queue
from queue_max_django.results import JobNotFound, JobResult, JobStatus, exception_class_path
from queue_max_django.running.runner import run_job
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max(RETRY_BACKOFF=0):
        yield


def run_one() -> None:
    run_job(get_queue().get(0))


def test_status_strings_are_django_tasks_ones() -> None:
    assert [status.value for status in JobStatus] == ["READY", "RUNNING", "SUCCESSFUL", "FAILED"]
    try:
        from django.tasks import TaskResultStatus  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # Django 5.2
        return
    for status in JobStatus:
        assert status == TaskResultStatus[status.name]


def test_a_new_job_is_ready_without_return_value() -> None:
    result = t.add.delay(1, 2)
    assert result.status is JobStatus.READY
    assert result.attempts == 0 and result.errors == []
    assert result.started_at is None and result.finished_at is None
    assert result.enqueued_at.tzinfo is not None
    assert abs(result.enqueued_at - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=5)
    with pytest.raises(ValueError, match="READY"):
        _ = result.return_value


def test_a_scheduled_job_is_ready() -> None:
    assert t.add.schedule_in(60, 1, 2).status is JobStatus.READY


def test_running_then_successful_after_refresh() -> None:
    result = t.add.delay(1, 2)
    assert result.status is JobStatus.READY
    record = get_queue().get(0)
    result.refresh()
    assert result.status is JobStatus.RUNNING
    run_job(record)
    assert result.status is JobStatus.RUNNING  # a snapshot until refreshed
    result.refresh()
    assert result.status is JobStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 1
    assert result.started_at is not None and result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_a_failed_job_reports_its_error_and_traceback() -> None:
    result = t.fail_permanent.delay()
    run_one()
    result.refresh()
    assert result.status is JobStatus.FAILED
    (error,) = result.errors
    assert result.worker_ids == [f"{socket.gethostname()}:{os.getpid()}"]  # who ran it: this process
    assert error.exception_class_path == "queue_max_django.engine.classify.Permanent"
    assert error.message == "bad input"
    assert "Traceback" in error.traceback and "fail_permanent" in error.traceback
    with pytest.raises(ValueError, match="FAILED"):
        _ = result.return_value


def test_wait_returns_once_another_thread_finished_the_job() -> None:
    result = t.add.delay(20, 22)
    worker = threading.Timer(0.05, run_one)
    worker.start()
    try:
        assert result.wait(timeout=5) is result
    finally:
        worker.join()
    assert result.return_value == 42


def test_wait_raises_timeout_error_when_not_finished() -> None:
    result = t.add.delay(1, 2)
    with pytest.raises(TimeoutError, match=f"job {result.id} did not finish"):
        result.wait(timeout=0.05)


def test_load_reads_a_job_by_id_and_refresh_fails_once_it_is_gone() -> None:
    result = t.add.delay(1, 2)
    loaded = JobResult.load(result.id)
    assert loaded.task_name == "tests.testapp.tasks.add"
    assert loaded.status is JobStatus.READY
    assert get_queue().cancel(result.job_id)
    with pytest.raises(JobNotFound):
        loaded.refresh()
    with pytest.raises(JobNotFound):
        JobResult.load(result.id)


def test_exception_class_path_is_the_full_dotted_path_of_a_builtin() -> None:
    result = t.flaky.delay(f"class-path-{uuid.uuid4()}", 1)  # a key of its own: ATTEMPTS is per process
    run_one()  # ConnectionError: retried (READY), one error recorded
    stored = get_queue().job(result.job_id)
    assert stored is not None and stored.error_type == "ConnectionError"  # the engine stores builtins bare
    result.refresh()
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ConnectionError"  # as django.tasks' TaskError has it
    assert import_string(error.exception_class_path) is ConnectionError


def test_an_error_stored_as_text_only_is_builtins_exception() -> None:
    result = t.add.delay(1, 2)
    record = get_queue().get(0)
    record.nack("gave up by hand", permanent=True)  # no exception: the engine stores no type
    stored = get_queue().job(result.job_id)
    assert stored is not None and stored.error_type is None
    result.refresh()
    assert [(e.exception_class_path, e.message) for e in result.errors] == [
        ("builtins.Exception", "gave up by hand")
    ]


@pytest.mark.store_neutral  # a pure mapping; the stored types it maps come from both stores above
def test_every_class_path_the_rule_gives_imports_as_an_exception_class() -> None:
    paths = {
        "ValueError": "builtins.ValueError",
        "queue_max_django.engine.classify.Permanent": "queue_max_django.engine.classify.Permanent",
        "LeaseExpired": "queue_max_django.results.LeaseExpired",
        "Corrupted": "queue_max_django.results.Corrupted",
        None: "builtins.Exception",
        "": "builtins.Exception",
    }
    for stored, path in paths.items():
        assert exception_class_path(stored) == path
        found = import_string(path)
        assert isinstance(found, type) and issubclass(found, BaseException), path
    assert exception_class_path("NoSuchBuiltin") == "NoSuchBuiltin"  # no class to name: as stored
