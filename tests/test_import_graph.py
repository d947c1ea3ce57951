"""The package's import graph, read from the source with ``ast``: which module imports which, and where.

Every import counts: at the top of a module, inside a function (a lazy import is still a dependency, only a
later one), under ``if TYPE_CHECKING:`` (a type is a dependency too), and ``importlib.import_module`` of a
constant name. Relative imports are resolved against the importing module's package. Rules:

- the Django layer (every module of ``queue_max_django`` outside ``engine/``) has no import circle;
- the engine imports nothing outside itself but the standard library, lmdb, msgpack, psycopg and
  cryptography: never Django, never the Django layer;
- the engine has no import circle either;
- only the LMDB store (``engine/stores/lmdb/``) imports lmdb, and no more of the engine reaches into it
  than does now; a shard's upkeep and reads import neither each other nor ``shard.py``;
- the Django layer keeps the layout of docs/architecture.md: the top level holds only the public API and
  Django's entry points; the configuration (``conf/``) imports nothing of running a job, the worker, the
  admin or the commands; running a job (``running/``) imports no worker, admin or command; and a store
  kind's modules (``conf/storekinds/<kind>``) are reached only through the registry ``STORE_KINDS``.

Nothing here imports the modules it reads, so a circle is reported as a path of edges (file:line), not as
the ImportError that import order may or may not raise.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "queue_max_django"
ENGINE = f"{PACKAGE}.engine"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE
# psycopg: the PostgreSQL store; cryptography: engine/sealing.py, only when a key is used ([encryption])
ENGINE_THIRD_PARTY = frozenset({"lmdb", "msgpack", "psycopg", "cryptography"})


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` of its file."""

    source: str
    target: str
    file: str  # the source's file, relative to the package's parent
    line: int
    lazy: bool  # inside a function
    type_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        where = ", ".join(
            label for label, flag in (("in a function", self.lazy), ("type-only", self.type_only)) if flag
        )
        return f"{self.source} -> {self.target} ({self.file}:{self.line}{f', {where}' if where else ''})"


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The absolute names a module's imports name, each with its line and whether it is lazy or type-only.
    ``from x import y`` yields both ``x.y`` (in case y is a module) and ``x``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[list[str], int, bool, bool]] = []
        self._depth = 0
        self._type_only = 0

    def _add(self, names: list[str], node: ast.AST) -> None:
        self.found.append((names, getattr(node, "lineno", 0), self._depth > 0, self._type_only > 0))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._type_only += 1
        for child in node.body:
            self.visit(child)
        self._type_only -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add([alias.name], node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        self._add([f"{stem}.{alias.name}" for alias in node.names] + [stem], node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and not first.value.startswith(".")
            ):
                self._add([first.value], node)
        self.generic_visit(node)


@dataclass(frozen=True)
class Graph:
    modules: frozenset[str]
    edges: tuple[Edge, ...]  # between modules of the package
    external: tuple[Edge, ...]  # to anything else; ``target`` is the top-level name

    def among(self, modules: Iterable[str]) -> dict[str, list[Edge]]:
        """The edges between ``modules``, by source."""
        chosen = set(modules)
        out: dict[str, list[Edge]] = {name: [] for name in sorted(chosen)}
        for edge in self.edges:
            if edge.source in chosen and edge.target in chosen and edge.target != edge.source:
                out[edge.source].append(edge)
        return out


def build_graph(root: Path = PACKAGE_DIR, package: str = PACKAGE) -> Graph:
    modules = module_names(root, package)
    edges: list[Edge] = []
    external: list[Edge] = []
    for module, path in modules.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        file = path.relative_to(root.parent).as_posix()
        for names, line, lazy, type_only in visitor.found:
            # ``from x import a, b``: an edge to each of a and b that is a module, else to x
            targets = [name for name in names[:-1] if name in modules] or [
                n for n in names[-1:] if n in modules
            ]
            if targets:
                edges += [Edge(module, target, file, line, lazy, type_only) for target in targets]
            elif not names[-1].startswith(f"{package}.") and names[-1] != package:
                external.append(Edge(module, names[-1].partition(".")[0], file, line, lazy, type_only))
            else:  # a name in the package that is no module of it: the source tree has changed under us
                raise AssertionError(f"{module} ({path}:{line}) imports {names[-1]}, which is not a module")
    return Graph(frozenset(modules), tuple(edges), tuple(external))


def find_cycle(graph: Mapping[str, list[Edge]]) -> list[Edge] | None:
    """One import circle of ``graph`` as its edges in order (the last one leads back to the first's
    source), or None when it has none. Depth first, in name order: the same graph gives the same circle."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[Edge] = []

    def visit(node: str) -> list[Edge] | None:
        state[node] = 1
        for edge in sorted(graph.get(node, []), key=lambda e: (e.target, e.line)):
            if state.get(edge.target) == 1:
                start = next((i for i, e in enumerate(path) if e.source == edge.target), len(path))
                return [*path[start:], edge]
            if edge.target not in state:
                path.append(edge)
                found = visit(edge.target)
                if found is not None:
                    return found
                path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def strongly_connected(graph: Mapping[str, list[Edge]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (each group of two or more holds an
    import circle), in name order (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for edge in graph.get(node, []):
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(group for group in groups if len(group) > 1)


def circles_report(layer: str, graph: Mapping[str, list[Edge]]) -> str:
    """Each group of modules that import each other, with one circle in it as file:line edges; "" if none."""
    lines = []
    for group in strongly_connected(graph):
        members = set(group)
        cycle = find_cycle({name: [e for e in graph[name] if e.target in members] for name in group})
        assert cycle is not None
        names = " -> ".join([edge.source for edge in cycle] + [cycle[0].source])
        lines.append(f"{len(group)} modules of the {layer} import each other: {', '.join(group)}")
        lines.append(f"  one circle: {names}")
        lines += [f"    {edge}" for edge in cycle]
        lines.append("  every import among them:")
        lines += [f"    {edge}" for name in group for edge in graph[name] if edge.target in members]
    return "\n".join(lines)


def is_engine(module: str) -> bool:
    return module == ENGINE or module.startswith(f"{ENGINE}.")


GRAPH = build_graph()
DJANGO_LAYER = sorted(name for name in GRAPH.modules if not is_engine(name))
ENGINE_MODULES = sorted(name for name in GRAPH.modules if is_engine(name))


# ---------------------------------------------------------------------------------------------- the reader


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Top-level, relative at any depth, in a function, type-only, absolute, and import_module: all read."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__", "a", "b", "c", "d", "sub/__init__", "sub/e", "sub/f"):
        (root / f"{name}.py").write_text("")
    (root / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .b import x\nimport json\n"
        "if TYPE_CHECKING:\n    from .c import Y\nelse:\n    import pkg.d\n"
        "def f():\n    from .sub import e\n    import importlib\n    importlib.import_module('pkg.sub.f')\n"
    )
    (root / "sub" / "e.py").write_text("from .. import a\nfrom ..sub.f import z\nfrom . import f\n")
    graph = build_graph(root, "pkg")
    assert {(e.source, e.target, e.line, e.lazy, e.type_only) for e in graph.edges} == {
        ("pkg.a", "pkg.b", 2, False, False),
        ("pkg.a", "pkg.c", 5, False, True),
        ("pkg.a", "pkg.d", 7, False, False),
        ("pkg.a", "pkg.sub.e", 9, True, False),
        ("pkg.a", "pkg.sub.f", 11, True, False),
        ("pkg.sub.e", "pkg.a", 1, False, False),
        ("pkg.sub.e", "pkg.sub.f", 2, False, False),
        ("pkg.sub.e", "pkg.sub.f", 3, False, False),
    }
    assert {(e.source, e.target) for e in graph.external} == {
        ("pkg.a", "typing"),
        ("pkg.a", "json"),
        ("pkg.a", "importlib"),
    }
    cycle = find_cycle(graph.among(graph.modules))
    assert cycle is not None
    assert [(e.source, e.target) for e in cycle] == [("pkg.a", "pkg.sub.e"), ("pkg.sub.e", "pkg.a")]
    assert strongly_connected(graph.among(graph.modules)) == [["pkg.a", "pkg.sub.e"]]
    assert "pkg.a -> pkg.sub.e -> pkg.a" in circles_report("package", graph.among(graph.modules))
    assert find_cycle(graph.among(graph.modules - {"pkg.sub.e"})) is None
    assert circles_report("package", graph.among(graph.modules - {"pkg.sub.e"})) == ""


def test_the_reader_sees_every_module_a_from_import_names(tmp_path: Path) -> None:
    """``from . import a, b`` is an edge to a and to b; ``from .a import x, y`` one edge, to a."""
    root = tmp_path / "pkg"
    root.mkdir()
    for name in ("__init__", "a", "b"):
        (root / f"{name}.py").write_text("")
    (root / "c.py").write_text("from . import a, b\nfrom .a import x, y\n")
    graph = build_graph(root, "pkg")
    assert sorted((e.target, e.line) for e in graph.edges) == [("pkg.a", 1), ("pkg.a", 2), ("pkg.b", 1)]


def test_the_graph_holds_the_imports_known_to_exist() -> None:
    """A reader that saw nothing would find no circle: check that it sees edges the code is known to have."""
    pairs = {(edge.source, edge.target) for edge in GRAPH.edges}
    assert (f"{PACKAGE}.tasks", f"{PACKAGE}.conf") in pairs
    assert (f"{PACKAGE}.worker.forkserver", f"{PACKAGE}.worker.entry") in pairs  # from . import entry
    assert (f"{ENGINE}.queue", f"{ENGINE}.record") in pairs
    lazy = {(edge.source, edge.target) for edge in GRAPH.edges if edge.lazy}
    # django.tasks exists from Django 6.0 only
    assert (f"{PACKAGE}.running.runner", f"{PACKAGE}.backend") in lazy
    assert {f"{PACKAGE}.conf", f"{PACKAGE}.tasks", f"{ENGINE}.queue"} <= GRAPH.modules
    assert len(DJANGO_LAYER) > 20 and len(ENGINE_MODULES) > 20


# ---------------------------------------------------------------------------------------------- the rules


def test_the_django_layer_has_no_import_circle() -> None:
    report = circles_report("Django layer", GRAPH.among(DJANGO_LAYER))
    assert not report, "\n" + report


def test_the_engine_imports_only_the_stdlib_lmdb_msgpack_and_psycopg() -> None:
    allowed = set(sys.stdlib_module_names) | ENGINE_THIRD_PARTY
    wrong = [str(edge) for edge in GRAPH.external if is_engine(edge.source) and edge.target not in allowed]
    assert wrong == [], (
        "the engine imports outside the standard library, lmdb, msgpack, psycopg:\n" + "\n".join(wrong)
    )


def test_the_engine_never_imports_the_django_layer() -> None:
    upward = [str(edge) for edge in GRAPH.edges if is_engine(edge.source) and not is_engine(edge.target)]
    assert upward == [], "the engine imports the Django layer:\n" + "\n".join(upward)


def test_the_engine_has_no_import_circle() -> None:
    report = circles_report("engine", GRAPH.among(ENGINE_MODULES))
    assert not report, "\n" + report


# ----------------------------------------------------------------------------------------- the LMDB store

LMDB_STORE = f"{ENGINE}.stores.lmdb"
# Engine modules outside the LMDB store that reach into it: the package (which exports ``StoreInUse``) and
# ``stores.opening``, which opens a store in a directory. The list only ever shrinks.
REACHES_INTO_LMDB = frozenset(f"{ENGINE}{suffix}" for suffix in ("", ".stores.opening"))


def in_lmdb_store(module: str) -> bool:
    return module == LMDB_STORE or module.startswith(f"{LMDB_STORE}.")


def test_only_the_lmdb_store_imports_lmdb() -> None:
    """Everything about LMDB is in ``engine/stores/lmdb/``: no other module of the package imports lmdb."""
    wrong = [str(edge) for edge in GRAPH.external if edge.target == "lmdb" and not in_lmdb_store(edge.source)]
    assert wrong == [], "lmdb imported outside engine/stores/lmdb/:\n" + "\n".join(wrong)


def test_the_rest_of_the_engine_does_not_reach_into_the_lmdb_store() -> None:
    reaching = {
        edge.source
        for edge in GRAPH.edges
        if is_engine(edge.source) and not in_lmdb_store(edge.source) and in_lmdb_store(edge.target)
    }
    assert reaching <= REACHES_INTO_LMDB, "new imports of the LMDB store: " + ", ".join(
        sorted(reaching - REACHES_INTO_LMDB)
    )


def test_a_shards_upkeep_reads_and_management_stand_apart() -> None:
    """``upkeep.py``, ``reads.py`` and ``manage.py`` share the in-transaction helpers (``access.py``,
    ``quarantine.py``) and import neither each other nor ``shard.py``, which delegates to them; the claims
    (``claims.py``, which promotes through the upkeep) import no ``shard.py`` either."""
    claims = f"{LMDB_STORE}.claims"
    assert (claims, f"{LMDB_STORE}.shard") not in {(e.source, e.target) for e in GRAPH.edges}
    assert (f"{LMDB_STORE}.shard", claims) in {(e.source, e.target) for e in GRAPH.edges}
    parts = [f"{LMDB_STORE}.{name}" for name in ("upkeep", "reads", "manage", "shard")]
    wrong = [
        str(edge)
        for edge in GRAPH.edges
        if edge.source in parts[:3] and edge.target in parts and edge.target != edge.source
    ]
    assert wrong == [], "\n".join(wrong)
    assert {(f"{LMDB_STORE}.shard", part) for part in parts[:3]} <= {
        (e.source, e.target) for e in GRAPH.edges
    }


# -------------------------------------------------------------------------------------- the Django layer

# The modules at the top of the package: the public API and Django's fixed entry points (and commits.py,
# the commit state of a job enqueued in a transaction that tasks, results, backend and testing share).
# Anything else goes in the package of its kind: conf/, running/, observability/, worker/, admin/...
TOP_LEVEL = frozenset(
    f"{PACKAGE}.{name}"
    for name in (
        "apps", "backend", "commits", "context", "models", "periodic", "results", "schedules", "signals",
        "tasks", "testing", "urls", "workflows",
    )
)  # fmt: skip
CONF = f"{PACKAGE}.conf"
STORE_KINDS = f"{CONF}.storekinds"
RUNNING = f"{PACKAGE}.running"


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_the_top_level_holds_only_the_public_api_and_djangos_entry_points() -> None:
    top = {
        name
        for name in DJANGO_LAYER
        if name.count(".") == 1 and not (PACKAGE_DIR / name.partition(".")[2] / "__init__.py").exists()
    }
    assert top == TOP_LEVEL, (
        f"modules moved to the top: {sorted(top - TOP_LEVEL)}, gone: {sorted(TOP_LEVEL - top)}"
    )


def test_the_configuration_imports_nothing_of_running_jobs_workers_admin_or_commands() -> None:
    """``conf/`` sits under everything that runs: only the task registry (a leaf the task checks read)."""
    above = [f"{PACKAGE}.{name}" for name in ("worker", "admin", "management", "observability", "backend")]
    wrong = [
        str(edge)
        for edge in GRAPH.edges
        if within(edge.source, CONF)
        and (
            any(within(edge.target, package) for package in above)
            or (within(edge.target, RUNNING) and edge.target != f"{RUNNING}.registry")
        )
    ]
    assert wrong == [], "\n".join(wrong)


def test_running_a_job_imports_no_worker_admin_or_command() -> None:
    above = [f"{PACKAGE}.{name}" for name in ("worker", "admin", "management")]
    wrong = [
        str(edge)
        for edge in GRAPH.edges
        if within(edge.source, RUNNING) and any(within(edge.target, package) for package in above)
    ]
    assert wrong == [], "\n".join(wrong)


def test_a_store_kind_is_reached_only_through_the_registry() -> None:
    """Outside ``conf/storekinds/``, no module imports a kind's modules (only ``STORE_KINDS`` and
    ``StoreKind``), but for types and for the migration that makes the PostgreSQL store's tables."""
    shared = {STORE_KINDS, f"{STORE_KINDS}.kind"}
    kinds = {name for name in DJANGO_LAYER if within(name, STORE_KINDS) and name not in shared}
    assert {f"{STORE_KINDS}.lmdb", f"{STORE_KINDS}.postgresql"} <= kinds
    wrong = [
        str(edge)
        for edge in GRAPH.edges
        if edge.target in kinds
        and not within(edge.source, STORE_KINDS)
        and not edge.type_only
        and not within(edge.source, f"{PACKAGE}.migrations")
    ]
    assert wrong == [], "\n".join(wrong)
    kinds_importing_conf = [
        str(edge) for edge in GRAPH.edges if edge.source in kinds and edge.target == CONF
    ]  # (conf's door imports the registry: a kind that imported it back would be a circle at start-up)
    assert kinds_importing_conf == [], "\n".join(kinds_importing_conf)
