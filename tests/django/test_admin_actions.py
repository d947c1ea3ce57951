"""The admin's actions with Django's test client: each is a POST with CSRF, needs its permission, asks for
confirmation when it touches a selection or a filter, then changes the store, redirects and says so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from queue_max_django.admin import listing
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State
from tests.admin_clients import logged_in

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0):
        yield get_queue()


def staff(*codenames: str) -> Client:
    return logged_in(*codenames, username="-".join(codenames) or "none")


def fail(store: Queue, text: str, *, name: str = "t.task", error: type[Exception] = ValueError) -> int:
    job_id = store.put({"args": [text], "kwargs": {}}, name=name, max_retries=0)
    record = store.claim(job_id)
    assert record is not None
    record.nack(error(text))
    return job_id


def messages_of(response: Response) -> list[str]:
    """The admin messages of a redirecting response, read from the page it leads to (as a person sees them;
    reading them there also clears them for the next request)."""
    assert response.status_code == 302, response.status_code
    shown = response.client.get(response["Location"])
    return [str(message) for message in shown.context["messages"]]


def state(store: Queue, job_id: int) -> State | None:
    job = store.job(job_id)
    return None if job is None else job.state


def post(client: Client, state_value: str, **data: object) -> Response:
    return client.post(f"{BASE}{state_value}/action/", data)


# ---------------------------------------------------------------------------- selected jobs


def test_retry_selected_asks_first_then_retries_and_says_how_many(admin_client: Client, store: Queue) -> None:
    a, b, c = (fail(store, f"job {n}") for n in range(3))
    confirm = post(admin_client, "failed", action="retry", scope="selected", ids=[a, b])
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert 'data-testid="how-many">2<' in html and "Retry" in html
    assert [state(store, i) for i in (a, b, c)] == [State.FAILED] * 3  # nothing happened yet
    done = post(admin_client, "failed", action="retry", scope="selected", ids=[a, b], confirmed="yes")
    assert done.status_code == 302 and done["Location"] == f"{BASE}failed/"
    assert messages_of(done) == ["Retried 2 jobs."]
    assert [state(store, i) for i in (a, b, c)] == [State.PENDING, State.PENDING, State.FAILED]
    assert store.job(a).retries == 0  # type: ignore[union-attr]


def test_delete_selected_removes_dead_letters_from_the_store(admin_client: Client, store: Queue) -> None:
    a, b = fail(store, "a"), fail(store, "b")
    confirm = post(admin_client, "failed", action="delete", scope="selected", ids=[a])
    assert 'data-testid="how-many">1<' in confirm.content.decode()
    done = post(admin_client, "failed", action="delete", scope="selected", ids=[a], confirmed="yes")
    assert messages_of(done) == ["Deleted 1 job."]
    assert store.job(a) is None and state(store, b) is State.FAILED
    assert store.stats()["failed"] == 1 and store.stats()["pending"] == 0


def test_jobs_that_left_the_state_meanwhile_are_skipped_and_counted(
    admin_client: Client, store: Queue
) -> None:
    a, b = fail(store, "a"), fail(store, "b")
    store.requeue(b)  # someone else retried it between the list and the click
    confirm = post(admin_client, "failed", action="delete", scope="selected", ids=[a, b, 424242])
    assert 'data-testid="how-many">1<' in confirm.content.decode()
    done = post(admin_client, "failed", action="delete", scope="selected", ids=[a, b], confirmed="yes")
    assert messages_of(done) == [
        "Deleted 1 job. Skipped 1 job that no longer fit (gone, or in another state by now)."
    ]
    assert state(store, b) is State.PENDING  # not deleted: it was no longer a dead letter


def test_cancel_selected_waiting_and_scheduled_jobs(admin_client: Client, store: Queue) -> None:
    waiting, kept = store.put(1), store.put(2)
    later = store.put(3, delay=3600)
    done = post(admin_client, "pending", action="cancel", scope="selected", ids=[waiting], confirmed="yes")
    assert messages_of(done) == ["Cancelled 1 job."]
    done = post(admin_client, "scheduled", action="cancel", scope="selected", ids=[later], confirmed="yes")
    assert messages_of(done) == ["Cancelled 1 job."]
    assert store.job(waiting) is None and store.job(later) is None and state(store, kept) is State.PENDING


def test_no_selection_is_a_message_not_an_error(admin_client: Client, store: Queue) -> None:
    fail(store, "a")
    response = post(admin_client, "failed", action="retry", scope="selected")
    assert response.status_code == 302
    assert messages_of(response) == ["No job was selected: tick the jobs to act on first."]


def test_an_action_that_does_not_fit_the_state_changes_nothing(admin_client: Client, store: Queue) -> None:
    job_id = store.put(1)
    for state_value, action in (("pending", "retry"), ("running", "cancel"), ("done", "delete"),
                                ("failed", "cancel"), ("failed", "launch")):  # fmt: skip
        response = post(
            admin_client, state_value, action=action, scope="selected", ids=[job_id], confirmed="yes"
        )
        assert response.status_code == 302
        assert messages_of(response)[0].startswith(f"No action '{action}' applies to")
    assert state(store, job_id) is State.PENDING


def test_get_on_an_action_url_changes_nothing(admin_client: Client, store: Queue) -> None:
    job_id = fail(store, "a")
    url = f"{BASE}failed/action/?action=retry&scope=selected&ids={job_id}&confirmed=yes"
    assert admin_client.get(url).status_code == 302
    assert admin_client.get(f"{BASE}{job_id}/retry/").status_code == 405
    assert state(store, job_id) is State.FAILED


def test_state_changes_need_the_csrf_token(store: Queue) -> None:
    job_id = fail(store, "a")
    user = User.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    data = {"action": "retry", "scope": "selected", "ids": [job_id], "confirmed": "yes"}
    assert client.post(f"{BASE}failed/action/", data).status_code == 403
    assert client.post(f"{BASE}{job_id}/retry/").status_code == 403
    assert state(store, job_id) is State.FAILED


# ---------------------------------------------------------------------------- permissions per action


@pytest.mark.parametrize(
    ("codenames", "action", "allowed"),
    [
        (("view_job",), "retry", False),
        (("view_job",), "delete", False),
        (("view_job", "change_job"), "retry", True),
        (("view_job", "change_job"), "delete", False),
        (("view_job", "delete_job"), "delete", True),
        (("view_job", "delete_job"), "retry", False),
    ],
)
def test_each_action_needs_its_permission(
    store: Queue, codenames: tuple[str, ...], action: str, allowed: bool
) -> None:
    job_id = fail(store, "a")
    client = staff(*codenames)
    confirm = post(client, "failed", action=action, scope="selected", ids=[job_id])
    done = post(client, "failed", action=action, scope="selected", ids=[job_id], confirmed="yes")
    assert (confirm.status_code, done.status_code) == ((200, 302) if allowed else (403, 403))
    expected = (None if action == "delete" else State.PENDING) if allowed else State.FAILED
    assert state(store, job_id) is expected


@pytest.mark.parametrize(
    ("codenames", "allowed"), [(("view_job",), False), (("view_job", "change_job"), True)]
)
def test_cancel_needs_the_change_permission(store: Queue, codenames: tuple[str, ...], allowed: bool) -> None:
    job_id = store.put(1)
    response = staff(*codenames).post(f"{BASE}{job_id}/cancel/")
    assert response.status_code == (302 if allowed else 403)
    assert (store.job(job_id) is None) == allowed


# ---------------------------------------------------------------------------- all matching


def test_retry_all_matching_acts_on_the_filter_only(admin_client: Client, store: Queue) -> None:
    timeouts = [fail(store, f"timeout {n}", name="t.fetch", error=TimeoutError) for n in range(3)]
    others = [
        fail(store, "bad value", name="t.fetch"),
        fail(store, "timeout", name="t.other", error=TimeoutError),
    ]
    filters = {"task": "t.fetch", "error_type": "TimeoutError"}
    confirm = post(admin_client, "failed", action="retry", scope="matching", **filters)
    html = confirm.content.decode()
    assert (
        'data-testid="how-many">3<' in html and "every one of the dead letters that match the filters" in html
    )
    as_of = html.split('name="as_of" value="')[1].split('"')[0]
    done = post(
        admin_client, "failed", action="retry", scope="matching", confirmed="yes", as_of=as_of, **filters
    )
    assert messages_of(done) == ["Retried 3 jobs."]
    assert done["Location"] == f"{BASE}failed/?task=t.fetch&error_type=TimeoutError"
    assert [state(store, i) for i in timeouts] == [State.PENDING] * 3
    assert [state(store, i) for i in others] == [State.FAILED] * 2


def test_all_matching_leaves_jobs_that_failed_after_the_confirmation(
    admin_client: Client, store: Queue
) -> None:
    before = fail(store, "early")
    as_of = repr(store.now())
    time.sleep(0.002)  # failed-at times are in microseconds: the next failure is strictly later
    after = fail(store, "late")
    done = post(admin_client, "failed", action="retry", scope="matching", q="e", confirmed="yes", as_of=as_of)
    assert messages_of(done) == ["Retried 1 job."]
    assert (state(store, before), state(store, after)) == (State.PENDING, State.FAILED)


def test_delete_all_dead_letters_purges_them(admin_client: Client, store: Queue) -> None:
    ids = [fail(store, f"x{n}") for n in range(4)]
    waiting = store.put(1)
    confirm = post(admin_client, "failed", action="delete", scope="matching")
    assert 'data-testid="how-many">4<' in confirm.content.decode()
    as_of = confirm.content.decode().split('name="as_of" value="')[1].split('"')[0]
    done = post(admin_client, "failed", action="delete", scope="matching", confirmed="yes", as_of=as_of)
    assert messages_of(done) == ["Deleted 4 jobs."]
    assert all(store.job(i) is None for i in ids) and state(store, waiting) is State.PENDING
    assert store.stats()["failed"] == 0


def test_cancel_all_matching_waiting_jobs_of_one_queue(admin_client: Client, store: Queue) -> None:
    mail = store.put_many([1, 2, 3], queue="mail")
    other = store.put(4)
    confirm = post(admin_client, "pending", action="cancel", scope="matching", queue="mail")
    assert 'data-testid="how-many">3<' in confirm.content.decode()
    as_of = repr(store.now())
    done = post(admin_client, "pending", action="cancel", scope="matching", queue="mail", confirmed="yes",
                as_of=as_of)  # fmt: skip
    assert messages_of(done) == ["Cancelled 3 jobs."]
    assert all(store.job(i) is None for i in mail) and state(store, other) is State.PENDING


def test_counting_stops_at_the_scan_limit(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "SCAN_LIMIT", 3)
    monkeypatch.setattr(listing, "BATCH", 2)
    ids = [fail(store, f"same {n}") for n in range(5)]
    confirm = post(admin_client, "failed", action="retry", scope="matching", q="same")
    html = confirm.content.decode()
    assert 'data-testid="how-many">3+<' in html and "Counting stopped after 3 jobs" in html
    done = post(admin_client, "failed", action="retry", scope="matching", q="same", confirmed="yes",
                as_of=repr(store.now()))  # fmt: skip
    assert messages_of(done)[0].startswith("Retried 3 jobs. Only the first 3 jobs were looked at")
    assert sorted(state(store, i) or "gone" for i in ids).count(State.PENDING) == 3


def test_nothing_matching_says_so(admin_client: Client, store: Queue) -> None:
    fail(store, "a")
    confirm = post(admin_client, "failed", action="retry", scope="matching", task="nothing")
    assert "there is nothing to retry" in confirm.content.decode()


# ---------------------------------------------------------------------------- one job's buttons


def test_retry_from_a_jobs_page(admin_client: Client, store: Queue) -> None:
    job_id = fail(store, "a")
    response = admin_client.post(f"{BASE}{job_id}/retry/")
    assert response.status_code == 302 and response["Location"] == f"{BASE}{job_id}/"
    assert messages_of(response) == [f"Retried job {job_id}."]
    assert state(store, job_id) is State.PENDING
    again = admin_client.post(f"{BASE}{job_id}/retry/")
    assert messages_of(again) == [f"Job {job_id} is waiting: retry does not apply to it, nothing was done."]
    dead = fail(store, "b")
    cancelled = admin_client.post(f"{BASE}{dead}/cancel/")
    assert messages_of(cancelled) == [
        f"Job {dead} is a dead letter: cancel does not apply to it, nothing was done."
    ]


def test_cancel_from_a_jobs_page_goes_back_to_its_list(admin_client: Client, store: Queue) -> None:
    job_id = store.put(1, delay=60)
    response = admin_client.post(f"{BASE}{job_id}/cancel/")
    assert response["Location"] == f"{BASE}scheduled/"
    assert messages_of(response) == [f"Cancelled job {job_id}."]
    assert store.job(job_id) is None


def test_cancel_on_a_jobs_page_asks_first_and_no_goes_back_to_the_job(
    admin_client: Client, store: Queue
) -> None:
    job_id = store.put(1, delay=60)
    html = admin_client.get(f"{BASE}{job_id}/").content.decode()
    assert 'value="Cancel job…"' in html and f'action="{BASE}scheduled/action/"' in html
    assert f'name="from_job" value="{job_id}"' in html
    confirm = post(
        admin_client, "scheduled", action="cancel", scope="selected", ids=[job_id], from_job=job_id
    )
    html = confirm.content.decode()
    assert "Cancel 1 job?" in html and state(store, job_id) is State.SCHEDULED  # nothing yet
    assert f'href="{BASE}{job_id}/" class="button cancel-link" data-testid="back"' in html  # No: the job
    assert "delete-confirmation" in html and 'class="qm-danger" data-testid="confirm"' in html  # removes it
    done = post(admin_client, "scheduled", action="cancel", scope="selected", ids=[job_id], confirmed="yes")
    assert done["Location"] == f"{BASE}scheduled/"
    assert messages_of(done) == ["Cancelled 1 job."] and store.job(job_id) is None


def test_a_retry_confirmation_is_not_styled_as_a_deletion(admin_client: Client, store: Queue) -> None:
    job_id = fail(store, "a")
    html = post(admin_client, "failed", action="retry", scope="selected", ids=[job_id]).content.decode()
    assert "Retry 1 job?" in html
    assert "delete-confirmation" not in html and "qm-danger" not in html
    assert 'class="default" data-testid="confirm"' in html
    assert (
        f'href="{BASE}failed/" class="button cancel-link"' in html
    )  # asked from the list: No goes back there


def test_delete_from_a_jobs_page_goes_through_the_confirmation(admin_client: Client, store: Queue) -> None:
    job_id = fail(store, "a")
    html = admin_client.get(f"{BASE}{job_id}/").content.decode()
    assert f'action="{BASE}failed/action/"' in html and f'name="ids" value="{job_id}"' in html
    confirm = post(admin_client, "failed", action="delete", scope="selected", ids=[job_id])
    assert "Delete 1 job?" in confirm.content.decode()
    assert "delete-confirmation" in confirm.content.decode()


def test_enqueue_again_puts_a_new_waiting_job_like_a_done_one(admin_client: Client, store: Queue) -> None:
    payload = {"args": [1, "x"], "kwargs": {"k": [2]}}
    old = store.put(payload, name="t.again", queue="mail", priority=5, max_retries=2, timeout=7.0,
                    partition_key="p-1")  # fmt: skip
    store.get(0).ack("first result")
    total = store.stats()["total"]
    assert 'value="Enqueue again"' in admin_client.get(f"{BASE}{old}/").content.decode()
    assert admin_client.get(f"{BASE}{old}/enqueue/").status_code == 405  # POST only
    response = admin_client.post(f"{BASE}{old}/enqueue/")
    assert store.stats()["total"] == total + 1
    new = int(response["Location"].rstrip("/").rsplit("/", 1)[1])
    assert response["Location"] == f"{BASE}{new}/" and new != old
    assert messages_of(response) == [f"Enqueued job {old} again as job {new}."]
    fresh, before = store.job(new), store.job(old)
    assert fresh is not None and before is not None
    assert (fresh.state, fresh.payload, fresh.name, fresh.queue, fresh.priority, fresh.max_retries) == (
        State.PENDING, payload, "t.again", "mail", 5, 2)  # fmt: skip
    assert (fresh.timeout, fresh.partition_key, fresh.attempts, fresh.result) == (7.0, "p-1", 0, None)
    assert (before.state, before.result) == (State.DONE, "first result")  # the done job stays as it was


def test_run_now_makes_a_scheduled_job_wait_without_counting_an_attempt(
    admin_client: Client, store: Queue
) -> None:
    later = store.put({"args": [1], "kwargs": {}}, name="t.x", delay=3600, max_retries=2)
    html = admin_client.get(f"{BASE}{later}/").content.decode()
    assert 'value="Run now"' in html and f'action="{BASE}{later}/run/"' in html
    assert admin_client.get(f"{BASE}{later}/run/").status_code == 405  # POST only
    response = admin_client.post(f"{BASE}{later}/run/")
    assert response["Location"] == f"{BASE}{later}/"
    assert messages_of(response) == [f"Moved to the waiting jobs, to run now: job {later}."]
    job = store.job(later)
    assert job is not None and (job.state, job.attempts, job.retries, job.eta) == (State.PENDING, 0, 0, None)
    assert store.get(0).job_id == later  # a worker takes it now
    again = admin_client.post(f"{BASE}{later}/run/")  # running by now: nothing to do
    assert messages_of(again) == [f"Job {later} is running: run now does not apply to it, nothing was done."]
    waiting = store.put(2)
    assert messages_of(admin_client.post(f"{BASE}{waiting}/run/")) == [
        f"Job {waiting} is waiting: run now does not apply to it, nothing was done."
    ]


def test_run_now_on_every_matching_scheduled_job_asks_first_and_needs_change(store: Queue) -> None:
    mail = [store.put(n, queue="mail", delay=3600) for n in range(2)]
    other = store.put(9, queue="default", delay=3600)
    viewer = staff("view_job")
    assert viewer.post(f"{BASE}{mail[0]}/run/").status_code == 403
    assert post(viewer, "scheduled", action="run", scope="matching", queue="mail").status_code == 403
    changer = staff("view_job", "change_job")
    confirm = post(changer, "scheduled", action="run", scope="matching", queue="mail")
    html = confirm.content.decode()
    assert 'data-testid="how-many">2<' in html and "qm-danger" not in html and "ahead of its due time" in html
    assert [state(store, i) for i in mail] == [State.SCHEDULED] * 2  # nothing yet
    done = post(changer, "scheduled", action="run", scope="matching", queue="mail", confirmed="yes",
                as_of=repr(store.now()))  # fmt: skip
    assert messages_of(done) == ["Moved to the waiting jobs, to run now: 2 jobs."]
    assert [state(store, i) for i in mail] == [State.PENDING] * 2
    assert state(store, other) is State.SCHEDULED


def test_enqueue_again_needs_the_csrf_token(admin_user: User, store: Queue) -> None:
    done = store.put({"args": [], "kwargs": {}}, name="t.x")
    store.get(0).ack(None)
    total = store.stats()["total"]
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    assert strict.post(f"{BASE}{done}/enqueue/").status_code == 403
    assert store.stats()["total"] == total


def test_enqueue_again_needs_change_and_a_done_job(store: Queue) -> None:
    done = store.put({"args": [], "kwargs": {}}, name="t.x")
    store.get(0).ack(None)
    dead = fail(store, "a")
    total = store.stats()["total"]
    viewer = staff("view_job")
    assert 'value="Enqueue again"' not in viewer.get(f"{BASE}{done}/").content.decode()
    assert viewer.post(f"{BASE}{done}/enqueue/").status_code == 403
    changer = staff("view_job", "change_job")
    assert 'value="Enqueue again"' not in changer.get(f"{BASE}{dead}/").content.decode()
    response = changer.post(f"{BASE}{dead}/enqueue/")
    assert messages_of(response) == [
        f"Job {dead} is a dead letter: only a done job can be enqueued again, nothing was done."
    ]
    assert store.stats()["total"] == total  # nothing was put
    assert changer.post(f"{BASE}{done}/enqueue/").status_code == 302
    assert store.stats()["total"] == total + 1


def test_a_button_for_a_job_that_is_gone_says_so(admin_client: Client, store: Queue) -> None:
    for job_id in ("4242", "99999999999999999999999"):
        response = admin_client.post(f"{BASE}{job_id}/retry/")
        assert response.status_code == 302 and response["Location"] == BASE
        assert messages_of(response) == [f"There is no job {job_id} (any more): nothing was done."]


# ---------------------------------------------------------------------------- the actions module


def test_the_delete_action_removes_a_dead_letter_or_a_waiting_job_never_a_running_one(store: Queue) -> None:
    dead, waiting = fail(store, "a"), store.put(1)
    running = store.put(2)
    assert store.claim(running) is not None
    assert store.delete(dead) and store.delete(waiting)
    assert not store.delete(running) and not store.delete(4242)
    assert store.job(dead) is None and store.job(waiting) is None and state(store, running) is State.RUNNING
    assert store.verify() == []
