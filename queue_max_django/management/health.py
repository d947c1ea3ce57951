"""What ``queue_health`` judges, from one read of the worker registry and of the queues' counts and lag: the
store's workers (some worker reports), or one replica's (``Replica``: the worker processes of one
``queue_worker``, or of this host, all report), each ``--queue`` served, no queue that no live worker
serves left with a job waiting too long, and the lag. The first failure is the reason, in one line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine import Queue
from ..engine.stores.types import WorkerInfo
from ..observability import serving
from .common import printable

DEFAULT_HEARTBEAT_WITHIN = 60.0  # seconds: a worker reports every few seconds (at most 17 s apart under load)
DEFAULT_UNSERVED_AFTER = 300.0  # seconds a job may wait in a queue no live worker serves: then an outage


@dataclass(frozen=True)
class Replica:
    """The worker processes judged: those of one ``queue_worker`` (``worker_id``: its ``--worker-id``, the
    processes registering as ``ID/0``, ``ID/1``...) or those running on one ``host``."""

    worker_id: str | None = None
    host: str | None = None

    def __str__(self) -> str:
        if self.worker_id is not None:
            return f"worker {printable(self.worker_id)!r}"
        return f"host {printable(self.host or '')!r}"

    def holds(self, info: WorkerInfo) -> bool:
        if self.worker_id is not None:
            return info.worker_id == self.worker_id or info.worker_id.startswith(self.worker_id + "/")
        return info.host == self.host


@dataclass
class Health:
    """What the check found: ``reason`` is None when healthy, else the first failure, in one line."""

    workers: int  # with a heartbeat within the limit (of the replica, when one is judged)
    newest_heartbeat_age: float | None  # seconds since the most recent heartbeat of any registered worker
    lag: dict[str, float] = field(default_factory=dict)  # queue -> its oldest waiting job's age (seconds)
    unserved: list[dict[str, Any]] = field(default_factory=list)  # queues no live worker serves
    warnings: list[str] = field(default_factory=list)  # what is wrong but not (yet) unhealthy
    reason: str | None = None


def check(
    queue: Queue,
    *,
    heartbeat_within: float,
    max_lag: float | None,
    queues: list[str] | None,
    replica: Replica | None = None,
    processes: int | None = None,
    unserved_after: float = DEFAULT_UNSERVED_AFTER,
) -> Health:
    """Read the worker registry, the queues' counts and their lag once, and judge them."""
    now = queue.now()
    registered = queue.workers(include_dead=True)
    live = [w for w in registered if now - w.last_heartbeat <= heartbeat_within]
    judged = registered if replica is None else [w for w in registered if replica.holds(w)]
    judged_live = [w for w in judged if w in live]
    newest = min((now - w.last_heartbeat for w in judged), default=None)
    ages = queue.pending_ages()
    lag = ages if not queues else {name: ages[name] for name in queues if name in ages}
    health = Health(len(judged_live), None if newest is None else max(0.0, newest), lag)
    counts = queue.queue_counts()
    for name in serving.unserved(counts, live):
        waiting = ages.get(name)
        held = {state: counts[name].get(state, 0) for state in ("pending", "scheduled")}
        health.unserved.append({"queue": name, **held, "waited": waiting})
        health.warnings.append(_unserved_text(name, counts[name], waiting))
    if replica is None:
        problem = _worker_problem(live, newest, heartbeat_within)
    else:
        problem = _replica_problem(replica, judged, judged_live, now, heartbeat_within, processes)
    health.reason = (
        problem
        or _queue_problem(judged_live, queues)
        or (None if replica is not None else _unserved_problem(health.unserved, unserved_after))
        or _lag_problem(lag, max_lag)
    )
    return health


def _worker_problem(live: list[WorkerInfo], newest: float | None, within: float) -> str | None:
    if live:
        return None
    if newest is None:
        return "no worker is registered in this store (is queue_worker running?)"
    return f"no worker heartbeat within {within:g} s (the newest is {newest:.1f} s old)"


def _replica_problem(
    replica: Replica,
    judged: list[WorkerInfo],
    live: list[WorkerInfo],
    now: float,
    within: float,
    processes: int | None,
) -> str | None:
    """One replica: some process of it reports; of each ``queue_worker`` of it that has a process reporting
    (the processes ``ID/0``, ``ID/1``... of one supervisor), every registered one does (a process that stopped
    while its siblings go on is hung: its supervisor would have replaced a dead one); ``processes``: at least
    that many report. The processes of an earlier run of it that were killed (another supervisor id, none
    reporting) are left for the registry's pruning, not judged."""
    if not judged:
        there = f"with --worker-id {replica.worker_id}" if replica.worker_id is not None else "on this host"
        return f"no worker process of {replica} is registered (is queue_worker running {there}?)"
    if not live:
        newest = min(now - w.last_heartbeat for w in judged)
        return (
            f"no worker process of {replica} reported within {within:g} s (the newest is {newest:.1f} s old)"
        )
    running = {_supervisor(w) for w in live}
    for info in sorted(judged, key=lambda w: w.worker_id):
        if info not in live and _supervisor(info) in running:
            age = now - info.last_heartbeat
            return (
                f"worker process {printable(info.worker_id)!r} of {replica} has not reported for {age:.1f} s "
                f"(over {within:g} s) while its siblings do: it is hung"
            )
    if processes is not None and len(live) < processes:
        return f"{len(live)} of the {processes} worker processes of {replica} reported within {within:g} s"
    return None


def _supervisor(info: WorkerInfo) -> str:
    """The id of the ``queue_worker`` a process belongs to: its worker id without the ``/INDEX``."""
    return info.worker_id.rpartition("/")[0] or info.worker_id


def _queue_problem(live: list[WorkerInfo], queues: list[str] | None) -> str | None:
    for name in queues or ():
        if not any(serving.serves(w, name) for w in live):
            return f"no live worker serves the queue {printable(name)!r} ({len(live)} live serve others)"
    return None


def _unserved_text(name: str, counts: dict[str, int], waited: float | None) -> str:
    held = f"{counts.get('pending', 0)} waiting, {counts.get('scheduled', 0)} scheduled"
    since = "" if waited is None else f"; the oldest has waited {waited:.1f} s"
    return f"no live worker serves the queue {printable(name)!r} ({held}{since})"


def _unserved_problem(unserved: list[dict[str, Any]], after: float) -> str | None:
    late = [row for row in unserved if row["waited"] is not None and row["waited"] > after]
    if not late:
        return None
    row = max(late, key=lambda row: row["waited"])
    more = f" (and {len(late) - 1} more queue(s))" if len(late) > 1 else ""
    return (
        f"a job has waited {row['waited']:.1f} s in the queue {printable(row['queue'])!r}, which no live "
        f"worker serves (over {after:g} s){more}"
    )


def _lag_problem(lag: dict[str, float], max_lag: float | None) -> str | None:
    if max_lag is None:
        return None
    late = {name: age for name, age in lag.items() if age > max_lag}
    if not late:
        return None
    name, age = max(late.items(), key=lambda item: item[1])
    more = f" (and {len(late) - 1} more queue(s))" if len(late) > 1 else ""
    waited = f"has waited {age:.1f} s, over {max_lag:g} s"
    return f"the oldest waiting job of queue {printable(name)!r} {waited}{more}"
