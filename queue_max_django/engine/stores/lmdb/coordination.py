"""What the processes of one store tell each other: named locks (leases) and the worker registry.

Both live in the control environment beside the limits and breakers. A lock is a lease with an owner and an
expiry: taking it succeeds when it is free, expired, or already ours (which renews it), all in one write
transaction with ``now`` read inside it, so two processes can never both hold it. Releasing a lock expires
its record rather than deleting it, so the last holder of a lock stays known (``last_lock_holder``). Workers
report who they are and what they are doing; a report older than its ``stale_after`` means a dead worker and
is pruned.

A lock record that does not decode (written past the engine) says neither who holds the lock nor until
when. A lock is safety, so it is never taken as free at once: its holder may be alive and still acting. The
first ``acquire_lock`` that meets it refuses, logs it, and replaces it with a lease of nobody known
(``UNKNOWN_HOLDER``) for that call's ``ttl`` from now; once that has expired the lock is free. A live holder
renewed at most one ``ttl`` before the damage was seen, so by then its own lease has run out too (when
every taker of one lock uses the same ttl, as the periodic scheduler's do); its next renewal is refused, so
it stops acting as the holder. ``lock_holder`` says nobody holds such a lock, ``release_lock`` releases
nothing, and ``verify()`` names a record that does not decode.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import msgpack

from ..reports import alive, pack_report, unpack_report
from ..types import UNKNOWN_HOLDER, LockHolder, WorkerInfo, id_bytes, lock_damage
from .env import Env

logger = logging.getLogger("queue_max_django.engine")


def check_id(what: str, value: Any) -> str:
    id_bytes(what, value)
    return str(value)


class Coordination:
    def __init__(self, env: Env, clock: Callable[[], float]) -> None:
        self.env = env
        self._clock = clock
        self.locks_db = env.dbs["locks"]
        self.workers_db = env.dbs["workers"]

    # ------------------------------------------------------------------ locks

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take or renew the lock ``name`` for ``ttl`` seconds. -> False if someone else holds it."""
        key = id_bytes("a lock name", name)
        check_id("a lock owner", owner)

        def txn_fn(txn: Any) -> bool:
            now = self._clock()
            raw = txn.get(key, db=self.locks_db)
            since = now
            if raw is not None:
                lease = _lease(raw)
                if lease is None:
                    logger.error("%s", lock_damage(name, ttl), extra={"lock": name})
                    txn.put(key, msgpack.packb([UNKNOWN_HOLDER, now + ttl, now]), db=self.locks_db)
                    return False
                holder, expires_at, held_since = lease
                if holder != owner and expires_at > now:
                    return False
                if holder == owner and expires_at > now:
                    since = held_since  # a renewal; an owner taking its expired lock again starts anew
            txn.put(key, msgpack.packb([owner, now + ttl, since]), db=self.locks_db)
            return True

        return self.env.write(txn_fn)

    def release_lock(self, name: str, owner: str) -> bool:
        """Give the lock up if ``owner`` holds it (an expired lease is held by nobody). -> whether it did.
        The record stays, expired as of now: the lock is free, and ``last_lock_holder`` still tells who held
        it last and until when (the periodic scheduler resumes from there after a clean stop)."""
        key = id_bytes("a lock name", name)

        def txn_fn(txn: Any) -> bool:
            lease = _lease(txn.get(key, db=self.locks_db))
            if lease is None:
                return False
            holder, expires_at, since = lease
            now = self._clock()
            if holder != owner or expires_at <= now:
                return False
            txn.put(key, msgpack.packb([holder, now, since]), db=self.locks_db)
            return True

        return self.env.write(txn_fn)

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now (an expired or released lease counts as free)."""
        holder = self.last_lock_holder(name)
        if holder is None or holder.owner == UNKNOWN_HOLDER:
            return None
        return holder if holder.expires_at > self._clock() else None

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last record of ``name``, expired (or released) or not; None if nobody ever took it (or its
        record does not decode)."""
        key = id_bytes("a lock name", name)
        lease = _lease(self.env.read(lambda txn: txn.get(key, db=self.locks_db)))
        return None if lease is None else LockHolder(*lease)

    def verify(self) -> list[str]:
        """Every lock whose record does not decode."""

        def txn_fn(txn: Any) -> list[str]:
            return [
                f"lock {bytes(key).decode(errors='backslashreplace')!r}: its record does not decode"
                for key, raw in txn.cursor(db=self.locks_db)
                if _lease(raw) is None
            ]

        return self.env.read(txn_fn)

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
        key = id_bytes("a worker id", worker_id)

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            raw = txn.get(key, db=self.workers_db)
            before = None if raw is None else unpack_report(worker_id, raw)
            report = pack_report(
                before, now, stale_after=stale_after, started_at=started_at, pid=pid, host=host,
                queues=queues, threads=threads, current_jobs=current_jobs, processed=processed, failed=failed,
            )  # fmt: skip
            txn.put(key, report, db=self.workers_db)

        self.env.write(txn_fn)

    def remove_worker(self, worker_id: str) -> bool:
        key = id_bytes("a worker id", worker_id)
        return bool(self.env.write(lambda txn: txn.delete(key, db=self.workers_db)))

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """The registered workers, ordered by id; only live ones unless ``include_dead``."""

        def txn_fn(txn: Any) -> list[WorkerInfo | None]:
            return [unpack_report(k, v) for k, v in txn.cursor(db=self.workers_db)]

        everyone = self.env.read(txn_fn)
        now = self._clock()
        return [w for w in everyone if w is not None and (include_dead or w.alive(now))]

    def prune_workers(self) -> int:
        """Forget workers that stopped reporting (past their ``stale_after``). -> how many."""

        def txn_fn(txn: Any) -> int:
            now = self._clock()
            dead = [k for k, v in txn.cursor(db=self.workers_db) if not alive(unpack_report(k, v), now)]
            for key in dead:
                txn.delete(key, db=self.workers_db)
            return len(dead)

        return self.env.write(txn_fn)


def _lease(raw: bytes | None) -> tuple[str, float, float] | None:
    """A lock's record (owner, expires_at, since), or None: there is none, or it does not decode (not
    msgpack, another shape, a time that is not a finite number)."""
    if raw is None:
        return None
    try:
        owner, expires_at, since = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    times = (expires_at, since)
    if not isinstance(owner, str) or not all(type(t) in (int, float) and math.isfinite(t) for t in times):
        return None
    return owner, expires_at, since
