"""The engine's modules import one another in one direction: no circle, not even through an import made only
for type checking (``if TYPE_CHECKING:``) or inside a function. A ``Record`` knows its owner only as the
``RecordOwner`` protocol, and flow control hands back what the store claimed, not records."""

from __future__ import annotations

import ast
from pathlib import Path

import queue_max_django.engine as engine

ENGINE = Path(engine.__file__).parent


def engine_imports() -> dict[str, set[str]]:
    """Each engine module -> the engine modules it imports anywhere in its source (relative imports)."""
    modules = {path.stem for path in ENGINE.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for module in modules:
        found: set[str] = set()
        for node in ast.walk(ast.parse((ENGINE / f"{module}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:  # from . import codec, keys
                    found.update(alias.name for alias in node.names)
        graph[module] = found & modules
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary circle, each once, starting at its smallest module name."""
    found: list[list[str]] = []

    def walk(start: str, path: list[str]) -> None:
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, [*path, nxt])

    for module in sorted(graph):
        walk(module, [module])
    return found


def test_the_finder_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_engine_has_no_import_circle() -> None:
    graph = engine_imports()
    assert {"queue", "record", "flow"} <= graph.keys()
    assert "queue" in graph["aio"]  # the graph is read, not empty
    assert circles(graph) == []


def test_record_and_flow_do_not_import_the_queue() -> None:
    graph = engine_imports()
    assert "queue" not in graph["record"]
    assert "record" not in graph["flow"] and "queue" not in graph["flow"]
