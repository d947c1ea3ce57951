"""Cancelling from Django (issue 20, "Cancelling"): ``JobResult.cancel()``, ``manage.py queue_cancel`` and the
admin's action with its own permission (``cancel_job``); and the worker's side of a job cancelled while
claimed or while it ran (running/cancels.py), in this process. The real worker's paths are
tests/worker/test_cancel.py's, the store's tests/engine/test_contract_cancel.py's."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from queue_max_django import Cancelled
from queue_max_django.conf import get_queue
from queue_max_django.engine import CancelOutcome, Queue, Record, State, classify
from queue_max_django.results import JobStatus
from queue_max_django.running import cancels
from queue_max_django.running.runner import run_job
from queue_max_django.testing import run_queued
from queue_max_django.worker.acks import Batch
from queue_max_django.worker.options import DONE, TIMED_OUT, WorkerOptions
from queue_max_django.worker.process import Slot, WorkerProcess
from tests.admin_clients import logged_in
from tests.testapp import tasks as t

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

Configure = Callable[..., override_settings]
CANCELLED = "queue_max_django.engine.cancels.Cancelled"
BASE = "/admin/queue_max_django/job/"


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0):
        yield get_queue()


def running(queue: Queue) -> Record:
    """The next job, claimed (running) as a worker claims it."""
    return queue.get(0)


def marked(record: Record) -> bool:
    """Does the holder's heartbeat report a cancel request (what the store holds)?"""
    record.touch()
    return record.cancel_requested


# ------------------------------------------------------------------------------------ JobResult.cancel()


def test_cancel_of_a_waiting_or_scheduled_job_removes_it(store: Queue) -> None:
    waiting, scheduled = t.add.delay(1, 2), t.add.schedule_in(60, 1, 2)
    assert waiting.cancel() == "removed" and scheduled.cancel() is CancelOutcome.REMOVED
    assert store.job(waiting.job_id) is None and store.job(scheduled.job_id) is None
    assert waiting.cancel() is CancelOutcome.MISSING  # already gone: said, not raised


def test_cancel_of_a_running_job_marks_it_and_the_worker_makes_it_a_cancelled_dead_letter(
    store: Queue,
) -> None:
    result = t.add.delay(1, 2)
    record = running(store)
    result.refresh()
    assert not result.cancel_requested
    assert result.cancel() is CancelOutcome.REQUESTED
    result.refresh()
    assert result.status is JobStatus.RUNNING  # until its worker stops it
    assert result.cancel_requested
    assert marked(record)
    cancels.request(record.job_id)  # what the worker's heartbeat does with the report
    try:
        assert cancels.is_requested(record.job_id) and cancels.is_requested(str(record.job_id))
        batch = Batch(store, "w", line=None, settle=lambda *_: None)  # a worker thread's completer
        outcome = run_job(record, completer=batch)  # the task returned: its success is not held
    finally:
        cancels.forget(record.job_id)
    assert outcome.state is State.FAILED and isinstance(outcome.error, Cancelled) and batch.waiting == 0
    result.refresh()
    assert result.status is JobStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == [CANCELLED]
    assert result.job.retries == 1 and result.job.result is None  # not retried, its result dropped
    assert result.cancel() is CancelOutcome.FINISHED  # nothing to cancel: the dead letter stays
    assert store.job(result.job_id).state is State.FAILED


def test_a_job_claimed_but_not_started_when_cancelled_never_runs(store: Queue) -> None:
    result = t.add.delay(1, 2)
    record = running(store)
    result.cancel()
    cancels.request(record.job_id)
    try:
        outcome = cancels.before_start(record)
    finally:
        cancels.forget(record.job_id)
    assert outcome is not None and outcome.state is State.FAILED
    assert store.job(record.job_id).error_type == CANCELLED
    assert cancels.before_start(running_again(store, record.job_id)) is None  # requeued: runs afresh


def running_again(store: Queue, job_id: int) -> Record:
    assert store.requeue(job_id)
    record = running(store)
    assert record.job_id == job_id and not marked(record)
    return record


def test_a_task_that_raises_cancelled_is_not_retried() -> None:
    """``Cancelled`` is ``Permanent``: the runner's classification fails it for good."""
    assert not classify(Cancelled("stopped")).retry


# ------------------------------------------------------------------------------------ manage.py queue_cancel


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command("queue_cancel", *argv, stdout=out)
    return out.getvalue()


def test_queue_cancel_says_per_id_what_happened(store: Queue) -> None:
    waiting = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    busy = store.put({"args": [3, 4], "kwargs": {}}, name=t.add.name)
    store.cancel(waiting)
    waiting = store.put({"args": [5, 6], "kwargs": {}}, name=t.add.name)
    record = store.claim(busy)  # running
    assert record is not None
    done = store.put({"args": [], "kwargs": {}}, name=t.add.name)
    store.claim(done).ack(3)  # type: ignore[union-attr]
    out = call(str(waiting), f'"{busy}"', str(done))
    assert out.splitlines() == [
        f"job {waiting}: removed: it was waiting or scheduled, and never runs",
        f"job {busy}: cancel requested: it is running; its worker stops it at its next heartbeat (then it "
        f"is cancelled: kept with the dead letters, error Cancelled, not counted as a failure)",
        f"job {done}: not cancelled: it already finished (nothing to cancel, nothing changed)",
    ]
    assert store.job(waiting) is None and marked(record) and store.job(done).state is State.DONE


def test_queue_cancel_json_and_the_exit_status_of_a_missing_id(store: Queue) -> None:
    waiting = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    missing = waiting + 256 * 1000
    out = io.StringIO()
    with pytest.raises(CommandError, match=rf"^1 of 2 job id\(s\) named no job: {missing}$"):
        call_command("queue_cancel", str(waiting), str(missing), "--json", stdout=out)
    jobs = [{"job_id": str(waiting), "outcome": "removed"}, {"job_id": str(missing), "outcome": "missing"}]
    counts = {"removed": 1, "requested": 0, "finished": 0, "missing": 1}
    assert json.loads(out.getvalue()) == {**counts, "jobs": jobs}
    with pytest.raises(CommandError, match="is not a job id"):
        call("12abc")
    with pytest.raises(CommandError, match="the following arguments are required: JOB_ID"):
        call()


# ------------------------------------------------------------------------------------ the admin


def staff(*codenames: str) -> Client:
    return logged_in(*codenames, username="-".join(codenames))


def cancel_running(client: Client, job_id: int, **extra: str) -> Response:
    data = {"action": "cancel_running", "scope": "selected", "ids": str(job_id), **extra}
    return client.post(f"{BASE}running/action/", data)


@pytest.mark.django_db
def test_the_admin_cancels_a_running_job_with_its_own_permission(store: Queue) -> None:
    job_id = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    record = running(store)
    allowed = staff("view_job", "cancel_job")
    page = allowed.get(f"{BASE}{job_id}/").content.decode()
    assert 'value="cancel_running"' in page
    assert 'value="cancel_running"' in allowed.get(f"{BASE}running/").content.decode()
    confirm = cancel_running(allowed, job_id, from_job=str(job_id))
    assert confirm.status_code == 200 and "asked to stop it at its next heartbeat" in confirm.content.decode()
    assert not marked(record)  # nothing yet
    done = cancel_running(allowed, job_id, confirmed="yes")
    assert done.status_code == 302
    shown = done.client.get(done["Location"])
    assert [str(message) for message in shown.context["messages"]] == ["Cancel requested for 1 job."]
    assert marked(record) and store.job(job_id).state is State.RUNNING


@pytest.mark.django_db
def test_without_cancel_job_a_running_job_cannot_be_cancelled(store: Queue) -> None:
    job_id = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    record = running(store)
    changer = staff("view_job", "change_job", "delete_job")
    assert 'value="cancel_running"' not in changer.get(f"{BASE}{job_id}/").content.decode()
    assert cancel_running(changer, job_id, confirmed="yes").status_code == 403
    assert not marked(record)
    waiting = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)  # a waiting one: change, as before
    data = {"action": "cancel", "scope": "selected", "ids": str(waiting), "confirmed": "yes"}
    assert changer.post(f"{BASE}pending/action/", data).status_code == 302
    assert store.job(waiting) is None


# ------------------------------------------------------------------------------ a worker process, in here


def worker_holding(queue: Queue, record: Record) -> WorkerProcess:
    """A worker process object (not started: no threads) that holds ``record`` and runs it on thread 0."""
    worker = WorkerProcess(queue, WorkerOptions(threads=1, worker_id="here", cancel_grace=5.0), 0)
    worker._claiming = False  # its heartbeat starts no threads
    worker._held[0] = [record]
    worker._running[0] = Slot(record, time.monotonic(), None)
    return worker


def test_the_heartbeat_tells_the_task_and_the_grace_period_ends_it(store: Queue) -> None:
    job_id = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name, max_retries=3)
    record = running(store)
    worker = worker_holding(store, record)
    worker._beat()
    assert not cancels.is_requested(job_id) and worker._running[0].cancel_deadline is None
    store.request_cancel(job_id)
    try:
        worker._beat()
        assert cancels.is_requested(job_id)
        deadline = worker._running[0].cancel_deadline
        assert deadline is not None
        worker._check_timeouts(deadline - 0.01)  # within the grace period: the task may still stop
        assert store.job(job_id).state is State.RUNNING and worker._exit_code is None
        worker._check_timeouts(deadline)
    finally:
        cancels.forget(job_id)
    job = store.job(job_id)
    assert job.state is State.FAILED and job.error_type == CANCELLED
    assert "did not stop within 5 s" in (job.error or "") and job.retries == 1  # not retried
    assert worker._exit_code == TIMED_OUT  # the process is replaced, as after a timeout


def test_a_worker_stopping_fails_a_held_cancelled_job_instead_of_handing_it_back(store: Queue) -> None:
    cancelled_id = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    other_id = store.put({"args": [3, 4], "kwargs": {}}, name=t.add.name)
    first, second = running(store), running(store)
    worker = worker_holding(store, first)
    worker._held[0].append(second)
    worker._running.clear()  # claimed, not started
    store.request_cancel(cancelled_id)
    worker._beat()
    try:
        assert worker._end(DONE, wait=False) == DONE
    finally:
        cancels.forget(cancelled_id)
    assert store.job(cancelled_id).error_type == CANCELLED
    assert store.job(other_id).state is State.PENDING  # handed back, as on any stop


# ------------------------------------------------------------------------------------ current_job()


def test_current_job_cancelled_reads_this_processs_cancel_requests(store: Queue) -> None:
    from tests.testapp import metadata_tasks as mt

    result = mt.sees_its_cancel.delay()
    try:
        run_queued()
    finally:
        cancels.forget(result.job_id)
    result.refresh()
    assert result.return_value == {"before": False, "after": True}


def test_save_metadata_saves_then_raises_cancelled_once_a_cancel_was_requested(store: Queue) -> None:
    from tests.testapp import metadata_tasks as mt

    result = mt.saves_progress_until_cancelled.delay(5, 2)
    try:
        run_queued()
    finally:
        cancels.forget(result.job_id)
    job = store.job(result.job_id)
    assert job.state is State.FAILED and job.error_type == CANCELLED and job.retries == 1  # not retried
    assert job.metadata == {"done": 3}  # step 3's progress saved, then Cancelled raised from the save


@pytest.mark.django_db
def test_the_job_page_and_queue_show_say_a_running_jobs_cancel_was_requested(store: Queue) -> None:
    result = t.add.using(enqueue_on_commit=False).delay(1, 2)  # the test's transaction never commits
    running(store)
    client = staff("view_job", "change_job", "cancel_job")
    page = client.get(f"{BASE}{result.job_id}/")
    assert page.status_code == 200 and b'data-testid="cancel-requested"' not in page.content
    assert "cancel" not in call_show(result.job_id)
    result.cancel()
    page = client.get(f"{BASE}{result.job_id}/")
    assert b'data-testid="cancel-requested"' in page.content
    lines = call_show(result.job_id).splitlines()
    assert lines[1].startswith("state") and lines[2].split() == [
        "cancel", "requested:", "its", "worker", "stops", "it", "at", "its", "next", "heartbeat",
    ]  # fmt: skip
    assert "cancel" not in json.loads(call_show(result.job_id, "--json"))  # the JSON is the job's fields


def call_show(*argv: object) -> str:
    out = io.StringIO()
    call_command("queue_show", *(str(arg) for arg in argv), stdout=out)
    return out.getvalue()
