"""Unique jobs from the Django layer (issue 31): ``@task(unique_key=...)`` and ``.using()``, the key of a call
(``True``: the task's name and its bound arguments), ``unique_until``, ``on_duplicate`` (skip, replace,
raise: ``queue_max_django.DuplicateJob``), ``.map()`` per item, ``JobResult.deduplicated``, the bad input
refused before anything is written, and the key shown by ``queue_show`` and the admin's job page. On every
store kind (``queue_max``)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.test import override_settings

from queue_max_django import DuplicateJob, JobResult
from queue_max_django.conf import get_queue
from queue_max_django.engine import InvalidJob, State
from queue_max_django.testing import run_queued
from tests.testapp import unique_tasks as ut

Configure = Callable[..., override_settings]


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max():
        yield


def total() -> int:
    return int(get_queue().stats()["total"])


def test_the_same_call_twice_stores_one_job_and_the_handle_says_so() -> None:
    first = ut.sync_account.delay(42)
    again = ut.sync_account.delay(account_id=42, full=False)  # the same bound arguments
    assert not first.deduplicated and again.deduplicated
    assert again.id == first.id and total() == 1
    other = ut.sync_account.delay(42, full=True)
    assert not other.deduplicated and other.id != first.id and total() == 2
    job = get_queue().job(first.job_id)
    assert job is not None and job.unique is not None
    assert job.unique.key.startswith("tests.testapp.unique_tasks.sync_account:")
    assert (job.unique.until, job.unique.on_duplicate) == ("started", "skip")
    assert JobResult.load(first.id).metadata == {}  # the note is the backend's: not the task's metadata


def test_the_key_is_free_again_once_the_job_started() -> None:
    first = ut.sync_account.delay(7)
    assert len(run_queued()) == 1
    second = ut.sync_account.delay(7)
    assert not second.deduplicated and second.id != first.id


def test_replace_gives_the_waiting_job_the_new_arguments_and_eta() -> None:
    first = ut.rebuild_report.using(delay=60).delay(5, note="first")
    again = ut.rebuild_report.using(delay=120).delay(5, note="second")
    assert again.deduplicated and again.id == first.id and total() == 1
    job = get_queue().job(first.job_id)
    assert job is not None and job.payload["kwargs"] == {"note": "second"}
    assert job.state is State.SCHEDULED and job.eta is not None
    assert job.eta - job.enqueued_at == pytest.approx(120, abs=2)
    assert get_queue().unique_counts() == {"skipped": 0, "replaced": 1}


def test_raise_names_the_job_that_holds_the_key() -> None:
    first = ut.nightly_export.delay()
    with pytest.raises(DuplicateJob) as raised:
        ut.nightly_export.delay()
    assert raised.value.job_id == first.job_id and raised.value.key == "nightly-export"
    assert total() == 1


def test_using_sets_and_drops_the_key() -> None:
    keyed = ut.sync_account.using(unique_key="one-at-a-time", unique_until="finished")
    first = keyed.delay(1)
    assert keyed.delay(2).id == first.id
    assert not ut.sync_account.using(unique_key=False).delay(1).deduplicated
    assert total() == 2
    job = get_queue().job(first.job_id)
    assert job is not None and job.unique is not None and job.unique.until == "finished"


def test_map_takes_a_key_per_item_and_the_first_of_a_key_wins() -> None:
    handles = ut.sync_account.map([1, 2, 1, 3, 2])
    assert [h.deduplicated for h in handles] == [False, False, True, False, True]
    assert handles[2].id == handles[0].id and handles[4].id == handles[1].id
    assert total() == 3
    again = ut.sync_account.map([3, 4])
    assert [h.deduplicated for h in again] == [True, False] and again[0].id == handles[3].id
    replaced = ut.rebuild_report.map([9, 9], note="x")
    assert replaced[1].deduplicated and replaced[1].id == replaced[0].id


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": "k", "unique_until": "forever"}, "unique_until must be"),
        ({"unique_key": "k", "unique_until": 0}, "unique_until must be"),
        ({"unique_key": "k", "unique_until": -5}, "unique_until must be"),
        ({"unique_key": "k", "on_duplicate": "ignore"}, "on_duplicate must be"),
        ({"unique_key": "x" * 201}, "unique_key must be"),
        ({"unique_key": 5}, "unique_key must be"),
    ],
)
def test_bad_options_are_refused_when_the_task_is_made(options: dict[str, object], message: str) -> None:
    from queue_max_django.tasks import Task

    with pytest.raises(InvalidJob, match=message):
        Task(ut.sync_account.func, name="t.bad", **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match=message):
        ut.sync_account.using(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("task", "message"), [(ut.bad_key, "must return a str"), (ut.failing_key, "raised")])
def test_a_key_function_that_fails_stores_nothing(task: object, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        task.delay(1)  # type: ignore[attr-defined]
    with pytest.raises(InvalidJob, match=message):
        task.map([1, 2])  # type: ignore[attr-defined]
    assert total() == 0


def test_a_window_longer_than_keys_are_kept_is_refused_at_enqueue() -> None:
    with pytest.raises(InvalidJob, match="longer than the store keeps"):
        ut.sync_account.using(unique_until=10 * 86_400).delay(1)
    assert total() == 0


def test_queue_show_and_the_admin_job_page_show_the_key(admin_client: object) -> None:
    handle = ut.rebuild_report.using(enqueue_on_commit=False).delay(3)  # the test's transaction never commits
    out = io.StringIO()
    call_command("queue_show", str(handle.job_id), stdout=out)
    assert "report:3 (until started, on duplicate replace)" in out.getvalue()
    page = admin_client.get(f"/admin/queue_max_django/job/{handle.job_id}/")  # type: ignore[attr-defined]
    assert page.status_code == 200
    assert "report:3</code>" in page.content.decode() and "replaces its arguments" in page.content.decode()
