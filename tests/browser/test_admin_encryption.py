"""An encrypted job's page in headless Chromium (issue 36): a staff user without ``view_job_payload`` reads
``(encrypted)`` and has no way to open it; a superuser (who holds every permission) follows the page's
decrypt link, reads the arguments and result opened, and the view is in the admin's log."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.testing import run_queued
from tests.browser.test_admin_browser import log_in
from tests.testapp import encrypted_tasks as et

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytest.importorskip("cryptography")
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]

KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
SECRET = "4111-SECRET-BROWSER"


@pytest.fixture
def encrypted() -> Iterator[None]:
    with et.registered(), override_settings(QUEUE_MAX={**settings.QUEUE_MAX, "ENCRYPTION_KEYS": {"k1": KEY}}):
        conf.reset()
        yield
    conf.reset()


def test_an_encrypted_job_opens_only_for_the_permission_and_the_view_is_logged(
    page: Page, live_server: LiveServer, screenshots: Path, encrypted: None
) -> None:
    done = et.charge.using(metadata={"customer": SECRET}).delay(SECRET)
    run_queued()
    viewer = User.objects.create_user("viewer", password="viewer-pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "viewer-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{done.job_id}/")
    page.wait_for_selector("[data-testid=encrypted]")
    body = page.text_content("body") or ""
    assert "(encrypted)" in body and SECRET not in body
    assert page.locator("[data-testid=decrypt]").count() == 0
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{done.job_id}/?decrypt=1")
    assert SECRET not in (page.text_content("body") or "")
    page.screenshot(path=str(screenshots / "admin-job-encrypted.png"), full_page=True)
    assert LogEntry.objects.count() == 0

    page.context.clear_cookies()
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{done.job_id}/")
    page.click("[data-testid=decrypt]")
    page.wait_for_url(f"**/job/{done.job_id}/?decrypt=1")
    body = page.text_content("body") or ""
    assert f"{SECRET}-receipt" in body and SECRET in body
    [entry] = LogEntry.objects.all()
    assert (entry.object_id, entry.user.username) == (str(done.job_id), "admin")
