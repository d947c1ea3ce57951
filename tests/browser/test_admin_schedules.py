"""The admin's Schedules page in headless Chromium (issue 34): add a schedule through the form (a preview of
its next five runs first), see it beside a code-declared one, run it now, pause it until a time, and delete
it after the confirmation. The checks and permissions are tests/django/test_admin_schedules.py's."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.utils import timezone

from queue_max_django.conf import get_queue
from queue_max_django.periodic import periodic_task
from queue_max_django.running.registry import registry
from tests.browser.test_admin_browser import log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]
SEND = "tests.testapp.tasks.send_mail"


@pytest.fixture(autouse=True)
def declared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_tasks", dict(registry._tasks))  # the task below leaves with the test
    monkeypatch.setattr(registry, "_conflicts", list(registry._conflicts))

    @periodic_task(interval=300, name="shop.cleanup")
    def cleanup() -> None: ...

    yield


def test_add_preview_run_pause_and_delete_a_schedule(
    page: Page, live_server: LiveServer, screenshots: Path
) -> None:
    store = get_queue()
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/schedule/")
    assert "shop.cleanup" in (page.text_content("[data-testid=schedules]") or "")
    page.click("[data-testid=add-schedule]")
    page.fill("#id_name", "morning mail")
    page.select_option("#id_task", SEND)
    page.fill("#id_args", '["ops@example.com"]')
    page.fill("#id_kwargs", '{"subject": "good morning"}')
    page.fill("#id_cron", "0 7 * * mon-fri")
    page.select_option("#id_tz", "Europe/Berlin")
    page.click("[data-testid=preview-button]")
    page.wait_for_selector("[data-testid=preview]")
    assert page.locator("[data-testid=preview] time").count() == 5
    assert store.schedule_names() == []
    page.click("[data-testid=save]")
    page.wait_for_selector("ul.messagelist li.success")
    kept = store.schedule("morning mail")
    assert kept is not None and kept.kwargs == {"subject": "good morning"} and kept.tz == "Europe/Berlin"
    assert page.locator("[data-testid=next-runs] time").count() == 5

    page.click("[data-testid=run-now]")
    page.wait_for_selector("ul.messagelist li.success")
    (job,) = store.jobs("pending", name=SEND)  # type: ignore[arg-type]
    assert page.locator(f"[data-testid=last-runs] a[href$='/job/{job.job_id}/']").count() == 1

    until = (timezone.localtime() + dt.timedelta(days=1)).replace(second=0, microsecond=0)
    page.fill("[data-testid=pause-until]", until.strftime("%Y-%m-%dT%H:%M"))
    page.click("[data-testid=pause]")
    page.wait_for_selector("ul.messagelist li.success")
    assert store.schedule("morning mail").paused_until == until.timestamp()  # type: ignore[union-attr]
    page.goto(f"{live_server.url}/admin/queue_max_django/schedule/")
    states = page.locator("[data-testid=schedule-state]").all_text_contents()
    assert states[0].startswith("paused until ") and states[1] == "active"  # by name: morning mail, shop...
    page.screenshot(path=str(screenshots / "admin-schedules.png"), full_page=True)

    page.click("text=morning mail")
    page.click("[data-testid=delete]")
    page.click("[data-testid=confirm]")
    page.wait_for_selector("ul.messagelist li.success")
    assert store.schedule("morning mail") is None
    assert "morning mail" not in (page.text_content("[data-testid=schedules]") or "")
