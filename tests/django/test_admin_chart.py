"""The dashboard's throughput chart: the pure SVG of admin/chart.py (gaps, no data, one sample, a counter that
fell, escaping, the scale), and the dashboard page that draws it with its table of numbers (test client)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from xml.etree import ElementTree

import pytest
from django.test import Client, override_settings

from queue_max_django.admin import chart
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue
from queue_max_django.engine.stores.types import Sample
from queue_max_django.engine.throughput import KEEP, Point, minute_of, per_minute

SVG = "{http://www.w3.org/2000/svg}"
START = 28_333_334  # a unix minute


def parse(markup: str) -> ElementTree.Element:
    return ElementTree.fromstring(markup)  # well-formed XML, or this raises


def series(svg: ElementTree.Element, name: str) -> tuple[list[list[tuple[float, float]]], int]:
    """(the polylines' points, the number of dots) of one series."""
    group = next(g for g in svg.iter(f"{SVG}g") if g.get("data-series") == name)
    lines = [
        [tuple(float(v) for v in pair.split(",")) for pair in line.get("points", "").split()]
        for line in group.iter(f"{SVG}polyline")
    ]
    return lines, len(list(group.iter(f"{SVG}circle")))  # type: ignore[return-value]


def points(*done: int | None, failed: int | None = 0, lag: float | None = 1.0) -> list[Point]:
    return [Point(START + i, d, *((None, None) if d is None else (failed, lag))) for i, d in enumerate(done)]


def test_the_chart_is_an_image_with_a_title_and_lines_broken_at_gaps() -> None:
    drawn = chart.render(points(3, 5, None, 2, 4, 6, None, 7))
    svg = parse(drawn.svg)
    assert svg.get("role") == "img" and svg.get("aria-labelledby") == "qm-chart-title"
    title = svg.find(f"{SVG}title")
    assert title is not None and title.get("id") == "qm-chart-title"
    assert title.text == drawn.summary
    assert "27 jobs done and 0 dead-lettered" in drawn.summary and "busiest minute 7 done" in drawn.summary
    lines, dots = series(svg, "qm-chart-done")
    assert [len(line) for line in lines] == [2, 3] and dots == 1  # the last run is one minute: a dot
    assert lines[0][0][0] < lines[0][1][0] < lines[1][0][0]  # left to right in time
    done_y = {y for line in lines for _, y in line}
    height = chart.JOBS_BOTTOM - chart.JOBS_TOP
    assert min(done_y) == pytest.approx(chart.JOBS_TOP + height * (1 - 6 / 10))  # 6 on a scale of 0..10
    dot = next(c for c in svg.iter(f"{SVG}circle") if c.get("class") == "qm-chart-done-dot")
    assert float(dot.get("cy", "")) == pytest.approx(chart.JOBS_TOP + height * (1 - 7 / 10), abs=0.05)
    assert [row.done for row in drawn.rows] == ["7", "—", "6", "4", "2", "—", "5", "3"]  # newest first
    assert drawn.has_data


def test_no_data_draws_axes_and_says_so() -> None:
    drawn = chart.render(per_minute([], end=START, minutes=60))
    svg = parse(drawn.svg)
    assert not drawn.has_data
    assert "No samples yet" in "".join(svg.itertext())
    for name in ("qm-chart-done", "qm-chart-failed", "qm-chart-lag"):
        assert series(svg, name) == ([], 0)
    assert len(drawn.rows) == 60 and {row.done for row in drawn.rows} == {"—"}
    assert "no samples" in drawn.summary
    assert not chart.render([]).has_data  # nothing at all still renders


def test_one_sample_is_a_lag_dot_and_no_jobs_line() -> None:
    drawn = chart.render(per_minute([Sample(START, 10, 2, 42.0)], end=START, minutes=60))
    svg = parse(drawn.svg)
    assert series(svg, "qm-chart-done") == ([], 0)  # no minute before it: no difference
    assert series(svg, "qm-chart-lag")[1] == 1
    assert drawn.rows[0].lag == "42 s" and drawn.rows[0].done == "—"
    assert "lag at the last sample 42 s" in drawn.summary


def test_a_total_that_fell_is_a_gap_not_a_negative_count() -> None:
    samples = [Sample(START, 100, 5, 0.0), Sample(START + 1, 90, 1, 0.0), Sample(START + 2, 95, 1, 0.0)]
    drawn = chart.render(per_minute(samples, end=START + 2, minutes=3))
    assert [row.done for row in drawn.rows] == ["5", "—", "—"]
    assert [row.failed for row in drawn.rows] == ["0", "—", "—"]
    svg = parse(drawn.svg)
    assert all(
        chart.JOBS_TOP <= y <= chart.JOBS_BOTTOM for line in series(svg, "qm-chart-done")[0] for _, y in line
    )


def test_labels_are_escaped_and_scales_are_round() -> None:
    drawn = chart.render(points(1, 2), label=lambda minute: "<b>&")
    assert "<b>" not in drawn.svg and "&lt;b&gt;&amp;" in drawn.svg
    parse(drawn.svg)
    assert [chart.nice_ceiling(v) for v in (0, 1, 3, 7, 11, 24, 26, 999, 1001)] == [
        2, 2, 4, 10, 20, 40, 40, 1000, 2000]  # fmt: skip
    assert [chart.nice_seconds(v) for v in (0, 0.4, 42, 90, 61 * 60, 30 * 3600, 9 * 86400)] == [
        1, 1, 60, 120, 7200, 2 * 86400, 10 * 86400]  # fmt: skip
    svg = parse(chart.render([Point(START, None, None, 90.0)]).svg)
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert "2 min" in labels and "1 min" in labels  # the lag axis: 0, 1 min, 2 min


# ---------------------------------------------------------------------------- the dashboard page

Configure = Callable[..., override_settings]


@pytest.fixture
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max():
        yield get_queue()


@pytest.mark.django_db
def test_the_dashboard_draws_the_chart_and_its_table(admin_client: Client, store: Queue) -> None:
    end = minute_of(store.now())
    live = store._live()
    for offset, (done, failed, lag) in enumerate([(100, 3, 0.0), (1_334, 5, 75.0), (1_340, 5, 3.0)]):
        assert live.save_sample(Sample(end - 2 + offset, done, failed, lag), KEEP)
    html = admin_client.get("/admin/queue_max_django/job/").content.decode()
    assert '<svg class="qm-chart" role="img"' in html
    svg = parse(re.search(r"<svg class=\"qm-chart\".*?</svg>", html, re.S).group(0))  # type: ignore[union-attr]
    assert len(series(svg, "qm-chart-done")[0][0]) == 2
    table = re.search(r'<table data-testid="throughput-table">.*?</table>', html, re.S).group(0)  # type: ignore[union-attr]
    assert "<caption>Per minute, newest first</caption>" in table
    cells = [re.findall(r'<td class="qm-number">([^<]*)</td>', row) for row in table.split("<tr>")]
    assert ["1,234", "2", "1 min 15 s"] in cells
    assert ["6", "0", "3.0 s"] in cells
    assert table.count("<tr>") == 61  # the header and 60 minutes

    panels = admin_client.get("/admin/queue_max_django/job/panels/").content.decode()
    assert 'data-testid="throughput-chart"' in panels  # the refresh redraws it


@pytest.mark.django_db
@pytest.mark.parametrize("store_kind", ["postgres"])  # the LMDB store makes its samples database on opening
def test_a_store_without_its_samples_table_draws_no_samples(admin_client: Client, store: Queue) -> None:
    """A PostgreSQL database not migrated since the samples came: the dashboard still renders."""
    assert store._live().kind == "postgresql"
    with store._live().db.transaction() as conn:
        conn.execute("DROP TABLE qm_samples")
    html = admin_client.get("/admin/queue_max_django/job/").content.decode()
    assert "No samples yet" in html and "Per minute, newest first" in html
