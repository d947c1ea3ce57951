"""Jobs of the ``django.tasks`` backend under ``QUEUE_MAX["ENCRYPT"]`` (issue 36: "for all tasks"), on every
store: the whole payload is sealed (the task's path and backend alias with the arguments: the job's name
keeps the path clear), the result and the error text and traceback too; the worker opens the payload to
route the job, ``get_result`` reads it opened, and a payload that does not open is a corrupted dead letter."""

from __future__ import annotations

import base64
import importlib.util
from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.conf import get_queue
from queue_max_django.engine import Job, State
from queue_max_django.engine.sealing import is_sealed, is_sealed_text
from queue_max_django.testing import run_queued

pytest.importorskip("cryptography")
if importlib.util.find_spec("django.tasks") is None:
    pytest.skip("django.tasks needs Django >= 6.0", allow_module_level=True)

from django.tasks import TaskResultStatus, task_backends

from tests.testapp import django_tasks as dt_tasks

Configure = Callable[..., override_settings]
KEY_1 = base64.urlsafe_b64encode(bytes(range(32))).decode()
KEY_2 = base64.urlsafe_b64encode(bytes(range(100, 132))).decode()
SECRET = "4111-1111-SECRET"
TASKS = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}


@pytest.fixture
def encrypted(queue_max: Configure) -> Iterator[None]:
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k1": KEY_1}), override_settings(TASKS=TASKS):
        yield


def raw(job_id: str) -> Job:
    job = get_queue().job(int(job_id))
    assert job is not None
    return job


def test_the_payload_and_result_are_sealed_and_read_back_opened(encrypted: None) -> None:
    result = dt_tasks.echo.enqueue(SECRET, note=SECRET)
    job = raw(result.id)
    assert is_sealed(job.payload) and SECRET not in repr(job)
    assert job.name == "tests.testapp.django_tasks.echo"  # routing and the admin's lists stay clear
    assert (result.args, result.kwargs) == ([SECRET], {"note": SECRET})  # the caller's own, in memory
    (outcome,) = run_queued()
    assert outcome.state is State.DONE
    job = raw(result.id)
    assert is_sealed(job.result) and SECRET not in repr(job)
    conf.reset()  # read back from the store by a new backend, as another process would
    fresh = task_backends["default"].get_result(result.id)
    assert fresh.status == TaskResultStatus.SUCCESSFUL
    assert (fresh.args, fresh.kwargs) == ([SECRET], {"note": SECRET})
    assert fresh.return_value == {"args": [SECRET], "kwargs": {"note": SECRET}}


def test_a_failure_stores_its_error_sealed_and_the_result_shows_it_opened(encrypted: None) -> None:
    result = dt_tasks.fail.enqueue(SECRET)
    run_queued()
    job = raw(result.id)
    assert job.state is State.FAILED and job.error_type == "ValueError"
    assert is_sealed_text(job.error) and is_sealed_text(job.traceback) and SECRET not in repr(job)
    fresh = task_backends["default"].get_result(result.id)
    assert fresh.status == TaskResultStatus.FAILED
    assert SECRET in fresh.errors[0].traceback


def test_a_payload_that_does_not_open_is_a_corrupted_dead_letter(
    encrypted: None, queue_max: Configure
) -> None:
    result = dt_tasks.add.enqueue(2, 3)
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k2": KEY_2}):  # k1 removed
        (outcome,) = run_queued()
        job = raw(result.id)
        assert job.state is State.FAILED and job.error_type == "Corrupted"
        assert outcome.state is State.FAILED


def test_without_encrypt_the_jobs_stay_clear(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}), override_settings(TASKS=TASKS):
        result = dt_tasks.add.enqueue(2, 3)
        job = raw(result.id)
        assert not is_sealed(job.payload) and job.payload["args"] == [2, 3]
        run_queued()
        assert raw(result.id).result == 5
