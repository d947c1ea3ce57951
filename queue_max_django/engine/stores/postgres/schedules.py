"""Kept schedules of the PostgreSQL store (``ScheduleOps``, ``stores/contract/schedules.py``).

The table (``DDL``, created by ``schema.py`` from version 9 on): ``qm_schedules`` holds a row per name, its
value the bytes the caller gave (``schedulestate.pack``). A change is one transaction that locks the
name's row (``FOR UPDATE``; a new name: a transaction-scoped advisory lock on its hash, so two adds of one
name wait for each other), calls the edit, and writes.
"""

from __future__ import annotations

from collections.abc import Callable

from .connection import Connections

DDL = """
-- Version 7: schedules kept in the store (schedules.py): a row per name, schedulestate.pack's bytes.
CREATE TABLE IF NOT EXISTS qm_schedules (
    name text PRIMARY KEY,
    value bytea NOT NULL
);
"""
TABLE = "qm_schedules"
_ADVISORY = 424242  # the first key of the two-key advisory lock of a schedule's name


class PgSchedules:
    def __init__(self, db: Connections) -> None:
        self._db = db

    def change(self, name: str, edit: Callable[[bytes | None], bytes | None]) -> bytes | None:
        with self._db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_ADVISORY, name))
            row = conn.execute(
                "SELECT value FROM qm_schedules WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            new = edit(None if row is None else bytes(row[0]))
            if new is None:
                if row is not None:
                    conn.execute("DELETE FROM qm_schedules WHERE name = %s", (name,))
            else:
                conn.execute(
                    "INSERT INTO qm_schedules (name, value) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (name, new),
                )
            return new

    def get(self, name: str) -> bytes | None:
        with self._db.transaction() as conn:
            row = conn.execute("SELECT value FROM qm_schedules WHERE name = %s", (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def all(self) -> list[tuple[str, bytes]]:
        with self._db.transaction() as conn:
            rows = conn.execute('SELECT name, value FROM qm_schedules ORDER BY name COLLATE "C"').fetchall()
        return [(name, bytes(value)) for name, value in rows]
