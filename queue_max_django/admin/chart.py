"""The dashboard's throughput chart, drawn on the server as inline SVG (no JavaScript): jobs done and
dead-lettered per minute over the last hour, and below them the lag (the age of the oldest waiting job),
from the points of ``engine/throughput.py``.

Pure: points in, markup and table rows out. Colours are CSS classes (``queue_max.css``) over the admin's
own variables, so the chart follows the light and dark themes. The SVG is one image for assistive technology
(``role="img"``, its ``<title>`` a summary); the numbers themselves are in the table the template puts
beside it (``rows``). A minute without a sample is a gap in its line, never a zero; a lone point between
two gaps is a dot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..engine.throughput import Point
from .display import duration

WIDTH = 640
LEFT, RIGHT = 52, 12  # room for the value labels on the left
JOBS_TOP, JOBS_BOTTOM = 24, 150
LAG_TOP, LAG_BOTTOM = 196, 252
HEIGHT = 276
NICE = (2, 4, 10)  # scales whose half is a whole number too


@dataclass(frozen=True)
class Row:
    """One minute of the chart, as the table beside it reads."""

    time: str
    done: str
    failed: str
    lag: str


@dataclass(frozen=True)
class Chart:
    svg: SafeString
    rows: list[Row]  # newest first
    summary: str
    has_data: bool


def utc_label(minute: int) -> str:
    return dt.datetime.fromtimestamp(minute * 60, tz=dt.UTC).strftime("%H:%M")


def nice_ceiling(value: float) -> int:
    """The smallest of 2, 4, 10 times a power of ten that is at least ``value`` (2 for nothing)."""
    scale = 1
    while True:
        for step in NICE:
            if step * scale >= value:
                return step * scale
        scale *= 10


LAG_STEPS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 4 * 3600, 12 * 3600, 86400)


def nice_seconds(value: float) -> float:
    """The smallest round length of time (seconds, minutes, hours, days) that is at least ``value``, and
    whose half is round too."""
    for step in LAG_STEPS:
        if step >= value:
            return step
    return 86400 * nice_ceiling(value / 86400)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def render(points: Sequence[Point], label: Callable[[int], str] = utc_label) -> Chart:
    """The chart of ``points`` (oldest first; ``label`` names a minute for people)."""
    done = [p.done for p in points]
    failed = [p.failed for p in points]
    lag = [p.lag for p in points]
    known = [v for v in done + failed if v is not None]
    lags = [v for v in lag if v is not None]
    has_data = bool(known or lags)
    jobs_max = nice_ceiling(max(known, default=0))
    lag_max = nice_seconds(max(lags, default=0))
    summary = _summary(points, label, has_data)
    count = len(points)

    def x(index: int) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (index / (count - 1) if count > 1 else 0.5)

    parts = [
        f'<svg class="qm-chart" role="img" aria-labelledby="qm-chart-title" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg" '
        'data-testid="throughput-chart">',
        f'<title id="qm-chart-title">{escape(summary)}</title>',
        _axis("Jobs per minute", jobs_max, JOBS_TOP, JOBS_BOTTOM, _number),
        _axis("Lag (oldest waiting job)", lag_max, LAG_TOP, LAG_BOTTOM, _short_duration),
        _legend(),
        _series("qm-chart-done", done, jobs_max, JOBS_TOP, JOBS_BOTTOM, x),
        _series("qm-chart-failed", failed, jobs_max, JOBS_TOP, JOBS_BOTTOM, x),
        _series("qm-chart-lag", lag, lag_max, LAG_TOP, LAG_BOTTOM, x),
    ]
    if count:
        for index in sorted({0, count // 2, count - 1}):
            anchor = "start" if index == 0 else "end" if index == count - 1 else "middle"
            parts.append(
                f'<text class="qm-chart-text" x="{x(index):.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">'
                f"{escape(label(points[index].minute))}</text>"
            )
    if not has_data:
        parts.append(
            f'<text class="qm-chart-text" x="{WIDTH / 2:.0f}" y="{(JOBS_TOP + JOBS_BOTTOM) / 2:.0f}" '
            f'text-anchor="middle">No samples yet: a running queue_worker takes one a minute</text>'
        )
    parts.append("</svg>")
    rows = [
        Row(label(p.minute), _cell(p.done), _cell(p.failed), "—" if p.lag is None else duration(p.lag))
        for p in reversed(points)
    ]
    return Chart(mark_safe("".join(parts)), rows, summary, has_data)  # every text in it is escaped


def _cell(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _short_duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{_number(seconds / 86400)} d"
    if seconds >= 3600:
        return f"{_number(seconds / 3600)} h"
    if seconds >= 60:
        return f"{_number(seconds / 60)} min"
    return f"{_number(seconds)} s"


def _summary(points: Sequence[Point], label: Callable[[int], str], has_data: bool) -> str:
    if not points or not has_data:
        return "Throughput chart: no samples in the last hour (a running queue_worker takes one a minute)."
    done = sum(p.done or 0 for p in points)
    failed = sum(p.failed or 0 for p in points)
    last_lag = next((p.lag for p in reversed(points) if p.lag is not None), None)
    lag_text = "unknown" if last_lag is None else duration(last_lag)
    return (
        f"Throughput from {label(points[0].minute)} to {label(points[-1].minute)}: {done:,} jobs done and "
        f"{failed:,} dead-lettered; busiest minute {max((p.done or 0) for p in points):,} done; "
        f"lag at the last sample {lag_text}."
    )


LEGEND = (("qm-chart-done", "done"), ("qm-chart-failed", "dead-lettered"), ("qm-chart-lag", "lag"))


def _legend() -> str:
    """Which line is which, by stroke as well as colour (the dead letters' line is dashed)."""
    parts = []
    left = WIDTH - RIGHT - 300
    for css, text in LEGEND:
        parts.append(f'<line class="{css}" x1="{left}" x2="{left + 22}" y1="8" y2="8"/>')
        parts.append(f'<text class="qm-chart-text" x="{left + 27}" y="12">{text}</text>')
        left += 34 + 7 * len(text)
    return f'<g class="qm-chart-legend">{"".join(parts)}</g>'


def _axis(title: str, top_value: float, top: int, bottom: int, fmt: Callable[[float], str]) -> str:
    middle = (top + bottom) / 2
    lines = [
        f'<text class="qm-chart-heading" x="{LEFT}" y="{top - 8}">{escape(title)}</text>',
        f'<line class="qm-chart-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{top}" y2="{top}"/>',
        f'<line class="qm-chart-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{middle}" y2="{middle}"/>',
        f'<line class="qm-chart-axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}"/>',
        f'<text class="qm-chart-text" x="{LEFT - 6}" y="{top + 4}" text-anchor="end">'
        f"{escape(fmt(top_value))}</text>",
        f'<text class="qm-chart-text" x="{LEFT - 6}" y="{middle + 4}" text-anchor="end">'
        f"{escape(fmt(top_value / 2))}</text>",
        f'<text class="qm-chart-text" x="{LEFT - 6}" y="{bottom + 4}" text-anchor="end">0</text>',
    ]
    return "".join(lines)


def _series(
    css: str,
    values: Sequence[float | None],
    top_value: float,
    top: int,
    bottom: int,
    x: Callable[[int], float],
) -> str:
    """One line, broken where a value is unknown; a run of one value is a dot."""

    def y(value: float) -> float:
        return bottom - (bottom - top) * min(value / top_value, 1.0)

    runs: list[list[tuple[float, float]]] = [[]]
    for index, value in enumerate(values):
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((x(index), y(value)))
    shapes = []
    for run in runs:
        if len(run) == 1:
            shapes.append(f'<circle class="{css}-dot" cx="{run[0][0]:.1f}" cy="{run[0][1]:.1f}" r="3"/>')
        elif run:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in run)
            shapes.append(f'<polyline class="{css}" points="{coords}"/>')
    return f'<g data-series="{css}">{"".join(shapes)}</g>'
