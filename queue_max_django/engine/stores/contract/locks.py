"""Named locks and the worker registry shared by every process of a store: ``Store.locks()``."""

from __future__ import annotations

from typing import Protocol

from ..types import LockHolder, WorkerInfo


class LockOps(Protocol):
    """Named locks (leases with a ttl, on the store's clock) and the worker registry, shared by every process
    of the store. Names, owners and worker ids are checked by ``types.id_bytes`` before anything is written
    (``errors.InvalidJob``). [sc_lock_names]"""

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take the lock ``name`` for ``ttl`` seconds from now (the store's clock), if it is free, expired,
        or ``owner``'s already (a renewal, which keeps ``since``; an owner taking its expired lock again
        starts anew). -> False, nothing changed, if another owner holds it. [sc_lock_acquire]
        [sc_lock_damage] A lock record that does not decode tells neither who holds it nor until when, so it
        is never free at once: the first call that meets it refuses, logs ``types.lock_damage``, and
        replaces it by a lease of nobody known (``types.UNKNOWN_HOLDER``) for this call's ``ttl``; then the
        lock is free."""

    def release_lock(self, name: str, owner: str) -> bool:
        """Give the lock up if ``owner`` holds it (an expired lease is held by nobody). -> whether it did.
        The record stays, expired as of now, so ``last_lock_holder`` still tells who held it last.
        [sc_lock_release]"""

    def lock_holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` now; None when nobody does (never taken, expired, released, or a lease of
        nobody known). [sc_lock_acquire]"""

    def last_lock_holder(self, name: str) -> LockHolder | None:
        """The last record of ``name``, expired (or released) or not; None if nobody ever took it (or its
        record does not decode). [sc_lock_release]"""

    def verify(self) -> list[str]:
        """Every lock whose record does not decode (``Store.verify`` includes them)."""

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
        """Record (or refresh) one worker's report; its last heartbeat is now (the store's clock). Unset
        fields: this process's pid and host, and ``started_at`` of its first report (kept by later ones).
        [sc_workers_report]"""

    def remove_worker(self, worker_id: str) -> bool:
        """Forget one worker. -> False if it was not there. [sc_workers_prune]"""

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """The registered workers, ordered by id: those that reported within their ``stale_after``, or all
        with ``include_dead``. A report that does not decode is not listed. [sc_workers_report]"""

    def prune_workers(self) -> int:
        """Forget the workers that stopped reporting (past their ``stale_after``). -> how many.
        [sc_workers_prune]"""
