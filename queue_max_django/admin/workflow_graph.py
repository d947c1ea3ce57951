"""The workflow page's drawing of a graph, on the server as inline SVG (no JavaScript): each node a box in
the column of its depth (the longest path from a node without parents), each edge a line from a parent's
right side to a child's left side. Colours are CSS classes over the admin's variables (``queue_max.css``),
so it follows the light and dark themes; the same edges are listed in text beside it (the node table's
"After" column), which is what assistive technology reads.

Pure: the nodes in, markup out. A workflow of more than ``MAX_DRAWN`` nodes is not drawn (``None``): its
list stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..engine.workflows import NodeInfo

MAX_DRAWN = 200
BOX_W, BOX_H = 132, 26
GAP_X, GAP_Y = 48, 10
PAD = 8
NAME_CHARS = 18  # a longer name is cut, with an ellipsis (its full name is the box's tooltip)


def layers(nodes: Sequence[NodeInfo]) -> list[int]:
    """Each node's depth: 0 without parents, else one more than its deepest parent (a workflow's nodes come
    parents first, as the store keeps them)."""
    depth: list[int] = []
    for node in nodes:
        depth.append(1 + max((depth[parent] for parent in node.parents), default=-1))
    return depth


def graph_svg(nodes: Sequence[NodeInfo]) -> SafeString | None:
    """The graph as an ``<svg>`` element, or None for no node or more than ``MAX_DRAWN``."""
    if not nodes or len(nodes) > MAX_DRAWN:
        return None
    depth = layers(nodes)
    row_of: list[int] = []
    filled: dict[int, int] = {}
    for level in depth:
        row_of.append(filled.get(level, 0))
        filled[level] = row_of[-1] + 1
    width = PAD * 2 + (max(depth) + 1) * BOX_W + max(depth) * GAP_X
    height = PAD * 2 + max(filled.values()) * (BOX_H + GAP_Y) - GAP_Y

    def x(at: int) -> int:
        return PAD + depth[at] * (BOX_W + GAP_X)

    def y(at: int) -> int:
        return PAD + row_of[at] * (BOX_H + GAP_Y)

    parts = [
        f'<svg class="qm-graph" data-testid="workflow-graph" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{len(nodes)} nodes in {max(depth) + 1} layers; the edges are listed in the table</title>",
    ]
    for at, node in enumerate(nodes):
        for parent in node.parents:
            x1, y1 = x(parent) + BOX_W, y(parent) + BOX_H // 2
            x2, y2 = x(at), y(at) + BOX_H // 2
            bend = (x1 + x2) // 2
            parts.append(
                f'<path class="qm-graph-edge" data-edge="{escape(nodes[parent].name)}→{escape(node.name)}" '
                f'd="M{x1},{y1} C{bend},{y1} {bend},{y2} {x2},{y2}"/>'
            )
    for at, node in enumerate(nodes):
        name = node.name if len(node.name) <= NAME_CHARS else node.name[: NAME_CHARS - 1] + "…"
        parts.append(
            f'<g class="qm-graph-node qm-node-{node.state.value}" data-node="{escape(node.name)}">'
            f"<title>{escape(node.name)}: {node.state.value}</title>"
            f'<rect x="{x(at)}" y="{y(at)}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{x(at) + 8}" y="{y(at) + BOX_H // 2 + 4}">{escape(name)}</text></g>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every value interpolated is escaped, or a number
