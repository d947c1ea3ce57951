"""Encrypted jobs in the admin (issue 36), on every store: a user without ``view_job_payload`` reads
``(encrypted)`` for an encrypted job's arguments, result, metadata, error and traceback, in lists and on its
page, and no argument search finds it; a user with it opens them on demand (``?decrypt=1``), each view
written to the admin log; tags stay searchable for all; a job quarantined because its payload does not open
is shown and deleted like any dead letter."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client, override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from queue_max_django.testing import run_queued
from tests.admin_clients import logged_in
from tests.testapp import encrypted_tasks as et

pytest.importorskip("cryptography")

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"
KEY_1 = base64.urlsafe_b64encode(bytes(range(32))).decode()
KEY_2 = base64.urlsafe_b64encode(bytes(range(1, 33))).decode()
SECRET = "4111-SECRET-ADMIN"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}, RETRY_BACKOFF=0, ENQUEUE_ON_COMMIT=False):
        yield


@pytest.fixture(autouse=True)
def _encrypted_tasks() -> Iterator[None]:
    with et.registered():
        yield


def listed(client: Client, state: str, search: str) -> list[int]:
    response = client.get(f"{BASE}{state}/?q={quote(search)}")
    assert response.status_code == 200
    return [int(value) for value in re.findall(r'<tr data-job-id="(\d+)"', response.content.decode())]


def test_without_the_permission_everything_sealed_reads_encrypted() -> None:
    client = logged_in("view_job", username="viewer")
    done = et.charge.using(metadata={"customer": SECRET}).delay(SECRET)
    failed = et.leak.delay(SECRET)
    run_queued()
    waiting = et.charge.delay(SECRET)
    for state in ("pending", "done", "failed"):
        page = client.get(f"{BASE}{state}/").content.decode()
        assert SECRET not in page and "(encrypted)" in page
    for job_id in (done.job_id, failed.job_id, waiting.job_id):
        page = client.get(f"{BASE}{job_id}/").content.decode()
        assert SECRET not in page and "(encrypted)" in page and 'data-testid="encrypted"' in page
        assert 'data-testid="decrypt"' not in page
        assert client.get(f"{BASE}{job_id}/?decrypt=1").content.decode().count(SECRET) == 0
    assert "ValueError" in client.get(f"{BASE}{failed.job_id}/").content.decode()  # the type stays clear
    assert LogEntry.objects.count() == 0
    assert listed(client, "pending", f"args.card:{SECRET}") == []
    assert listed(client, "done", "meta.customer:" + SECRET) == []
    assert listed(client, "pending", "tag:billing") == [waiting.job_id]  # tags stay searchable


def test_with_the_permission_a_view_decrypts_on_demand_and_is_logged() -> None:
    client = logged_in("view_job", "view_job_payload", username="auditor")
    done = et.charge.using(metadata={"customer": "acme"}).delay(SECRET)
    failed = et.leak.delay(SECRET)
    run_queued()
    page = client.get(f"{BASE}{done.job_id}/").content.decode()
    assert SECRET not in page and 'data-testid="decrypt"' in page
    assert LogEntry.objects.count() == 0
    opened = client.get(f"{BASE}{done.job_id}/?decrypt=1").content.decode()
    assert f"{SECRET}-receipt" in opened and "acme" in opened and SECRET in opened
    [entry] = LogEntry.objects.all()
    assert (entry.object_id, entry.user.username) == (str(done.job_id), "auditor")
    assert "decrypted" in entry.get_change_message()
    failed_page = client.get(f"{BASE}{failed.job_id}/?decrypt=1").content.decode()
    assert f"card {SECRET} was declined" in failed_page
    assert LogEntry.objects.count() == 2
    assert listed(client, "done", "meta.customer:acme") == [done.job_id]
    waiting = et.charge.delay(SECRET)
    assert listed(client, "pending", f"args.card:{SECRET}") == [waiting.job_id]


def test_a_job_whose_payload_does_not_open_is_shown_and_deleted(queue_max: Configure) -> None:
    lost = et.charge.delay(SECRET)
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2}, ENQUEUE_ON_COMMIT=False):
        run_queued()
        job = get_queue().job(lost.job_id or 0)
        assert job is not None and job.corrupted and job.state is State.FAILED
        client = logged_in("view_job", "delete_job", "view_job_payload", username="ops")
        page = client.get(f"{BASE}{lost.job_id}/?decrypt=1").content.decode()
        assert "Corrupted" in page and "does not open" in page and SECRET not in page
        assert listed(client, "failed", "") == [lost.job_id]
        form = {"action": "delete", "scope": "selected", "ids": str(lost.job_id), "confirmed": "yes"}
        response = client.post(f"{BASE}failed/action/", form)
        assert response.status_code in (200, 302)
        assert get_queue().job(lost.job_id or 0) is None
