"""The admin's search by tag in headless Chromium (issue 34): type ``tag:order:42`` in the search box, get
that tag's jobs; open one, follow its tag's link back to the search. Screenshots of both for the docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from queue_max_django.conf import get_queue
from tests.browser.test_admin_browser import listed_ids, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]


def test_a_tag_search_and_a_jobs_tags(page: Page, live_server: LiveServer, screenshots: Path) -> None:
    store = get_queue()
    order = [
        store.put({"args": [42], "kwargs": {}}, name="shop.tasks.charge", metadata={"_tags": ["order:42"]}),
        store.put(
            {"args": [42, "ann@example.com"], "kwargs": {}},
            name="shop.tasks.send_receipt",
            queue="mail",
            metadata={"_tags": ["order:42", "tenant:acme"]},
        ),
    ]
    for n in range(5):
        store.put({"args": [n], "kwargs": {}}, name="shop.tasks.charge", metadata={"_tags": [f"order:{n}"]})
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/pending/")
    page.fill("#searchbar", "tag:order:42")
    page.click("#changelist-search input[type=submit]")
    page.wait_for_url(re.compile(r"q=tag%3Aorder%3A42"))
    assert listed_ids(page) == sorted(order, reverse=True)
    assert "a search by tag lists" in (page.text_content(".qm-summary") or "")
    page.screenshot(path=str(screenshots / "admin-tag-search.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/queue_max_django/job/{order[1]}/")
    page.wait_for_selector("[data-testid=tags]")
    assert page.locator("[data-testid=tags] code").all_text_contents() == ["order:42", "tenant:acme"]
    page.screenshot(path=str(screenshots / "admin-job-tags.png"), full_page=True)
    page.click("[data-testid=tags] a:has-text('tenant:acme')")
    page.wait_for_selector("tr[data-job-id]")
    assert listed_ids(page) == [order[1]]
