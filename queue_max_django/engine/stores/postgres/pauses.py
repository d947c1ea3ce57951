"""Pauses of the PostgreSQL store (``PauseOps``, ``stores/contract/pauses.py``).

Tables (``schema.py``): ``qm_pauses`` holds a row per paused target (``queue``, ``task``: '' for the
whole queue), its value ``pausestate.pack``'s bytes; ``qm_pause_version`` is one row whose ``version``
every pause and resume increments in its own transaction. Each operation is one transaction that locks the
version row first (two pauses at once: one waits), then reads ``now`` from the store's clock, and writes.

``version()`` is asked by every claim, so it is kept: the number this process last saw, from its own
writes, from ``pauses()``, or from the claims themselves (each claim's statement returns the committed
version, for free: ``guarded``), and read in a round trip only when nothing told it for ``QUIET_TTL``
seconds while nothing is paused (a busy worker then never asks the server), or ``VERSION_TTL`` while
something is (a consumer whose claims are all held back issues no claim statement, and must see a resume
soon). Kept numbers may be stale: another process's pause is not in them yet. So the claims check
(``[sc_pause_fresh]``): each thread's claim statement carries the version that thread last read, and takes
nothing when the committed one differs; the store then keeps the committed one, so that the thread's next
``version()`` returns it and its Queue reads the pauses again, and hints its own consumers to claim again at
once. A version read on a connection the thread lent the store (``Connections.borrowed``) is not kept: it
is the caller's transaction's, which may yet roll back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ... import pausestate
from ...pausestate import Pause, Target
from .connection import Connections
from .hints import PgHints

STALE = -1  # a thread's read version after a refused claim: no committed version (they start at 0)
VERSION_TTL = 0.005  # seconds a kept version is used without a round trip, while anything is paused
QUIET_TTL = 1.0  # the same while nothing is paused: each claim's statement checks it anyway

_BUMP = "UPDATE qm_pause_version SET version = version + 1 WHERE id = 1 RETURNING version"
_LOCK = "SELECT version FROM qm_pause_version WHERE id = 1 FOR UPDATE"
_ROWS = "SELECT queue, task, value FROM qm_pauses"
# The guard a claim statement carries (``job_sql``): the version its thread decided with, still committed.
GUARD = "AND %(pauses)s::bigint = (SELECT version FROM qm_pause_version WHERE id = 1)"
COMMITTED = "(SELECT version FROM qm_pause_version WHERE id = 1)"


class PgPauses:
    """``PauseOps`` on a PostgreSQL database (``db``: the store's connections; ``clock``: the store's)."""

    def __init__(self, db: Connections, clock: Callable[[], float], hints: PgHints) -> None:
        self._db = db
        self._clock = clock
        self._hints = hints
        self._kept: tuple[int, float] = (-1, -float("inf"))  # (version, monotonic time it was committed)
        self._lock = threading.Lock()
        self._local = threading.local()  # .read: the version this thread last read (its claims' guard)
        self._paused = False  # did the last read of the pauses find any in force

    # ------------------------------------------------------------------ the kept version

    def saw(self, version: int, at: float) -> None:
        """``version`` was committed as of ``at`` (monotonic): keep it unless a later reading is kept."""
        if self._db.lent() is not None:
            return
        with self._lock:
            if at >= self._kept[1]:
                self._kept = (version, at)

    def expected(self) -> int | None:
        """The version this thread last read (its claims carry it), None if it never asked."""
        return getattr(self._local, "read", None)

    def guarded(self, committed: int, expected: int, at: float) -> bool:
        """After a claim statement of this thread that carried ``expected`` and saw ``committed`` (as of
        ``at``, monotonic): keep it. -> True when they differ, so the claim took nothing: the pauses it
        was decided with are not the committed ones; this process's consumers are woken to look again at
        once (and this thread's next ``version()`` returns ``committed``)."""
        self.saw(committed, at)
        if committed == expected:
            return False
        self._local.read = STALE  # and so do its claims until it reads the version again
        self._hints.local()
        return True

    def version(self) -> int:
        version, at = self._kept
        asked = time.monotonic()
        if asked - at >= (VERSION_TTL if self._paused else QUIET_TTL):
            with self._db.transaction() as conn:
                version = int(conn.execute("SELECT version FROM qm_pause_version WHERE id = 1").fetchone()[0])
            self.saw(version, asked)
        self._local.read = version
        return version

    # ------------------------------------------------------------------ operations

    def pause(
        self, targets: Sequence[Target], duration: float | None, reason: str | None, by: str | None
    ) -> list[Pause]:
        with self._db.transaction() as conn:
            conn.execute(_LOCK)
            now = self._clock()  # after the lock: never older than the state it is applied to
            self._drop_ended(conn, now)
            until = None if duration is None else now + duration
            raw = pausestate.pack(now, until, reason, by)
            conn.execute(
                "INSERT INTO qm_pauses (queue, task, value) SELECT q, t, %s FROM unnest(%s::text[], "
                "%s::text[]) AS v(q, t) ON CONFLICT (queue, task) DO UPDATE SET value = excluded.value",
                (raw, [queue for queue, _ in targets], [task or "" for _, task in targets]),
            )
            version = int(conn.execute(_BUMP).fetchone()[0])
        self.saw(version, time.monotonic())
        return [Pause(queue, task, now, until, reason, by) for queue, task in targets]

    def resume(self, targets: Sequence[Target]) -> list[Pause]:
        with self._db.transaction() as conn:
            conn.execute(_LOCK)
            self._drop_ended(conn, self._clock())
            rows = conn.execute(
                "DELETE FROM qm_pauses p USING unnest(%s::text[], %s::text[]) AS v(q, t) "
                "WHERE p.queue = v.q AND p.task = v.t RETURNING p.queue, p.task, p.value",
                ([queue for queue, _ in targets], [task or "" for _, task in targets]),
            ).fetchall()
            version = None
            if rows:
                version = int(conn.execute(_BUMP).fetchone()[0])
                if self._hints.sends:
                    conn.execute("SELECT pg_notify(%s, '')", (self._hints.channel,))
        if version is not None:
            self.saw(version, time.monotonic())
            self._hints.local()
        found = {
            (queue, task or None): pausestate.unpack(pausestate.target_key(queue, task), bytes(value))
            for queue, task, value in rows
        }
        return [found[target] for target in targets if target in found]

    def pauses(self) -> tuple[int, list[Pause]]:
        asked = time.monotonic()
        with self._db.transaction() as conn:  # one statement: one snapshot of the version and the rows
            found = conn.execute(
                f"SELECT {COMMITTED}, p.queue, p.task, p.value "
                "FROM (SELECT 1) one LEFT JOIN qm_pauses p ON true"
            ).fetchall()
        version = int(found[0][0])
        self.saw(version, asked)
        self._local.read = version
        keyed = [(pausestate.target_key(q, t), bytes(v)) for _, q, t, v in found if q is not None]
        listed = pausestate.in_force(keyed, self._clock())
        self._paused = bool(listed)
        return version, listed

    def _drop_ended(self, conn: Any, now: float) -> None:
        rows = conn.execute(_ROWS).fetchall()
        keyed = [(pausestate.target_key(queue, task), bytes(value)) for queue, task, value in rows]
        for key in pausestate.ended(keyed, now):
            queue, task = pausestate.target_of(key)
            conn.execute("DELETE FROM qm_pauses WHERE queue = %s AND task = %s", (queue, task or ""))
