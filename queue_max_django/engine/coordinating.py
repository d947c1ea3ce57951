"""``Queue``'s store-wide locks and worker registry: its public methods over the store's ``locks`` member
(``LockOps`` in ``stores/base.py``), with their arguments checked. A base class of ``Queue``, which supplies
``_live()`` (the open store, checked against close and fork)."""

from __future__ import annotations

from typing import Any

from .errors import InvalidJob
from .stores.base import Store
from .stores.types import LockHolder, WorkerInfo
from .validate import check_number


class Coordination:
    """Locks (leases) that one owner holds at a time across every process and machine, and the registry of
    the workers that serve the store."""

    def _live(self) -> Store:
        raise NotImplementedError  # Queue's

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take (or, if ``owner`` already holds it, renew) the store-wide lock ``name`` for ``ttl`` seconds.
        -> False if another owner holds it. A holder that dies loses it when the ttl runs out."""
        check_number("ttl", ttl, minimum=0.001, error=InvalidJob)
        return self._live().locks.acquire_lock(name, owner, float(ttl))

    def release_lock(self, name: str, owner: str) -> bool:
        """Give up ``name`` if ``owner`` holds it. -> whether it did. The lock is free at once; its record
        stays, expired as of now, for ``last_lock_holder``."""
        return self._live().locks.release_lock(name, owner)

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now; None if it is free (never taken, expired or released)."""
        return self._live().locks.lock_holder(name)

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last record of ``name`` whether it is held, expired or released (then ``expires_at`` is when
        it was released); None if nobody ever took it. A new holder learns from it until when its
        predecessor held the lock (the periodic scheduler resumes its ticks from there)."""
        return self._live().locks.last_lock_holder(name)

    def report_worker(self, worker_id: str, *, stale_after: float, **fields: Any) -> None:
        """Register or refresh a worker in the store's registry (``workers()`` reads it). Fields: ``pid``,
        ``host``, ``started_at``, ``queues``, ``threads``, ``current_jobs``, ``processed``, ``failed``."""
        check_number("stale_after", stale_after, minimum=0.001, error=InvalidJob)
        self._live().locks.report_worker(worker_id, stale_after=float(stale_after), **fields)

    def remove_worker(self, worker_id: str) -> bool:
        return self._live().locks.remove_worker(worker_id)

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """Workers that reported within their ``stale_after`` (all registered ones with ``include_dead``)."""
        return self._live().locks.workers(include_dead=include_dead)

    def prune_workers(self) -> int:
        """Forget workers that stopped reporting. -> how many."""
        return self._live().locks.prune_workers()
