"""``PgCoordination``: what the processes of a PostgreSQL store tell each other: named locks (leases) and
the worker registry, as ``stores/base.py`` states them (``LockOps``).

A lock is a row of ``qm_locks`` with an owner and an expiry on the store's clock (``*_us``: microseconds),
never an advisory lock: a session's advisory lock stays with a pooled server connection (PgBouncer in
transaction mode) after its client is gone, and dies with a dropped connection while the holder carries on;
a row with an expiry means the same on every connection. Taking a lock is one transaction that locks the row
(``FOR UPDATE``; a name nobody used yet gets its row inserted first, so that two first takers are ordered
too), reads ``now`` from the clock, and takes it when it is free, expired, or already this owner's (a
renewal, which keeps ``since``): two processes never both hold it. Releasing it moves the lease to the
``last_*`` columns (``owner`` NULL: free), so ``last_lock_holder`` still says who held it and until when
(the release); an expired lease stays where it is, as the LMDB store keeps it.

A worker's report is a row of ``qm_workers``: the whole report in ``report`` (msgpack, the LMDB store's
layout, so every field round-trips exactly), and its last heartbeat (microseconds) and ``stale_after`` in
columns of their own, for an operator's SQL. Alive or dead is decided as the LMDB store decides it
(``WorkerInfo.alive`` on the report's values).

A lease with an owner but no expiry or no ``since`` (a row written past the engine) is a lock record that
does not decode, and is handled as the LMDB store handles one (its module docstring says why): the first
``acquire_lock`` that meets it refuses and replaces it with a lease of nobody known (owner ``''``) for its
``ttl``; ``lock_holder`` says nobody holds it; ``last_lock_holder`` skips it; ``verify()`` names it.

Names, owners and worker ids are checked as the LMDB store checks them (``id_bytes``: ``InvalidJob``), and
PostgreSQL's text cannot hold NUL, which is refused the same way. SQL here never calls ``now()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..reports import alive, pack_report, unpack_report
from ..types import UNKNOWN_HOLDER, LockHolder, WorkerInfo, id_bytes, lock_damage
from .connection import Connections
from .control import check_text

logger = logging.getLogger("queue_max_django.engine")

MICRO = 1_000_000


def _to_us(seconds: float) -> int:
    return round(seconds * MICRO)


def _check_id(what: str, value: Any) -> str:
    id_bytes(what, value)
    return check_text(what, value)


def _holder(owner: str, expires_us: int, since_us: int) -> LockHolder:
    return LockHolder(owner, expires_us / MICRO, since_us / MICRO)


class PgCoordination:
    """``LockOps`` on a PostgreSQL database (``db``: the store's connections; ``clock``: the store's)."""

    def __init__(self, db: Connections, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock

    # ------------------------------------------------------------------ locks

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take or renew the lock ``name`` for ``ttl`` seconds. -> False if someone else holds it."""
        _check_id("a lock name", name)
        _check_id("a lock owner", owner)
        with self._db.transaction() as conn:
            lease = _lock_lease(conn, name)
            now = self._clock()  # the row is locked
            now_us = _to_us(now)
            since_us = now_us
            if lease is _DAMAGED:
                logger.error("%s", lock_damage(name, ttl), extra={"lock": name})
                owner, since_us = UNKNOWN_HOLDER, now_us
            elif lease is not None:
                holder, expires_us, held_since_us = lease
                if expires_us > now_us:
                    if holder != owner:
                        return False
                    since_us = held_since_us  # a renewal; an owner taking its expired lock again starts anew
            conn.execute(
                "UPDATE qm_locks SET owner = %s, expires_us = %s, since_us = %s WHERE name = %s",
                (owner, _to_us(now + ttl), since_us, name),
            )
            return lease is not _DAMAGED

    def release_lock(self, name: str, owner: str) -> bool:
        """Give the lock up if ``owner`` holds it (an expired lease is held by nobody). -> whether it did.
        The lease becomes the last one, expired as of now: the lock is free, and ``last_lock_holder``
        still tells who held it last and until when."""
        _check_id("a lock name", name)
        with self._db.transaction() as conn:
            row = conn.execute(
                "SELECT owner, expires_us FROM qm_locks WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None or row[0] is None or row[0] != owner:
                return False
            now_us = _to_us(self._clock())
            if row[1] is None or row[1] <= now_us:
                return False
            conn.execute(
                "UPDATE qm_locks SET last_owner = owner, last_expires_us = %s, last_since_us = since_us, "
                "owner = NULL, expires_us = NULL, since_us = NULL WHERE name = %s",
                (now_us, name),
            )
            return True

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now (an expired or released lease counts as free)."""
        _check_id("a lock name", name)
        with self._db.transaction() as conn:
            row = conn.execute(
                "SELECT owner, expires_us, since_us FROM qm_locks WHERE name = %s AND owner IS NOT NULL",
                (name,),
            ).fetchone()
        if row is None or row[0] == UNKNOWN_HOLDER or None in row or row[1] <= _to_us(self._clock()):
            return None
        return _holder(*row)

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last lease of ``name``, held, expired or released; None if nobody ever took it."""
        _check_id("a lock name", name)
        with self._db.transaction() as conn:
            row = conn.execute(
                "SELECT owner, expires_us, since_us, last_owner, last_expires_us, last_since_us "
                "FROM qm_locks WHERE name = %s",
                (name,),
            ).fetchone()
        if row is None:
            return None
        for lease in (row[:3], row[3:]):  # the current one, else the last released one
            if lease[0] is not None:
                return None if None in lease else _holder(*lease)
        return None

    def verify(self) -> list[str]:
        """Every lock whose lease has an owner but no expiry or no ``since`` (or a released one likewise)."""
        with self._db.transaction() as conn:
            rows = conn.execute(
                "SELECT name FROM qm_locks "
                "WHERE (owner IS NOT NULL AND (expires_us IS NULL OR since_us IS NULL))"
                " OR (last_owner IS NOT NULL AND (last_expires_us IS NULL OR last_since_us IS NULL))"
                ' ORDER BY name COLLATE "C"'
            ).fetchall()
        return [f"lock {name!r}: its record does not decode (an owner without its times)" for (name,) in rows]

    # ------------------------------------------------------------------ workers

    def report_worker(
        self,
        worker_id: str,
        *,
        stale_after: float,
        started_at: float | None = None,
        pid: int | None = None,
        host: str | None = None,
        queues: tuple[str, ...] | None = None,
        threads: int = 1,
        current_jobs: tuple[int, ...] = (),
        processed: int = 0,
        failed: int = 0,
    ) -> None:
        """Record (or refresh) one worker's report; ``last_heartbeat`` is now."""
        _check_id("a worker id", worker_id)
        with self._db.transaction() as conn:
            raw = _lock_or_create_worker(conn, worker_id)
            now = self._clock()
            before = None if raw is None else unpack_report(worker_id, raw)
            report = pack_report(
                before, now, stale_after=stale_after, started_at=started_at, pid=pid, host=host,
                queues=queues, threads=threads, current_jobs=current_jobs, processed=processed, failed=failed,
            )  # fmt: skip
            conn.execute(
                "UPDATE qm_workers SET report = %s, last_heartbeat_us = %s, stale_after = %s "
                "WHERE worker_id = %s",
                (report, _to_us(now), stale_after, worker_id),
            )

    def remove_worker(self, worker_id: str) -> bool:
        _check_id("a worker id", worker_id)
        with self._db.transaction() as conn:
            row = conn.execute("DELETE FROM qm_workers WHERE worker_id = %s RETURNING 1", (worker_id,))
            return row.fetchone() is not None

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """The registered workers, ordered by id; only live ones unless ``include_dead``."""
        with self._db.transaction() as conn:
            rows = conn.execute(
                'SELECT worker_id, report FROM qm_workers ORDER BY worker_id COLLATE "C"'
            ).fetchall()
        everyone = [unpack_report(worker_id, bytes(raw)) for worker_id, raw in rows]
        now = self._clock()
        return [w for w in everyone if w is not None and (include_dead or w.alive(now))]

    def prune_workers(self) -> int:
        """Forget workers that stopped reporting (past their ``stale_after``). -> how many."""
        with self._db.transaction() as conn:
            rows = conn.execute(
                'SELECT worker_id, report FROM qm_workers ORDER BY worker_id COLLATE "C" FOR UPDATE'
            ).fetchall()
            now = self._clock()
            dead = [key for key, raw in rows if not alive(unpack_report(key, bytes(raw)), now)]
            if dead:
                conn.execute("DELETE FROM qm_workers WHERE worker_id = ANY(%s)", (dead,))
            return len(dead)


_DAMAGED = ("", 0, 0)  # what ``_lock_lease`` returns for a lease that does not decode


def _lock_lease(conn: Any, name: str) -> tuple[str, int, int] | None:
    """The lease of ``name`` (owner, expires_us, since_us: held or expired), its row locked; ``_DAMAGED``
    for an owner without its times; None when there is none (released, or never taken: then its row is
    inserted, free, and invisible to others until this transaction commits, so that two first takers are
    ordered by the row too)."""
    while True:
        row = conn.execute(
            "SELECT owner, expires_us, since_us FROM qm_locks WHERE name = %s FOR UPDATE", (name,)
        ).fetchone()
        if row is not None:
            if row[0] is None:
                return None
            return _DAMAGED if row[1] is None or row[2] is None else (row[0], row[1], row[2])
        created = conn.execute(
            "INSERT INTO qm_locks (name) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1", (name,)
        ).fetchone()
        if created is not None:
            return None
        # Another process created it meanwhile, and committed (our insert waited for it): lock that row.


def _lock_or_create_worker(conn: Any, worker_id: str) -> bytes | None:
    """The report of ``worker_id``, its row locked; None for a new worker, whose row is then inserted."""
    while True:
        row = conn.execute(
            "SELECT report FROM qm_workers WHERE worker_id = %s FOR UPDATE", (worker_id,)
        ).fetchone()
        if row is not None:
            return bytes(row[0])
        created = conn.execute(
            "INSERT INTO qm_workers (worker_id, report, last_heartbeat_us, stale_after) "
            "VALUES (%s, '', 0, 0) ON CONFLICT DO NOTHING RETURNING 1",
            (worker_id,),
        ).fetchone()
        if created is not None:
            return None
