"""The admin's layout, measured in Chromium: at phone width (420 px) the lists, the dashboard and a job's page
stay usable (the search box keeps its width, rows stay one or two lines high, every column can be scrolled to
inside the table's own box, the page never scrolls sideways), and at desktop width no two column headers run
into each other and every number sits under its own header."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from queue_max_django.conf import get_queue
from tests.browser.test_admin_browser import fill_store, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("store_settings"),
    pytest.mark.store_neutral,  # CSS and markup: the same on both stores
]

PHONE, DESKTOP = 420, 1280
GAP_PX = 8  # the least space between the texts of two neighbouring headers

# For each table matched: the text boxes of its header cells, and of every numeric cell with its column.
MEASURE_TABLES = """selector => [...document.querySelectorAll(selector)].map(table => {
    const textBox = cell => {
        const range = document.createRange();
        range.selectNodeContents(cell);
        const box = range.getBoundingClientRect();
        return {left: box.left, right: box.right, width: box.width};
    };
    const headRow = table.tHead.rows[table.tHead.rows.length - 1];
    const heads = [...headRow.cells].map(cell => ({
        text: cell.textContent.trim(), box: textBox(cell),
        cell: {left: cell.getBoundingClientRect().left, right: cell.getBoundingClientRect().right},
    }));
    const numbers = [...table.querySelectorAll('tbody td.qm-number')].map(cell => ({
        column: cell.cellIndex, text: cell.textContent.trim(), box: textBox(cell),
    }));
    return {caption: table.caption ? table.caption.textContent : table.id, heads, numbers};
})"""


def assert_headers_apart_and_numbers_under_them(tables: list[dict[str, Any]]) -> None:
    assert tables
    for table in tables:
        heads = [head for head in table["heads"] if head["box"]["width"] > 0]
        for left, right in itertools.pairwise(heads):
            gap = right["box"]["left"] - left["box"]["right"]
            assert gap >= GAP_PX, (table["caption"], left["text"], right["text"], gap)
        for number in table["numbers"]:
            head = table["heads"][number["column"]]
            # inside its own header's column, right-aligned like that header's text
            assert head["cell"]["left"] <= number["box"]["left"], (table["caption"], head["text"], number)
            assert number["box"]["right"] <= head["cell"]["right"], (table["caption"], head["text"], number)
            assert abs(number["box"]["right"] - head["box"]["right"]) <= 1, (table["caption"], head, number)


def page_scrolls_sideways(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_lists_and_dashboard_at_phone_and_desktop_width(
    page: Page, live_server: LiveServer, screenshots: Path
) -> None:
    jobs = fill_store(get_queue())
    log_in(page, live_server)
    base = f"{live_server.url}/admin/queue_max_django/job/"

    # Desktop: headers apart, numbers under their own header, in the lists and on the dashboard.
    page.goto(f"{base}failed/")
    assert_headers_apart_and_numbers_under_them(page.evaluate(MEASURE_TABLES, "#result_list"))
    page.goto(f"{base}pending/")
    assert_headers_apart_and_numbers_under_them(page.evaluate(MEASURE_TABLES, "#result_list"))
    page.goto(base)
    assert_headers_apart_and_numbers_under_them(page.evaluate(MEASURE_TABLES, "#qm-panels table"))

    # Phone: the dead letters stay usable.
    page.set_viewport_size({"width": PHONE, "height": 900})
    page.goto(f"{base}failed/")
    assert not page_scrolls_sideways(page)
    assert page.locator("#searchbar").bounding_box()["width"] >= 200  # type: ignore[index]
    heights = page.locator("#result_list tbody tr").evaluate_all(
        "rows => rows.map(row => row.getBoundingClientRect().height)"
    )
    assert len(heights) == 9 and max(heights) <= 60, heights  # one or two lines, not ~200 px
    # The last column is reached by scrolling the table's own box, and then it is on screen.
    page.locator("#changelist-form .results").evaluate("box => { box.scrollLeft = box.scrollWidth; }")
    last = page.locator("#result_list thead th").last.bounding_box()
    assert last is not None and last["x"] >= 0 and last["x"] + last["width"] <= PHONE, last
    assert not page_scrolls_sideways(page)
    page.locator("#changelist-form .results").evaluate("box => { box.scrollLeft = 0; }")
    page.screenshot(path=str(screenshots / "admin-dead-letters-phone.png"), full_page=True)

    # Phone: the dashboard's wide tables scroll in their own boxes too.
    page.goto(base)
    assert not page_scrolls_sideways(page)
    page.screenshot(path=str(screenshots / "admin-dashboard-phone.png"), full_page=True)

    # Phone: a job's page; its fields stack, long ids and values wrap.
    page.goto(f"{base}{jobs['fetches'][0]}/")
    assert not page_scrolls_sideways(page)
    page.screenshot(path=str(screenshots / "admin-job-phone.png"), full_page=True)
