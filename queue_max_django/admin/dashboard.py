"""What the dashboard shows, read from the engine in one go: counts per state, queue and shard, jobs finished
and failed lately, the last hour's throughput chart, live workers, circuit breakers and rate limits.

Everything is O(shards + keys) but the recent-activity counts, which walk the newest finished jobs and stop
at ``RECENT_LIMIT`` (shown as "5,000+"), so the page costs the same on a store of any size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ..engine import CANCELLED, Queue, QueueError, State, WorkerInfo
from ..engine.throughput import history, minute_of, per_minute
from ..observability import serving
from . import chart, periodic
from .display import duration, when
from .listing import LABELS, Count, Filters, Scan, matching

RECENT_LIMIT = 5_000  # finished jobs looked at, at most, per state, to count the last minute/hour
MINUTE, HOUR = 60.0, 3600.0
DAMAGED = "damaged"  # a limit's or breaker's stored value that does not decode (Queue.flow_damage)


@dataclass(frozen=True)
class StateCount:
    state: str  # the State value (URLs, data)
    label: str  # what people call it
    count: Count


@dataclass(frozen=True)
class Recent:
    """Jobs that finished in a state in the last minute and the last hour."""

    state: str
    label: str
    last_minute: Count
    last_hour: Count


@dataclass(frozen=True)
class WorkerRow:
    info: WorkerInfo
    heartbeat_age: float  # seconds since its last report
    uptime: float

    @property
    def heartbeat_age_text(self) -> str:
        return duration(self.heartbeat_age)

    @property
    def uptime_text(self) -> str:
        return duration(self.uptime)


@dataclass(frozen=True)
class Unserved:
    """A queue that holds waiting or scheduled jobs and that no live worker takes jobs from."""

    queue: str
    waiting: Count
    scheduled: Count


@dataclass(frozen=True)
class BreakerRow:
    key: str
    state: str  # a BreakerState value, or DAMAGED
    failures: int | str
    threshold: int | str
    recovery_timeout: float
    seconds_to_trial: float | None
    damage: str | None = None  # why its stored value does not decode (then it is ignored for admission)

    @property
    def state_text(self) -> str:
        if self.damage is not None:
            return f"{DAMAGED}, ignored: {self.damage}"
        return self.state.replace("_", " ")  # "half open"

    @property
    def trial_text(self) -> str:
        return "" if self.seconds_to_trial is None else duration(self.seconds_to_trial)


@dataclass(frozen=True)
class LimitRow:
    key: str
    rate: str
    remaining: float | None
    retry_after: float

    @property
    def retry_after_text(self) -> str:
        return duration(self.retry_after)


def recent(queue: Queue, state: State, now: float, *, limit: int | None = None) -> Recent:
    """Jobs in ``state`` (done or failed) that finished within a minute and an hour of ``now``. Done jobs
    are listed by finish time, so the walk stops at the first older than an hour; dead letters are listed by
    job id, so their walk looks at the newest ``limit`` and the count is a lower bound when there are more."""
    minute = hour = 0
    scan = Scan(limit=RECENT_LIMIT if limit is None else limit)
    for job in matching(queue, state, Filters(), newest_first=True, scan=scan):
        age = now - (job.finished_at or 0.0)
        if age > HOUR and state is State.DONE:
            scan.stopped_after = None  # the rest are older still: the count is exact
            break
        hour += age <= HOUR
        minute += age <= MINUTE
    exact = scan.stopped_after is None
    return Recent(state.value, LABELS[state], Count(minute, exact), Count(hour, exact))


def snapshot(queue: Queue, now: float) -> dict[str, Any]:
    """The dashboard's data (the template context of its panels)."""
    stats = queue.stats()
    damage = queue.flow_damage()  # limits and breakers whose stored value does not decode: shown as such
    breakers = [
        BreakerRow(
            key,
            summary["state"],
            summary["failures"],
            summary["threshold"],
            summary["recovery_timeout"],
            summary["seconds_to_trial"],
        )
        for key, summary in queue.circuit_breakers().items()
    ]
    breakers += [
        BreakerRow(key, DAMAGED, "—", "—", 0.0, None, why) for key, why in damage["circuit_breakers"].items()
    ]
    breakers.sort(key=lambda row: row.key)
    limits = [
        LimitRow(key, str(rate), queue.remaining(key), queue.retry_after(key))
        for key, rate in queue.rate_limits().items()
    ]
    limits += [
        LimitRow(key, f"{DAMAGED}, ignored: {why}", None, 0.0) for key, why in damage["rate_limits"].items()
    ]
    limits.sort(key=lambda row: row.key)
    workers = [
        WorkerRow(info, max(0.0, now - info.last_heartbeat), max(0.0, now - info.started_at))
        for info in sorted(queue.workers(), key=lambda info: (info.host, info.pid, info.worker_id))
    ]
    queue_counts = queue.queue_counts()
    periodic_rows = periodic.rows(queue, now)
    holder = periodic.leader(queue) if periodic_rows else None  # shown only with the periodic tasks
    return {
        "chart": throughput_chart(queue, now),
        "periodic": periodic_rows,
        "scheduler_leader": holder,
        "scheduler_since": None if holder is None else when(holder.since),
        "unserved": unserved(queue_counts, [row.info for row in workers]),
        "states": [StateCount(state.value, LABELS[state], Count(stats[state.value])) for state in State],
        "total": Count(stats["total"]),
        "cancelled": Count(stats.get("cancelled", 0)),  # dead letters that are cancels (within failed)
        "cancelled_type": CANCELLED,
        "queues": {
            name: {state: Count(value) for state, value in counts.items()}
            for name, counts in queue_counts.items()
        },
        "shards": [
            [Count(shard_counts.get(state.value, 0)) for state in State]
            for shard_counts in queue.shard_stats()
        ],
        "recent": [recent(queue, State.DONE, now), recent(queue, State.FAILED, now)],
        "recent_limit": f"{RECENT_LIMIT:,}",
        "workers": workers,
        "breakers": breakers,
        "limits": limits,
        "concurrency_limits": queue.concurrency_limits(),  # key -> {"running", "waiting"}
        "labels": [LABELS[state] for state in State],
    }


def throughput_chart(queue: Queue, now: float) -> chart.Chart:
    """The last hour's throughput and lag (``engine/throughput.py``), minutes in the current time zone. A
    store that cannot give its samples (a PostgreSQL database not migrated since they came) draws none."""
    try:
        points = history(queue)
    except QueueError:
        points = per_minute([], minute_of(now))
    return chart.render(points, label=_local_minute)


def _local_minute(minute: int) -> str:
    return timezone.localtime(when(minute * 60.0)).strftime("%H:%M")


def unserved(queue_counts: dict[str, dict[str, int]], workers: list[WorkerInfo]) -> list[Unserved]:
    """The queues with waiting or scheduled jobs that none of the live ``workers`` takes jobs from (a worker
    whose ``queues`` is None takes every queue)."""
    return [
        Unserved(
            name, Count(queue_counts[name].get("pending", 0)), Count(queue_counts[name].get("scheduled", 0))
        )
        for name in serving.unserved(queue_counts, workers)  # the rule queue_health applies too
    ]
