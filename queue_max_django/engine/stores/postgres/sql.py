"""SQL shared by the PostgreSQL store's operations: the counter upsert that rides along in a statement's
data-modifying CTEs, so that counts change in the same statement (one round trip, one transaction) as the
jobs they count."""

from __future__ import annotations

import random
import threading
from typing import Any, Protocol

from .rows import HISTORY_MAX
from .schema import COUNTER_SLOTS, JOURNAL_START


def tally(*moves: tuple[str, str, int | str], journal: bool = False) -> str:
    """A CTE ``cnt`` that adds to the counter rows: each move is (a CTE or table with a ``queue`` column,
    the SQL of the state counted, +1/-1 or an SQL count per row). Rows are written in key order (no
    deadlock between two statements), to the slot ``%(slot)s``; with ``journal``, to a new slot of the
    journal instead (a row no other transaction can be waiting for: see schema.py)."""
    slot_sql = "nextval('qm_count_journal')" if journal else "%(slot)s"
    parts = " UNION ALL ".join(
        f"SELECT queue, ({state})::smallint AS state, ({change})::bigint AS n FROM {source}"
        for source, state, change in moves
    )
    return (
        "cnt AS (INSERT INTO qm_counts (queue, state, slot, n) "
        f"SELECT queue, state, {slot_sql}, sum(n) FROM ({parts}) d GROUP BY queue, state "
        "HAVING sum(n) <> 0 ORDER BY queue, state "
        "ON CONFLICT (queue, state, slot) DO UPDATE SET n = qm_counts.n + EXCLUDED.n RETURNING 1)"
    )


def tally_put(states: tuple[int, ...], journal: bool) -> str:
    """``tally`` of one job put in ``%(queue)s``: +1 for each of ``states`` (distinct), as a plain
    ``VALUES`` list in key order, without the union and grouping that a tally of many rows needs (the
    single put's statement: docs/benchmarks.md, "PostgreSQL single path (issue 35)")."""
    slot_sql = "nextval('qm_count_journal')" if journal else "%(slot)s"
    rows = ", ".join(f"(%(queue)s, {state}::smallint, {slot_sql}, 1::bigint)" for state in sorted(states))
    return (
        f"cnt AS (INSERT INTO qm_counts (queue, state, slot, n) VALUES {rows} "
        "ON CONFLICT (queue, state, slot) DO UPDATE SET n = qm_counts.n + EXCLUDED.n RETURNING 1)"
    )


_local = threading.local()


def slot() -> int:
    """The counter slot of this thread's statements: writers spread over ``COUNTER_SLOTS`` rows per count,
    and every statement of one transaction on the same slot (two transactions never lock one count's rows
    in opposite orders)."""
    mine: int | None = getattr(_local, "slot", None)
    if mine is None:
        mine = _local.slot = random.randrange(COUNTER_SLOTS)
    return mine


FOLD_JOURNAL = f"""
WITH d AS (DELETE FROM qm_counts WHERE slot >= {JOURNAL_START} RETURNING queue, state, n)
INSERT INTO qm_counts (queue, state, slot, n)
SELECT queue, state, 0, sum(n) FROM d GROUP BY queue, state ORDER BY queue, state
ON CONFLICT (queue, state, slot) DO UPDATE SET n = qm_counts.n + EXCLUDED.n
"""
"""The journal's committed rows folded into slot 0 (the store's upkeep)."""


def notify_if(condition: str) -> str:
    """A scalar subquery that sends the store's hint (``%(channel)s``) when ``condition`` holds and the
    store sends hints (``%(notify)s``); it counts as part of the statement, so it goes out at its commit."""
    sends = f"SELECT pg_notify(%(channel)s, '') WHERE %(notify)s AND ({condition})"
    return f"(SELECT count(*) FROM ({sends}) n)"


def appended(column: str, value: str) -> str:
    """``column`` (a text[] history) with ``value`` appended, keeping the last ``HISTORY_MAX``."""
    return f"({column} || {value}::text)[greatest(cardinality({column}) - {HISTORY_MAX - 2}, 1):]"


class Statements(Protocol):
    """What the store's upkeep and reads run their SQL through (the ``PostgresStore``): one statement on
    this thread's connection (``one``: its first row; ``rows``: all of them), ``params`` with the counter
    slot and the hint's parameters, the connections (``db``) for a transaction of several, the hints."""

    db: Any
    hints: Any

    def one(self, sql: str, params: Any) -> Any: ...
    def rows(self, sql: str, params: Any) -> list[Any]: ...
    def params(self, **params: Any) -> dict[str, Any]: ...
