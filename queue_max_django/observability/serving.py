"""Which queues no live worker takes jobs from: the admin dashboard's warning and ``queue_health``'s, one
rule for both. Pure functions of what the engine reports (``Queue.queue_counts()``, ``Queue.workers()``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..engine import WorkerInfo


def serves(worker: WorkerInfo, queue: str) -> bool:
    """Whether ``worker`` takes jobs from ``queue`` (a worker started without ``--queue`` takes every one)."""
    return worker.queues is None or queue in worker.queues


def unserved(queue_counts: Mapping[str, Mapping[str, int]], workers: Iterable[WorkerInfo]) -> list[str]:
    """The queues, by name, holding waiting (pending) or scheduled jobs that none of ``workers`` (the live
    ones: the caller decides which are) takes jobs from."""
    live = list(workers)
    return [
        name
        for name, counts in sorted(queue_counts.items())
        if counts.get("pending", 0) + counts.get("scheduled", 0) > 0
        and not any(serves(info, name) for info in live)
    ]
