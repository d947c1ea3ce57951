"""A worker's report as the LMDB and PostgreSQL stores keep it: one msgpack list of ten fields, written by
``report_worker`` and read back as a ``WorkerInfo`` (types.py). One reading for both stores, so that a
report written past the engine means the same on each: nothing."""

from __future__ import annotations

import os
import socket

import msgpack

from .types import WorkerInfo


def pack_report(
    before: WorkerInfo | None,
    now: float,
    *,
    stale_after: float,
    started_at: float | None,
    pid: int | None,
    host: str | None,
    queues: tuple[str, ...] | None,
    threads: int,
    current_jobs: tuple[int, ...],
    processed: int,
    failed: int,
) -> bytes:
    """The report to store, its last heartbeat ``now``: a worker seen ``before`` keeps its first start time
    unless ``started_at`` is given; ``pid`` and ``host`` default to this process's."""
    first_seen = now if before is None else before.started_at
    packed: bytes = msgpack.packb(
        [
            os.getpid() if pid is None else pid,
            socket.gethostname() if host is None else host,
            first_seen if started_at is None else started_at,
            now,
            stale_after,
            None if queues is None else list(queues),
            threads,
            list(current_jobs),
            processed,
            failed,
        ],
        use_bin_type=True,
    )
    return packed


def unpack_report(worker_id: str | bytes, raw: bytes) -> WorkerInfo | None:
    """A stored report as a ``WorkerInfo``; None for one that does not decode or has another shape (written
    past the engine), its id (LMDB's key: bytes) included: such a worker tells nothing, so it is not listed,
    and counts as dead (pruned), until its own next report replaces it."""
    try:
        pid, host, started_at, last, stale_after, queues, threads, jobs, processed, failed = msgpack.unpackb(
            raw, raw=False
        )
        times = (started_at, last, stale_after)
        if not all(type(value) in (int, float) for value in times) or not isinstance(jobs, list):
            return None
        return WorkerInfo(
            worker_id=worker_id if isinstance(worker_id, str) else worker_id.decode(),
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


def alive(worker: WorkerInfo | None, now: float) -> bool:
    """A report that decodes and is recent (a report that does not decode counts as a dead worker's)."""
    return worker is not None and worker.alive(now)
