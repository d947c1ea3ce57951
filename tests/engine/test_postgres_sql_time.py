"""No SQL of the PostgreSQL store reads the server's time (``now()``, ``current_timestamp``,
``clock_timestamp()`` and their kin), except ``clock.py``, whose one job that is: every time the store writes
or compares is a parameter from the store's clock, so tests run it on a fake clock (docs: STORE.md f).

The check reads each module's string literals (with ``ast``: the SQL, including the constant parts of
f-strings), leaving out docstrings and comments, which may name these functions to say they are not used.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

POSTGRES_DIR = Path(__file__).resolve().parents[2] / "queue_max_django" / "engine" / "stores" / "postgres"
ALLOWED = {"clock.py"}  # ServerClock: reads the server's time, to offset this machine's clock by it
SERVER_TIME = re.compile(
    r"\bnow\s*\(|\bcurrent_(timestamp|time|date)\b|\blocaltime(stamp)?\b|\bclock_timestamp\b"
    r"|\bstatement_timestamp\b|\btransaction_timestamp\b|\btimeofday\b|'now'",
    re.IGNORECASE,
)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def server_time_calls(source: str, filename: str = "<source>") -> list[str]:
    """The string literals of ``source`` (not docstrings) that read the server's time: 'file:line: text'."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    return [
        f"{filename}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and SERVER_TIME.search(node.value)
    ]


def test_no_sql_of_the_store_reads_the_servers_time() -> None:
    modules = sorted(POSTGRES_DIR.glob("*.py"))
    assert {"control.py", "coordination.py", "schema.py"} <= {path.name for path in modules}
    found = [
        hit
        for path in modules
        if path.name not in ALLOWED
        for hit in server_time_calls(path.read_text(encoding="utf-8"), path.name)
    ]
    assert found == [], "SQL that reads the server's time instead of taking it from the store's clock"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE qm_jobs SET lease_us = extract(epoch FROM now()) * 1e6",
        "SELECT CURRENT_TIMESTAMP",
        "SELECT clock_timestamp()",
        "SELECT statement_timestamp()",
        "INSERT INTO t VALUES ('now'::timestamptz)",
        "SELECT LOCALTIMESTAMP",
        "SELECT current_date",
    ],
)
def test_the_check_sees_each_way_of_reading_it(sql: str) -> None:
    source = f'"""Docstrings may say now() and clock_timestamp()."""\nQ = {sql!r}\nF = f"{{0}} {sql}"\n'
    # The literal and the f-string's constant part; not the docstring.
    assert len(server_time_calls(source)) == 2


def test_the_check_passes_a_time_given_as_a_parameter() -> None:
    source = '"""Never now()."""\nQ = "UPDATE qm_locks SET expires_us = %s WHERE name = %s"\nnow = clock()\n'
    assert server_time_calls(source) == []
    assert server_time_calls((POSTGRES_DIR / "clock.py").read_text(encoding="utf-8")), "clock.py does read it"
