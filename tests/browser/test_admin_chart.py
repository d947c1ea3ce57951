"""The dashboard's throughput chart in headless Chromium, in light and dark mode: the inline SVG is drawn (its
lines have a size on the page), is one image with a name for assistive technology, its lines take the
admin's own colours of each scheme (the browser's, or the admin's theme toggle), and the table of its
numbers is there beside it. Saves the dark dashboard's screenshot (docs/img/admin-dashboard-dark.png)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from queue_max_django.conf import get_queue
from tests.browser.samples import GAP, fill_samples
from tests.browser.test_admin_browser import fill_store, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]

TITLE = re.compile(r"^Throughput from \d\d:\d\d to \d\d:\d\d: [\d,]+ jobs done and \d+ dead-lettered")
COLOURS_JS = """() => {
    const probe = document.createElement('div');
    document.body.append(probe);
    const colour = (value) => { probe.style.color = value; return getComputedStyle(probe).color; };
    const stroke = (selector) => getComputedStyle(document.querySelector(selector)).stroke;
    const result = {
        done: stroke('svg.qm-chart polyline.qm-chart-done'),
        failed: stroke('svg.qm-chart polyline.qm-chart-failed'),
        lag: stroke('svg.qm-chart polyline.qm-chart-lag'),
        link: colour('var(--link-fg)'),
        error: colour('var(--error-fg)'),
        text: colour('var(--body-fg)'),
        body: getComputedStyle(document.body).backgroundColor,
    };
    probe.remove();
    return result;
}"""


@pytest.mark.store_neutral  # the page's drawing; the data on both stores: tests/django/test_admin_chart.py
def test_the_chart_renders_in_light_and_dark_mode(
    page: Page, live_server: LiveServer, screenshots: Path
) -> None:
    store = get_queue()
    fill_store(store)
    log_in(page, live_server)
    colours = {}
    schemes: tuple[Literal["light"], Literal["dark"]] = ("light", "dark")
    for scheme in schemes:
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{live_server.url}/admin/queue_max_django/job/")
        chart = page.get_by_role("img", name=TITLE)
        assert chart.count() == 1
        box = chart.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 150
        lines = page.locator("svg.qm-chart polyline.qm-chart-done")
        assert lines.count() == 2  # broken once, where no worker ran
        line_box = lines.first.bounding_box()
        assert line_box is not None and line_box["width"] > 100 and line_box["height"] > 10
        colours[scheme] = page.evaluate(COLOURS_JS)
        table = page.locator("[data-testid=throughput-table]")
        assert table.locator("caption").text_content() == "Per minute, newest first"
        assert table.locator("tbody tr").count() == 60
        gaps = table.locator("tbody tr td:first-of-type", has_text="—").count()
        assert gaps - len(GAP) in (1, 2)  # and the minute after; 2: a new minute began since the samples
    for scheme in schemes:
        seen = colours[scheme]
        assert (seen["done"], seen["failed"], seen["lag"]) == (seen["link"], seen["error"], seen["text"])
    assert colours["light"]["body"] != colours["dark"]["body"]
    assert colours["light"]["done"] != colours["dark"]["done"]  # the line follows the theme
    page.screenshot(path=str(screenshots / "admin-dashboard-dark.png"), full_page=True)

    # The admin's own theme toggle (data-theme on <html>) wins over the browser's scheme, the chart's too.
    page.emulate_media(color_scheme="light")
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    toggled = page.evaluate(COLOURS_JS)
    assert (toggled["done"], toggled["body"]) == (colours["dark"]["done"], colours["dark"]["body"])


@pytest.mark.store_neutral
def test_the_refresh_redraws_the_chart(page: Page, live_server: LiveServer) -> None:
    store = get_queue()
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/")
    assert "No samples yet" in (page.text_content("svg.qm-chart") or "")
    fill_samples(store)
    page.click("[data-refresh-now]")
    page.wait_for_selector("svg.qm-chart polyline.qm-chart-done")
    assert "No samples yet" not in (page.text_content("svg.qm-chart") or "")
