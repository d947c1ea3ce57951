"""What the processes of one store tell each other: named locks (leases) and the worker registry.

Both live in the control environment beside the limits and breakers. A lock is a lease with an owner and an
expiry: taking it succeeds when it is free, expired, or already ours (which renews it), all in one write
transaction with ``now`` read inside it, so two processes can never both hold it. Releasing a lock expires
its record rather than deleting it, so the last holder of a lock stays known (``last_lock_holder``). Workers
report who they are and what they are doing; a report older than its ``stale_after`` means a dead worker and
is pruned.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import msgpack

from ..types import LockHolder, WorkerInfo, id_bytes
from .env import Env


def check_id(what: str, value: Any) -> str:
    id_bytes(what, value)
    return str(value)


def default_host() -> str:
    return socket.gethostname()


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
                holder, expires_at, held_since = msgpack.unpackb(raw)
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
            raw = txn.get(key, db=self.locks_db)
            if raw is None:
                return False
            holder, expires_at, since = msgpack.unpackb(raw)
            now = self._clock()
            if holder != owner or expires_at <= now:
                return False
            txn.put(key, msgpack.packb([holder, now, since]), db=self.locks_db)
            return True

        return self.env.write(txn_fn)

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now (an expired or released lease counts as free)."""
        holder = self.last_lock_holder(name)
        return holder if holder is not None and holder.expires_at > self._clock() else None

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last record of ``name``, expired (or released) or not; None if nobody ever took it."""
        key = id_bytes("a lock name", name)
        raw = self.env.read(lambda txn: txn.get(key, db=self.locks_db))
        return None if raw is None else LockHolder(*msgpack.unpackb(raw))

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
            before = None if raw is None else _unpack_worker(key, raw)
            first_seen = now if before is None else before.started_at
            value = [
                os.getpid() if pid is None else pid,
                default_host() if host is None else host,
                first_seen if started_at is None else started_at,
                now,
                stale_after,
                None if queues is None else list(queues),
                threads,
                list(current_jobs),
                processed,
                failed,
            ]
            txn.put(key, msgpack.packb(value, use_bin_type=True), db=self.workers_db)

        self.env.write(txn_fn)

    def remove_worker(self, worker_id: str) -> bool:
        key = id_bytes("a worker id", worker_id)
        return bool(self.env.write(lambda txn: txn.delete(key, db=self.workers_db)))

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """The registered workers, ordered by id; only live ones unless ``include_dead``."""

        def txn_fn(txn: Any) -> list[WorkerInfo | None]:
            return [_unpack_worker(k, v) for k, v in txn.cursor(db=self.workers_db)]

        everyone = self.env.read(txn_fn)
        now = self._clock()
        return [w for w in everyone if w is not None and (include_dead or w.alive(now))]

    def prune_workers(self) -> int:
        """Forget workers that stopped reporting (past their ``stale_after``). -> how many."""

        def txn_fn(txn: Any) -> int:
            now = self._clock()
            dead = [k for k, v in txn.cursor(db=self.workers_db) if not _alive(_unpack_worker(k, v), now)]
            for key in dead:
                txn.delete(key, db=self.workers_db)
            return len(dead)

        return self.env.write(txn_fn)


def _alive(worker: WorkerInfo | None, now: float) -> bool:
    return worker is not None and worker.alive(now)


def _unpack_worker(key: bytes, raw: bytes) -> WorkerInfo | None:
    """A stored report as a ``WorkerInfo``; None for one that does not decode or has another shape (written
    past the engine): such a worker tells nothing, so it is not listed, and counts as dead (pruned), until
    its own next report replaces the row."""
    try:
        pid, host, started_at, last, stale_after, queues, threads, jobs, processed, failed = msgpack.unpackb(
            raw, raw=False
        )
        times = (started_at, last, stale_after)
        if not all(type(value) in (int, float) for value in times) or not isinstance(jobs, list):
            return None
        return WorkerInfo(
            worker_id=key.decode(),
            pid=pid,
            host=host,
            started_at=started_at,
            last_heartbeat=last,
            stale_after=stale_after,
            queues=None if queues is None else tuple(queues),
            threads=threads,
            current_jobs=tuple(jobs),
            processed=processed,
            failed=failed,
        )
    except (ValueError, TypeError, msgpack.UnpackException):  # not msgpack, or not the list of ten we write
        return None
