"""Job metadata from the Django layer (issue 20): ``Task.using(metadata=)``, ``current_job()`` inside a
task (changes saved on success and failure, at once with ``save_metadata()``), ``JobResult.metadata``, the
admin job page, ``queue_list --json``/``queue_show``, and the django.tasks backend, which follows Django's
``tests/tasks/test_metadata.py`` where the installed Django has metadata (feature-detected) and is skipped
with the reason where it has not. Jobs run in-process (``run_queued``) or in IMMEDIATE mode."""

from __future__ import annotations

import importlib.util
import io
import json
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from queue_max_django import JobResult, JobStatus, NoCurrentJob, current_job
from queue_max_django.conf import get_queue
from queue_max_django.context import JobContext
from queue_max_django.engine import METADATA_MAX_BYTES, InvalidMetadata, State
from queue_max_django.testing import run_queued
from tests.testapp import metadata_tasks as mt
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
HAS_TASKS = importlib.util.find_spec("django.tasks") is not None


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max():
        yield


def stored(result: JobResult) -> dict[str, Any]:
    job = get_queue().job(result.job_id)
    assert job is not None
    return job.metadata


# ------------------------------------------------------------------------------------------ @task


def test_using_metadata_makes_a_copy_and_other_options_keep_it() -> None:
    given = {"trace_id": 123, "tags": ("a", "b")}
    variant = t.add.using(metadata=given)
    given["trace_id"] = 0
    assert variant.metadata == {"trace_id": 123, "tags": ["a", "b"]}
    assert t.add.metadata == {}
    assert variant.using(priority=1).metadata == {"trace_id": 123, "tags": ["a", "b"]}
    assert variant.using(metadata={}).metadata == {}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([("a", 1)], "metadata must be a dict"),
        ({1: "a"}, "metadata keys must be strings"),
        ({"a": object()}, "metadata must be JSON-serializable"),
        ({"a": "x" * METADATA_MAX_BYTES}, "over the limit of 65,536 bytes"),
    ],
)
def test_bad_metadata_is_refused_by_using_before_anything_is_stored(metadata: Any, message: str) -> None:
    with pytest.raises(InvalidMetadata, match=message):
        t.add.using(metadata=metadata)
    assert get_queue().stats()["total"] == 0


def test_enqueued_metadata_is_read_back_without_reserved_keys() -> None:
    result = mt.get_metadata.using(metadata={"trace_id": 123, "_lib": 2}).delay()
    assert result.metadata == {"trace_id": 123}
    assert result.raw_metadata == {"trace_id": 123, "_lib": 2}
    result.metadata["trace_id"] = 456  # a copy
    assert result.metadata == {"trace_id": 123}
    run_queued()
    result.refresh()
    assert result.status is JobStatus.SUCCESSFUL
    assert result.return_value == {"trace_id": 123}  # what the task saw: no reserved keys
    assert t.add.delay(1, 2).metadata == {}


def test_metadata_changed_by_the_task_is_saved_on_success_reserved_keys_kept() -> None:
    result = mt.update_metadata.using(metadata={"a": 1, "_reserved": "backend"}).delay(
        b=2, _reserved="user", _other="user"
    )
    run_queued()
    result.refresh()
    assert result.status is JobStatus.SUCCESSFUL
    assert result.metadata == {"a": 1, "b": 2}
    assert stored(result) == {"a": 1, "_reserved": "backend", "b": 2}


def test_metadata_changed_by_the_task_is_saved_on_each_failure() -> None:
    result = mt.update_metadata_and_fail.delay(b=2)
    outcomes = run_queued()
    assert [o.state for o in outcomes] == [State.PENDING, State.FAILED]
    result.refresh()
    assert result.status is JobStatus.FAILED
    assert result.metadata == {"b": 2, "attempt": 2}  # the retry saw the first attempt's and saved its own


def test_nested_changes_are_saved() -> None:
    result = mt.append_to_metadata_list.using(metadata={"items": [1]}).delay("items", 2)
    run_queued()
    result.refresh()
    assert result.metadata == {"items": [1, 2]}


def test_unchanged_metadata_is_not_saved_again() -> None:
    with mock.patch.object(JobContext, "save_raw") as save:
        mt.get_metadata.using(metadata={"a": 1}).delay()
        run_queued()
    save.assert_not_called()


def test_metadata_that_cannot_be_stored_fails_the_job_and_stores_nothing() -> None:
    result = mt.set_invalid_metadata.using(metadata={"a": 1}).delay()
    run_queued()
    result.refresh()
    assert result.status is JobStatus.FAILED
    assert result.errors[-1].exception_class_path == "queue_max_django.engine.errors.InvalidMetadata"
    assert result.metadata == {"a": 1}


def test_save_metadata_stores_progress_while_the_job_runs() -> None:
    result = mt.save_progress.delay(3)
    run_queued()
    result.refresh()
    assert result.return_value == [{"done": n, "of": 3} for n in (1, 2, 3)]
    assert result.metadata == {"done": 3, "of": 3}


def test_an_async_task_saves_with_asave_metadata() -> None:
    result = mt.save_progress_async.delay(7)
    run_queued()
    result.refresh()
    assert (result.return_value, result.metadata) == (result.id, {"done": 7})


def test_current_job_outside_a_job_raises() -> None:
    with pytest.raises(NoCurrentJob, match="only available inside a running job"):
        current_job()
    with pytest.raises(NoCurrentJob):
        mt.get_metadata()  # a direct call runs no job


def test_immediate_mode_saves_metadata_too(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        result = mt.update_metadata.using(metadata={"a": 1}).delay(b=2)
    assert (result.status, result.metadata) == (JobStatus.SUCCESSFUL, {"a": 1, "b": 2})


# ------------------------------------------------------------------------------------------ reading


@pytest.mark.store_neutral
def test_queue_list_json_queue_show_and_the_admin_job_page_show_it(admin_client: Client) -> None:
    # stored at once: the test's transaction (admin_client's database) never commits
    result = t.add.using(metadata={"done": 40, "of": 100, "_trace": "t"}, enqueue_on_commit=False).delay(1, 2)
    out = io.StringIO()
    call_command("queue_list", "--status", "pending", "--json", stdout=out)
    (listed,) = json.loads(out.getvalue())["jobs"]
    assert listed["metadata"] == {"done": 40, "of": 100, "_trace": "t"}
    out = io.StringIO()
    call_command("queue_show", result.id, stdout=out)
    assert 'metadata       {"done": 40, "of": 100, "_trace": "t"}' in out.getvalue()
    out = io.StringIO()
    call_command("queue_show", result.id, "--json", stdout=out)
    assert json.loads(out.getvalue())["metadata"] == {"done": 40, "of": 100, "_trace": "t"}
    page = admin_client.get(f"/admin/queue_max_django/job/{result.id}/")
    assert page.status_code == 200
    assert '<pre class="qm-pre" data-testid="metadata">{\n  &quot;done&quot;: 40,' in page.content.decode()


# ------------------------------------------------------------------------------- django.tasks backend

BACKEND = "queue_max_django.backend.QueueMaxBackend"
if HAS_TASKS:
    from django.tasks import task_backends

    from queue_max_django.backend import HAS_METADATA
    from tests.testapp import metadata_django_tasks as dmt
else:  # Django < 6.0
    HAS_METADATA = False
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")
needs_metadata = pytest.mark.skipif(
    not HAS_METADATA,
    reason="the installed Django's Tasks framework has no metadata yet (Task.using(metadata=), "
    "TaskResult.raw_metadata, TaskContext.save_metadata(): Django's main branch has them)",
)


@pytest.fixture
def backend() -> Iterator[None]:
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}):
        yield


@needs_tasks
def test_the_backend_says_it_supports_metadata(backend: None) -> None:
    assert task_backends["default"].supports_metadata is True


@needs_tasks
def test_current_job_works_in_a_django_task_and_saves_progress(backend: None) -> None:
    result = dmt.progress_through_current_job.enqueue(3)
    run_queued()
    job = get_queue().job(int(result.id))
    assert job is not None and job.state is State.DONE
    assert (job.result, job.metadata) == (1, {"done": 3})


@needs_tasks
def test_the_backend_saves_metadata_only_from_inside_the_running_job(backend: None) -> None:
    result = dmt.noop_task.enqueue()
    with pytest.raises(NoCurrentJob, match="only from inside that job"):
        task_backends["default"].save_metadata(result, {"a": 1})


@needs_metadata
def test_django_metadata_enqueue_result_and_reserved_keys(backend: None) -> None:
    result = dmt.get_metadata.using(metadata={"trace_id": 123, "tags": ("a", "b"), "_lib": 2}).enqueue()
    assert result.metadata == {"trace_id": 123, "tags": ["a", "b"]}  # type: ignore[attr-defined]
    run_queued()
    result.refresh()
    assert result.return_value == {"trace_id": 123, "tags": ["a", "b"]}
    assert result.raw_metadata == {"trace_id": 123, "tags": ["a", "b"], "_lib": 2}  # type: ignore[attr-defined]
    assert get_queue().job(int(result.id)).metadata["_lib"] == 2  # type: ignore[union-attr]


@needs_metadata
def test_django_context_changes_are_saved_on_success_and_failure(backend: None) -> None:
    ok = dmt.update_metadata.using(metadata={"a": 1, "_reserved": "backend"}).enqueue(b=2, _reserved="user")
    failed = dmt.update_metadata_and_fail.enqueue(b=2)
    explicit = dmt.save_metadata_explicitly.enqueue("a", 1)
    invalid = dmt.set_invalid_metadata.enqueue()
    run_queued()
    for result in (ok, failed, explicit, invalid):
        result.refresh()
    assert ok.metadata == {"a": 1, "b": 2}  # type: ignore[attr-defined]
    assert ok.raw_metadata == {"_reserved": "backend", "a": 1, "b": 2}  # type: ignore[attr-defined]
    assert (failed.status, failed.metadata) == ("FAILED", {"b": 2})  # type: ignore[attr-defined]
    assert (explicit.return_value, explicit.metadata) == ({"a": 1}, {"a": 1})  # type: ignore[attr-defined]
    assert invalid.status == "FAILED" and invalid.errors[-1].exception_class is TypeError
    assert invalid.metadata == {}  # type: ignore[attr-defined]


def test_after_a_save_the_context_holds_what_was_stored() -> None:
    result = mt.save_tuple_then_read.delay()
    run_queued()
    result.refresh()
    assert result.return_value == [{"pair": [1, 2]}, False, True]
    assert result.metadata == {"pair": [1, 2]}
