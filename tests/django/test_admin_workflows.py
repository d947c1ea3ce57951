"""The admin's workflow page: its nodes, states, edges and job links; the link from a job's page; the
filter by workflow on the job lists; and the cancel and retry-failed buttons behind the permissions."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from queue_max_django import Workflow, WorkflowResult, chain
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue
from queue_max_django.engine.workflows import NodeState
from tests.admin_clients import logged_in
from tests.django.test_workflows import drain
from tests.testapp import workflow_tasks as w

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    # each test runs in a transaction never committed (django_db): its workflows are stored at once
    with queue_max(ENQUEUE_ON_COMMIT=False):
        yield get_queue()


def diamond(switch: Path) -> WorkflowResult:
    wf = Workflow()
    wf.add("fetch", w.wf_add.s(1, 1))
    wf.add("left", w.wf_switch.s(str(switch)), after=["fetch"])
    wf.add("right", w.wf_add.s(20), after=["fetch"])
    wf.add("report", w.wf_join.s(), after=["left", "right"])
    return wf.delay()


def test_the_workflow_page_lists_nodes_states_edges_and_links_to_jobs(tmp_path: Path) -> None:
    result = diamond(tmp_path / "switch")
    client = logged_in("view_job", username="viewer")
    page = client.get(f"{BASE}workflow/{result.id}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "waiting on parents" in html and "fetch → left" in html and "left → report" in html
    assert '<svg class="qm-graph"' in html and 'data-edge="left→report"' in html  # drawn, too
    fetch_job = result.nodes[0].job_id
    assert f'href="{BASE}{fetch_job}/"' in html
    assert "Cancel workflow" not in html  # view only: no buttons
    job_page = client.get(f"{BASE}{fetch_job}/").content.decode()
    assert f'href="{BASE}workflow/{result.id}/"' in job_page
    assert client.get(f"{BASE}workflow/12345/").status_code == 404


def test_the_job_lists_filter_by_workflow(tmp_path: Path) -> None:
    result = chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
    other = chain(w.wf_add.s(3)).delay()
    drain()
    client = logged_in("view_job", username="viewer")
    html = client.get(f"{BASE}done/", {"workflow": result.id}).content.decode()
    for node in result.nodes:
        assert f'href="{BASE}{node.job_id}/"' in html
    assert f'href="{BASE}{other.nodes[0].job_id}/"' not in html


def test_cancel_and_retry_failed_need_the_change_permission(tmp_path: Path) -> None:
    switch = tmp_path / "switch"
    result = diamond(switch)
    viewer = logged_in("view_job", username="viewer")
    assert viewer.post(f"{BASE}workflow/{result.id}/cancel/").status_code == 403
    drain()
    assert result.status == "failed"
    editor = logged_in("view_job", "change_job", username="editor")
    assert "Retry failed" in editor.get(f"{BASE}workflow/{result.id}/").content.decode()
    assert editor.get(f"{BASE}workflow/{result.id}/retry_failed/").status_code == 405
    switch.touch()
    response = editor.post(f"{BASE}workflow/{result.id}/retry_failed/")
    assert response.status_code == 302
    assert result.nodes[1].state is NodeState.QUEUED and result.nodes[3].state is NodeState.WAITING
    drain()
    assert result.status == "succeeded"

    waiting = chain(w.wf_add.s(1), w.wf_add.s(2)).delay()
    assert editor.post(f"{BASE}workflow/{waiting.id}/cancel/").status_code == 302
    assert waiting.status == "cancelled"


def test_the_graph_is_drawn_in_columns_by_depth_and_not_at_all_when_too_wide() -> None:
    from queue_max_django.admin.workflow_graph import MAX_DRAWN, graph_svg, layers
    from queue_max_django.engine.workflows import NodeInfo

    def nodes(parents: list[tuple[int, ...]]) -> list[NodeInfo]:
        return [
            NodeInfo(at, f"n{at}<b>", NodeState.WAITING, None, of, False, None)
            for at, of in enumerate(parents)
        ]

    assert layers(nodes([(), (0,), (), (1, 2)])) == [0, 1, 0, 2]
    svg = graph_svg(nodes([(), (0,), (), (1, 2)]))
    assert svg is not None and svg.count("<path") == 3 and svg.count("<rect") == 4
    assert "<b>" not in svg and "n1&lt;b&gt;" in svg  # names are escaped
    assert graph_svg(nodes([()] * (MAX_DRAWN + 1))) is None
    assert graph_svg([]) is None
