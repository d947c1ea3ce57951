"""The admin's workflow page in headless Chromium: a diamond whose one branch failed, drawn (an SVG box per
node, a line per edge) and listed ("After" per node); retry-failed from the page brings back the failed node
and the one cancelled because of it, and a drain then ends the workflow. Saves docs/img/admin-workflow.png
(with ``QUEUE_MAX_SCREENSHOTS``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from queue_max_django import Workflow
from tests.browser.test_admin_browser import log_in
from tests.django.test_workflows import drain
from tests.testapp import workflow_tasks as w

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]


def test_the_workflow_page_draws_and_lists_its_edges_and_retries_what_failed(
    page: Page, live_server: LiveServer, screenshots: Path, tmp_path: Path
) -> None:
    switch = tmp_path / "switch"
    flow = Workflow()
    flow.add("fetch", w.wf_add.s(1, 1))
    flow.add("left", w.wf_switch.s(str(switch)), after=["fetch"])
    flow.add("right", w.wf_add.s(20), after=["fetch"])
    flow.add("report", w.wf_join.s(), after=["left", "right"])
    result = flow.delay()
    drain()
    assert result.status == "failed"
    log_in(page, live_server)

    page.goto(f"{live_server.url}/admin/queue_max_django/job/workflow/{result.id}/")
    page.wait_for_selector("[data-testid=workflow-graph]")
    graph = page.locator("[data-testid=workflow-graph]")
    assert graph.locator("g.qm-graph-node").count() == 4
    edges = graph.locator("path.qm-graph-edge").evaluate_all("paths => paths.map(p => p.dataset.edge)")
    assert sorted(edges) == ["fetch→left", "fetch→right", "left→report", "right→report"]
    states = graph.locator("g.qm-graph-node").evaluate_all(
        "nodes => Object.fromEntries(nodes.map(n => [n.dataset.node, n.getAttribute('class')]))"
    )
    assert "qm-node-failed" in states["left"] and "qm-node-cancelled" in states["report"]
    # Each node's parents, listed in the table: the edges as text.
    assert page.text_content("tr[data-node=report] td:nth-child(5)") == "left, right"
    assert page.text_content("tr[data-node=fetch] td:nth-child(5)") == "—"
    # The boxes are laid out in columns by depth: fetch, then left and right, then report.
    xs = {
        name: graph.locator(f"g[data-node={name}] rect").get_attribute("x")
        for name in ("fetch", "left", "right", "report")
    }
    assert xs["left"] == xs["right"] and len({xs["fetch"], xs["left"], xs["report"]}) == 3
    page.screenshot(path=str(screenshots / "admin-workflow.png"), full_page=True)

    switch.touch()
    page.click("input[type=submit][value='Retry failed']")
    page.wait_for_selector("ul.messagelist")
    assert "2 node(s) start again" in (page.text_content("ul.messagelist") or "")
    assert "waiting on parents" in (page.text_content("tr[data-node=report]") or "")
    drain()
    page.reload()
    assert page.text_content("[data-testid=workflow-status]") == "succeeded"
    assert result.results["report"] == {"left": 2, "right": 22}
