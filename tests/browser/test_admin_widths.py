"""What a phone (420 px) and a laptop (1280 px, Django's sidebar open) show first, measured in Chromium: the
throughput chart opens at its newest minute, also after a refresh, and the dead letters' error column is
on screen, readable and given room at 1280 px (at 420 px it is reached by scrolling the table's own box and
then fits the screen), and a running job's page refreshes itself until the job finishes. Saves the phone's
chart (docs/img/admin-chart-phone.png) and a running job's page (docs/img/admin-job-running.png)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from queue_max_django.conf import get_queue
from tests.browser.test_admin_browser import dead_letter, fill_store, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]
NEUTRAL = pytest.mark.store_neutral  # CSS and markup: the same on both stores (the data: tests/django/)

PHONE, DESKTOP = 420, 1280
BASE = "/admin/queue_max_django/job/"
LONG_ERROR = (
    "POST https://payments.example.test/v2/charges answered 503 Service Unavailable after 3 tries: upstream "
    "connect error or disconnect/reset before headers, reset reason: connection termination"
)

# Where the chart's newest end is: the right edge of the SVG and of its scroll box, on the page.
CHART_JS = """() => {
    const figure = document.querySelector('.qm-chart-figure');
    const svg = figure.querySelector('svg.qm-chart');
    const box = figure.getBoundingClientRect(), drawn = svg.getBoundingClientRect();
    return {boxLeft: box.left, boxRight: box.right, svgLeft: drawn.left, svgRight: drawn.right,
            scrolls: figure.scrollWidth > figure.clientWidth, viewport: window.innerWidth};
}"""

# The dead letters' error cells against the box the table scrolls in, and the lines each cell shows.
ERROR_JS = """() => {
    const results = document.querySelector('#changelist-form .results');
    const box = results.getBoundingClientRect();
    const cells = [...document.querySelectorAll('#result_list td.qm-error')].map(cell => {
        const rect = cell.getBoundingClientRect();
        const text = cell.querySelector('.qm-clamp');
        const lineHeight = parseFloat(getComputedStyle(text).lineHeight);
        return {left: rect.left, right: rect.right, width: rect.width, title: cell.title,
                lines: Math.round(text.getBoundingClientRect().height / lineHeight),
                clipped: text.scrollHeight > text.clientHeight + 1};
    });
    const header = [...document.querySelectorAll('#result_list thead th')].find(
        th => th.textContent.trim() === 'Error').getBoundingClientRect();
    return {boxLeft: box.left, boxRight: box.right, scrolls: results.scrollWidth > results.clientWidth,
            header: {left: header.left, right: header.right}, cells, viewport: window.innerWidth,
            pageScrolls: document.documentElement.scrollWidth > window.innerWidth};
}"""


def assert_newest_end_on_screen(chart: dict[str, Any]) -> None:
    """The SVG's right end (the current minute) is inside its box and on screen."""
    assert chart["svgRight"] <= chart["boxRight"] + 1, chart
    assert chart["boxRight"] <= chart["viewport"], chart


@NEUTRAL
@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_the_chart_opens_at_its_newest_minute(
    page: Page, live_server: LiveServer, screenshots: Path, width: int
) -> None:
    fill_store(get_queue())
    log_in(page, live_server)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}{BASE}")
    chart = page.evaluate(CHART_JS)
    assert_newest_end_on_screen(chart)
    if width == PHONE:
        assert chart["scrolls"]  # a readable size, scrolled back for older minutes...
        assert chart["svgLeft"] < chart["boxLeft"] - 100, chart  # ...the oldest ones off to the left
        page.locator(".qm-chart-figure").screenshot(path=str(screenshots / "admin-chart-phone.png"))
    else:
        assert not chart["scrolls"] and chart["svgLeft"] >= chart["boxLeft"] - 1, chart  # all of it
    # A refresh swaps a new chart in: it opens at its newest end too.
    page.click("[data-refresh-now]")
    page.wait_for_function(
        "document.querySelector('[data-refresh-status]').textContent.startsWith('Updated')"
    )
    assert_newest_end_on_screen(page.evaluate(CHART_JS))


class UpstreamDown(Exception):
    """An error type outside the builtins: listed by its class name, its dotted path on hover."""


@NEUTRAL
@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_the_dead_letters_error_column_is_readable(page: Page, live_server: LiveServer, width: int) -> None:
    store = get_queue()
    fill_store(store)
    dead_letter(store, "shop.payments.tasks.charge_card", [1], RuntimeError(LONG_ERROR), "payments")
    dead_letter(store, "shop.tasks.fetch_prices", [2], UpstreamDown("upstream said 503"))
    log_in(page, live_server)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}{BASE}failed/")
    assert page.locator("#nav-sidebar").is_visible() == (width == DESKTOP)  # Django's sidebar is open
    seen = page.evaluate(ERROR_JS)
    assert not seen["pageScrolls"]
    assert {cell["title"] for cell in seen["cells"]} >= {LONG_ERROR, "upstream said 503"}
    for cell in seen["cells"]:
        assert cell["lines"] <= (3 if width == DESKTOP else 2), cell  # rows stay short
    if width == DESKTOP:
        # on screen without scrolling: the whole column inside the table's box, with room to read
        assert not seen["scrolls"], seen
        header = seen["header"]
        assert seen["boxLeft"] <= header["left"] and header["right"] <= seen["boxRight"] + 1, seen
        for cell in seen["cells"]:
            assert cell["width"] >= 150, cell
            assert seen["boxLeft"] <= cell["left"] and cell["right"] <= seen["boxRight"] + 1, cell
        long_cell = next(cell for cell in seen["cells"] if cell["title"] == LONG_ERROR)
        assert long_cell["lines"] >= 2  # it wraps rather than running off the table
        short_cell = next(cell for cell in seen["cells"] if cell["title"] == "upstream said 503")
        assert short_cell["lines"] == 1 and not short_cell["clipped"]
        assert page.locator("#changelist-filter").is_visible()  # the filters are still there
    else:
        # scrolled to in the table's own box, the column fits the screen
        page.locator("#result_list td.qm-error").first.scroll_into_view_if_needed()
        cell = page.locator("#result_list td.qm-error").first.bounding_box()
        assert cell is not None and cell["x"] >= 0 and cell["x"] + cell["width"] <= PHONE, cell
        assert cell["width"] >= 180, cell
        assert not page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        page.locator("#changelist-form .results").evaluate("box => { box.scrollLeft = 0; }")
    # the class name in the list, its dotted path on hover
    upstream = page.locator("#result_list td.qm-error-type span", has_text="UpstreamDown")
    assert upstream.get_attribute("title") == f"{__name__}.UpstreamDown"


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_a_running_jobs_page_refreshes_itself_until_the_job_finishes(
    page: Page, live_server: LiveServer, screenshots: Path, width: int
) -> None:
    """On both stores (the page reads the job each time): the page's own timer (Playwright's clock, so no
    test waits 5 s) fetches the job again and shows its progress, then its result, and stops."""
    store = get_queue()
    job_id = store.put({"args": [7], "kwargs": {}}, name="shop.tasks.import_rows")
    record = store.get(0)
    log_in(page, live_server)
    page.set_viewport_size({"width": width, "height": 900})
    page.clock.install()
    fetches: list[str] = []
    page.on("request", lambda request: fetches.append(request.url) if "panel=1" in request.url else None)
    page.goto(f"{live_server.url}{BASE}{job_id}/")
    auto = page.locator("[data-refresh-auto]")
    assert auto.is_checked() and page.text_content("[data-testid=state]") == "running"
    assert not page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
    page.evaluate("window.__same_page = true")

    record.save_metadata({"progress": "40 of 100 rows"})
    page.clock.run_for(5_000)  # one tick of the page's timer
    page.wait_for_selector("[data-testid=metadata]:has-text('40 of 100 rows')")
    assert "Updated at" in (page.text_content("[data-refresh-status]") or "")
    if width == DESKTOP:
        page.screenshot(path=str(screenshots / "admin-job-running.png"))

    record.ack({"rows": 100})
    page.clock.run_for(5_000)
    page.wait_for_selector("[data-testid=state]:text-is('done')")
    assert (page.text_content("[data-testid=result]") or "").split() == ["{", '"rows":', "100", "}"]
    assert page.text_content("[data-refresh-status]") == "The job has finished: refreshing stopped."
    assert not auto.is_checked() and auto.is_disabled()
    assert page.evaluate("window.__same_page") is True  # swapped in, not reloaded
    count = len(fetches)
    assert count == 2, fetches
    page.clock.run_for(30_000)  # stopped: no more fetches
    assert len(fetches) == count
