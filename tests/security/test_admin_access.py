"""Who may see and do what in the admin's queue pages, page by page and action by action: anonymous users
and logged-in users who are not staff are sent to the login page; staff need the view permission to see,
change to retry or cancel, delete to delete; every POST needs the CSRF token; whatever jobs, workers and
limits carry (payloads, results, errors, tracebacks, task, queue and worker names, limit keys) is escaped on
every page. Nothing changes in the store on a refused request: checked against the store itself.

(tests/django/test_admin_pages.py and test_admin_actions.py test the pages' contents and the actions'
effects with a few of these cases; this file goes through all of them.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from queue_max_django import conf
from queue_max_django.engine import Queue, State
from tests.admin_clients import logged_in
from tests.dead_letters import fail

BASE = "/admin/queue_max_django/job/"
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Queue]:
    """This test's store, of the kind ``store_kind`` (tests/stores.py): LMDB in ``tmp_path``, or the
    PostgreSQL store in the test's database."""
    where: dict[str, Any] = {"DATA_DIR": tmp_path / "store"}
    if store_kind == "postgres":
        where = {"STORE": "postgresql", "URL": request.getfixturevalue("pg_url")}
    conf.reset()
    with override_settings(QUEUE_MAX={**where, "RETRY_BACKOFF": 0, "MAX_RETRIES": 0}):
        yield conf.get_queue()
    conf.reset()


@dataclass
class Jobs:
    failed: int
    pending: int
    scheduled: int
    done: int


@pytest.fixture
def jobs(store: Queue) -> Jobs:
    failed = fail(store, XSS)
    done = store.put({"args": [], "kwargs": {}}, name="t.x")
    record = store.claim(done)
    assert record is not None
    record.ack({"html": XSS})
    pending = store.put({"args": [XSS], "kwargs": {}}, name="t.x")
    scheduled = store.put({"args": [], "kwargs": {}}, name="t.x", delay=3600)
    return Jobs(failed, pending, scheduled, done)


def pages(jobs: Jobs) -> list[str]:
    ids = (jobs.failed, jobs.pending, jobs.scheduled, jobs.done)
    return [BASE, f"{BASE}panels/", *(f"{BASE}{s.value}/" for s in State), *(f"{BASE}{i}/" for i in ids)]


def posts(jobs: Jobs) -> list[tuple[str, str, dict[str, Any]]]:
    """(permission it needs, url, data) of every state-changing POST, confirmed."""
    selected = {"scope": "selected", "confirmed": "yes"}
    matching = {"scope": "matching", "confirmed": "yes", "as_of": repr(conf.get_queue().now())}
    return [
        ("change", f"{BASE}failed/action/", {"action": "retry", "ids": [jobs.failed], **selected}),
        ("change", f"{BASE}failed/action/", {"action": "retry", **matching}),
        ("delete", f"{BASE}failed/action/", {"action": "delete", "ids": [jobs.failed], **selected}),
        ("delete", f"{BASE}failed/action/", {"action": "delete", **matching}),
        ("change", f"{BASE}pending/action/", {"action": "cancel", "ids": [jobs.pending], **selected}),
        ("change", f"{BASE}pending/action/", {"action": "cancel", **matching}),
        ("change", f"{BASE}scheduled/action/", {"action": "cancel", "ids": [jobs.scheduled], **selected}),
        ("change", f"{BASE}{jobs.failed}/retry/", {}),
        ("change", f"{BASE}{jobs.pending}/cancel/", {}),
        ("change", f"{BASE}{jobs.scheduled}/cancel/", {}),
        ("change", f"{BASE}scheduled/action/", {"action": "run", "ids": [jobs.scheduled], **selected}),
        ("change", f"{BASE}{jobs.scheduled}/run/", {}),
        ("change", f"{BASE}{jobs.done}/enqueue/", {}),
    ]


def snapshot(store: Queue, jobs: Jobs) -> tuple[Any, ...]:
    return tuple(store.job(job_id) for job_id in vars(jobs).values()), store.stats()


def user(*codenames: str, staff: bool = True, username: str = "someone") -> Client:
    return logged_in(*codenames, username=username, staff=staff)


EVERY_PERMISSION = ("view_job", "change_job", "delete_job")


@pytest.mark.parametrize("who", ["anonymous", "not-staff"])
def test_every_page_and_post_sends_non_staff_to_the_login_page(store: Queue, jobs: Jobs, who: str) -> None:
    """Even a non-staff user holding every permission of the queue's model gets nothing."""
    client = Client() if who == "anonymous" else user(*EVERY_PERMISSION, staff=False)
    before = snapshot(store, jobs)
    for url in pages(jobs):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    for _permission, url, data in posts(jobs):
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    assert snapshot(store, jobs) == before


def test_staff_without_the_view_permission_gets_403_everywhere(store: Queue, jobs: Jobs) -> None:
    client = user()
    before = snapshot(store, jobs)
    for url in pages(jobs):
        assert client.get(url).status_code == 403, url
    for _permission, url, data in posts(jobs):
        assert client.post(url, data).status_code == 403, url
    assert snapshot(store, jobs) == before


@pytest.mark.parametrize(
    "codenames", [("view_job",), ("view_job", "change_job"), ("view_job", "delete_job")], ids="+".join
)
def test_each_post_needs_its_own_permission(store: Queue, jobs: Jobs, codenames: tuple[str, ...]) -> None:
    """Every page opens with the view permission; each POST is refused (403, nothing changed) without the
    permission it needs, and goes through (a redirect, the job changed) with it."""
    client = user(*codenames, username="poster")
    for url in pages(jobs):
        assert client.get(url).status_code == 200, url
    for index in range(len(posts(jobs))):
        permission, url, data = posts(jobs)[index]  # with the ids of this round's jobs
        before = snapshot(store, jobs)
        response = client.post(url, data)
        if f"{permission}_job" in codenames:
            assert response.status_code == 302, (url, data)
            assert snapshot(store, jobs) != before, (url, data)
        else:
            assert response.status_code == 403, (url, data)
            assert snapshot(store, jobs) == before, (url, data)
        _refill(store, jobs)


def _refill(store: Queue, jobs: Jobs) -> None:
    """Fresh failed, pending and scheduled jobs for the next POST (whatever the last one did)."""
    for state in (State.FAILED, State.PENDING, State.SCHEDULED):
        store.purge(state)
    jobs.failed = store.put({"args": [1], "kwargs": {}}, name="t.x", max_retries=0)
    record = store.claim(jobs.failed)
    assert record is not None
    record.nack("no")
    jobs.pending = store.put({"args": [], "kwargs": {}}, name="t.x")
    jobs.scheduled = store.put(1, delay=3600)


def test_every_post_needs_the_csrf_token(store: Queue, jobs: Jobs) -> None:
    """Refused without the token (403, nothing changed); the same request with the token goes through, so
    the refusal is CSRF's."""
    User.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="root", password="pw")
    for index in range(len(posts(jobs))):
        _permission, url, data = posts(jobs)[index]
        before = snapshot(store, jobs)
        assert client.post(url, data).status_code == 403, url
        assert snapshot(store, jobs) == before, url
        client.get(BASE)  # sets the CSRF cookie
        token = client.cookies["csrftoken"].value
        assert client.post(url, {**data, "csrfmiddlewaretoken": token}).status_code == 302, url
        assert snapshot(store, jobs) != before, (index, url)
        _refill(store, jobs)


def test_everything_jobs_workers_and_limits_carry_is_escaped_on_every_page(store: Queue, jobs: Jobs) -> None:
    store.put({"args": [XSS], "kwargs": {XSS: XSS}}, queue=XSS, name=XSS)
    store.report_worker(XSS, stale_after=60, queues=(XSS,), current_jobs=())
    store.set_circuit_breaker(f"name:{XSS}", threshold=1, recovery_timeout=60)
    store.set_rate_limit(f"queue:{XSS}", "5/m")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    urls = [*pages(jobs), f"{BASE}failed/?q={XSS}&task={XSS}&queue={XSS}&error_type={XSS}",
            f"{BASE}pending/?queue={XSS}"]  # fmt: skip
    for url in urls:
        html = client.get(url).content.decode()
        assert "<script>alert" not in html, url
    dashboard = client.get(BASE).content.decode()
    assert dashboard.count(ESCAPED) >= 3  # the queue, the worker, the breaker or limit key
    for job_id in (jobs.failed, jobs.done, jobs.pending):
        assert ESCAPED in client.get(f"{BASE}{job_id}/").content.decode()
    failed = client.get(f"{BASE}{jobs.failed}/").content.decode()
    assert f"boom {ESCAPED}" in failed  # the error and the traceback
    confirm = client.post(
        f"{BASE}failed/action/", {"action": "retry", "scope": "selected", "ids": [jobs.failed]}
    )
    assert confirm.status_code == 200 and "<script>alert" not in confirm.content.decode()


SECRET = "s3cret-token-42"
NOWHERE = "text-found-in-no-job"


def confirmations(jobs: Jobs, search: str) -> list[tuple[str, dict[str, Any]]]:
    """Every POST that shows a confirmation page (not confirmed yet), ``search`` as the ``q=`` filter."""
    matching = {"scope": "matching", "q": search}
    return [
        (f"{BASE}failed/action/", {"action": "delete", **matching}),
        (f"{BASE}failed/action/", {"action": "delete", "scope": "selected", "ids": [jobs.failed]}),
        (f"{BASE}failed/action/", {"action": "retry", **matching}),
        (f"{BASE}pending/action/", {"action": "cancel", **matching}),
        (f"{BASE}scheduled/action/", {"action": "cancel", **matching}),
        (f"{BASE}failed/action/", {"action": "delete", **matching, "confirmed": "yes"}),
        (f"{BASE}failed/action/", {"action": "delete", "scope": "selected", "ids": [jobs.failed],
                                   "confirmed": "yes", "q": search}),
    ]  # fmt: skip


def test_delete_without_view_shows_nothing_of_the_jobs_and_tells_nothing_of_a_search(
    store: Queue, jobs: Jobs
) -> None:
    """A staff user holding delete but not view gets 403 on every page, on every confirmation page (which
    lists the dead letters' task names, queues and errors, and counts what a search matches) and on every
    confirmed action; the answer to a search that matches an error is byte for byte the answer to one that
    matches nothing, and the store is unchanged."""
    fail(store, SECRET, name="secret.task")
    client = user("delete_job", username="deleter")
    before = snapshot(store, jobs)
    for url in pages(jobs):
        assert client.get(url).status_code == 403, url
    for (url, hit_data), (_url, miss_data) in zip(
        confirmations(jobs, SECRET), confirmations(jobs, NOWHERE), strict=True
    ):
        hit, miss = client.post(url, hit_data), client.post(url, miss_data)
        assert hit.status_code == miss.status_code == 403, (url, hit_data)
        assert hit.content == miss.content, (url, hit_data)
        body = hit.content.decode()
        assert SECRET not in body and "secret.task" not in body and "boom" not in body, (url, hit_data)
        assert not list(hit.wsgi_request._messages), (url, hit_data)  # no "Deleted 1 job." waiting either
    assert snapshot(store, jobs) == before
    assert store.stats()["failed"] == 2


def test_change_implies_view_as_in_djangos_admin_but_never_delete(store: Queue, jobs: Jobs) -> None:
    """A staff user holding change alone sees the pages (Django's admin counts change as view) and may retry
    and cancel, but every delete, confirmation page included, is refused and deletes nothing."""
    client = user("change_job", username="changer")
    for url in pages(jobs):
        assert client.get(url).status_code == 200, url
    retry = client.post(f"{BASE}failed/action/", {"action": "retry", "scope": "matching", "q": "boom"})
    assert retry.status_code == 200 and "boom" in retry.content.decode()
    before = snapshot(store, jobs)
    for url, data in confirmations(jobs, "boom"):
        if data["action"] == "delete":
            assert client.post(url, data).status_code == 403, (url, data)
    assert snapshot(store, jobs) == before
