"""The store's figures as Prometheus metrics: a ``prometheus_client`` Collector over a ``Queue``, read once
per scrape from what the store itself counts (so every process and machine is counted once, whichever
process serves the scrape), rendered in Prometheus's text format through a registry of its own.

``prometheus_client`` is the optional extra ``metrics`` (``queue_max_django[metrics]``): imported when a
scrape is rendered, never when this module is imported (``MissingExtra`` says how to install it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..engine import Queue
from ..engine.throughput import cancel_counts, enqueued_totals, finished_totals

PREFIX = "queue_max"
# Not on the package index: extras come with a checkout or a wheel built from one (docs/quickstart.md).
EXTRA_HINT = "pip install '<checkout or wheel>[metrics]' (or prometheus-client>=0.20)"
BREAKER_STATES = ("closed", "open", "half_open")
QUEUE_STATES = ("pending", "scheduled", "running")  # the states of queue_max_queue_jobs
DEFAULT_QUEUE = "default"  # the queue a job goes to unless told otherwise


def known_queues(configured: Iterable[str] | None, *seen: Iterable[str]) -> list[str]:
    """The queues the per-queue metrics have a sample for, sorted: the configured ``QUEUES`` (or, when any
    name is allowed, ``default``) and every queue met in the store's counts (``seen``), so a queue where
    nothing waits reads 0 instead of no sample (a dashboard shows "No data" for that, and an alert on the
    series never resolves)."""
    names = set(configured) if configured is not None else {DEFAULT_QUEUE}
    for more in seen:
        names.update(more)
    return sorted(names)


class MissingExtra(ImportError):
    """``prometheus_client`` is not installed: install the ``metrics`` extra (``EXTRA_HINT``)."""


def prometheus() -> Any:
    """The ``prometheus_client`` module; ``MissingExtra`` naming the extra when it is not installed."""
    try:
        import prometheus_client
        import prometheus_client.core  # (the metric families; a submodule the package does not import)
    except ImportError as exc:
        raise MissingExtra(
            f"The queue metrics need the prometheus-client library: {EXTRA_HINT} (the 'metrics' extra)."
        ) from exc
    return prometheus_client


class QueueCollector:
    """One scrape's metrics of ``queue`` (a ``prometheus_client`` custom collector: ``collect()`` yields
    metric families, read from the store at that moment)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def describe(self) -> list[Any]:
        return []  # no read of the store when the collector is registered

    def collect(self) -> Iterator[Any]:
        core = prometheus().core
        gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
        q = self.queue
        stats = q.stats()
        now = q.now()

        jobs = gauge(
            f"{PREFIX}_jobs",
            "Jobs in the store per state (done ones until vacuumed; failed: the dead letters that are not "
            "cancels, cancelled: those that are).",
            labels=["state"],
        )
        for state in ("pending", "scheduled", "running", "done", "failed"):
            jobs.add_metric([state], stats[state] - (stats["cancelled"] if state == "failed" else 0))
        jobs.add_metric(["cancelled"], stats["cancelled"])  # dead letters: the failures and the cancels apart
        yield jobs

        counts = q.queue_counts()
        puts = enqueued_totals(q)
        ages = q.pending_ages()
        names = known_queues(q.queues, counts, puts, ages)
        per_queue = gauge(
            f"{PREFIX}_queue_jobs",
            "Waiting, scheduled and running jobs per queue (0 for a known queue with none).",
            labels=["queue", "state"],
        )
        for name in names:
            for state in QUEUE_STATES:
                per_queue.add_metric([name, state], counts.get(name, {}).get(state, 0))
        yield per_queue
        paused = gauge(
            f"{PREFIX}_queue_paused",
            '1 while a queue (task "") or a task of it is paused, 0 for a known queue that is not.',
            labels=["queue", "task"],
        )
        pauses = {(pause.queue, pause.task or ""): 1 for pause in q.pauses()}
        for name in names:
            pauses.setdefault((name, ""), 0)
        for (name, task), value in sorted(pauses.items()):
            paused.add_metric([name, task], value)
        yield paused

        yield counter(f"{PREFIX}_enqueued", "Jobs ever put into the store.", value=stats["total"])
        per_queue_puts = counter(
            f"{PREFIX}_queue_enqueued", "Jobs ever put into each queue.", labels=["queue"]
        )
        for name in names:
            per_queue_puts.add_metric([name], puts.get(name, 0))
        yield per_queue_puts
        done_ever, failed_ever = finished_totals(q)
        _cancelled_now, cancelled_ever = cancel_counts(q)  # cancels are kept as dead letters, not failures
        yield counter(
            f"{PREFIX}_done", "Jobs ever finished successfully (vacuumed ones included).", value=done_ever
        )
        yield counter(
            f"{PREFIX}_failed",
            "Jobs ever dead-lettered (failed for good; purged, deleted and requeued ones included), not "
            "counting cancelled ones.",
            value=failed_ever - cancelled_ever,
        )
        yield counter(
            f"{PREFIX}_cancelled",
            "Jobs ever cancelled while they ran (kept with the dead letters, error Cancelled; purged, "
            "deleted and requeued ones included).",
            value=cancelled_ever,
        )

        duplicates = counter(
            f"{PREFIX}_unique_duplicates",
            "Puts with a unique key that met a job holding it: skipped (nothing stored) or replaced (the "
            "waiting job took the new arguments).",
            labels=["outcome"],
        )
        for outcome, count in q.unique_counts().items():
            duplicates.add_metric([outcome], count)
        yield duplicates

        lag = gauge(
            f"{PREFIX}_oldest_pending_age_seconds",
            "Seconds the oldest waiting job of each queue has been ready to run (0 when none waits).",
            labels=["queue"],
        )
        for name in names:
            lag.add_metric([name], ages.get(name, 0.0))
        yield lag

        workers = [w for w in q.workers() if w.alive(now)]
        yield gauge(f"{PREFIX}_workers", "Worker processes with a recent heartbeat.", value=len(workers))
        done = counter(
            f"{PREFIX}_worker_processed",
            "Jobs each live worker process has finished since it started, as of its last heartbeat.",
            labels=["worker"],
        )
        failed = counter(
            f"{PREFIX}_worker_failed",
            "Failed attempts of each live worker process since it started, as of its last heartbeat.",
            labels=["worker"],
        )
        running = gauge(
            f"{PREFIX}_worker_running_jobs", "Jobs each live worker is running.", labels=["worker"]
        )
        for w in workers:
            done.add_metric([w.worker_id], w.processed)
            failed.add_metric([w.worker_id], w.failed)
            running.add_metric([w.worker_id], len(w.current_jobs))
        yield from (done, failed, running)

        breakers = gauge(
            f"{PREFIX}_circuit_breaker_state",
            "1 for the state each circuit breaker is in (closed, open, half_open), 0 for the others.",
            labels=["key", "state"],
        )
        for key, breaker in q.circuit_breakers().items():
            for state in BREAKER_STATES:
                breakers.add_metric([key, state], 1 if breaker["state"] == state else 0)
        yield breakers

        tokens = gauge(f"{PREFIX}_rate_limit_tokens", "Tokens left in each rate limit.", labels=["key"])
        for key in q.rate_limits():
            remaining = q.remaining(key)
            if remaining is not None:
                tokens.add_metric([key], remaining)
        yield tokens

        workflows = gauge(
            f"{PREFIX}_workflows",
            "Workflows stored per status (running, succeeded, failed, cancelled; ended ones until the vacuum "
            "forgets them).",
            labels=["status"],
        )
        for status, count in q.workflows.counts().items():
            workflows.add_metric([status], count)
        yield workflows
        in_use = q.concurrency_limits()
        for what, text in (("running", "Jobs running under each concurrency limit key."),
                           ("waiting", "Limited jobs waiting, per concurrency limit key.")):  # fmt: skip
            family = gauge(f"{PREFIX}_concurrency_{what}", text, labels=["key"])
            for key, per_key in in_use.items():
                family.add_metric([key], per_key[what])
            yield family


def render(queue: Queue) -> tuple[bytes, str]:
    """The metrics of ``queue`` in Prometheus's text format, through a registry of this scrape's own (the
    process's global registry is left alone). -> (body, content type)."""
    client = prometheus()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(queue))
    return client.generate_latest(registry), client.CONTENT_TYPE_LATEST
