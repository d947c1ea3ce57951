"""SQL shared by the PostgreSQL store's operations: the counter upsert that rides along in a statement's
data-modifying CTEs, so that counts change in the same statement (one round trip, one transaction) as the
jobs they count."""

from __future__ import annotations

import random
from typing import Any, Protocol

from .rows import HISTORY_MAX
from .schema import COUNTER_SLOTS


def tally(*moves: tuple[str, str, int | str]) -> str:
    """A CTE ``cnt`` that adds to the counter rows: each move is (a CTE or table with a ``queue`` column,
    the SQL of the state counted, +1/-1 or an SQL count per row). Rows are written in key order (no
    deadlock between two statements), to the slot ``%(slot)s``."""
    parts = " UNION ALL ".join(
        f"SELECT queue, ({state})::smallint AS state, ({change})::bigint AS n FROM {source}"
        for source, state, change in moves
    )
    return (
        "cnt AS (INSERT INTO qm_counts (queue, state, slot, n) "
        f"SELECT queue, state, %(slot)s, sum(n) FROM ({parts}) d GROUP BY queue, state "
        "HAVING sum(n) <> 0 ORDER BY queue, state "
        "ON CONFLICT (queue, state, slot) DO UPDATE SET n = qm_counts.n + EXCLUDED.n RETURNING 1)"
    )


def slot() -> int:
    """The counter slot of one statement: spread writers over ``COUNTER_SLOTS`` rows per count."""
    return random.randrange(COUNTER_SLOTS)


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
