"""The dashboard's pause and resume buttons in headless Chromium (issue 31): pause a queue for an hour with a
reason from its row of the queues table, see who paused it, resume it, and pause one task through the form
under the Paused table. The permission checks are tests/django/test_pauses.py's (Django's test client)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from queue_max_django.conf import get_queue
from tests.browser.test_admin_browser import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]


def test_pause_and_resume_a_queue_and_pause_a_task_from_the_dashboard(
    page: Page, live_server: LiveServer
) -> None:
    store = get_queue()
    store.put({"args": [], "kwargs": {}}, name="shop.tasks.send_receipt", queue="mail")
    store.put({"args": [], "kwargs": {}}, name="shop.tasks.sync")
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/")
    page.wait_for_selector("h1:text('Queue dashboard')")
    assert page.text_content("[data-testid=paused-mail]") == "no"

    row = page.locator("tr[data-queue=mail]")
    row.locator("select[name=duration]").select_option("1h")
    page.fill("[data-testid=reason-mail]", "provider outage")
    page.click("[data-testid=pause-mail]")
    page.wait_for_selector("ul.messagelist")
    assert "Paused mail until " in (page.text_content("ul.messagelist") or "")
    (pause,) = store.pauses()
    assert (pause.queue, pause.task, pause.reason, pause.by) == (
        "mail",
        None,
        "provider outage",
        "admin user admin",
    )
    assert pause.until == pytest.approx(pause.paused_at + 3600)
    shown = page.text_content("[data-testid=paused-mail]") or ""
    assert shown.startswith("paused by admin user admin until ") and shown.endswith(": provider outage")
    assert "mail" in (page.text_content("[data-testid=pauses]") or "")

    page.click("[data-testid=resume-mail]")
    page.wait_for_selector("ul.messagelist li.success")
    assert "Resumed mail" in (page.text_content("ul.messagelist") or "")
    assert store.pauses() == []
    assert page.text_content("[data-testid=paused-mail]") == "no"

    form = page.locator("[data-testid=pause-task-form]")
    form.locator("input[name=queue]").fill("default")
    form.locator("input[name=task]").fill("shop.tasks.sync")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("ul.messagelist")
    assert [(p.queue, p.task, p.until) for p in store.pauses()] == [("default", "shop.tasks.sync", None)]
    assert "task shop.tasks.sync in default" in (page.text_content("[data-testid=pauses]") or "")
    assert page.text_content("[data-testid=paused-default]") == "no"  # the queue itself is not paused
