"""``manage.py queue_stats``: jobs per state, queue and shard, live workers, breakers and rate limits."""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any

from django.core.management.base import CommandParser

from ...engine import Queue
from ..base import QueueCommand
from ..common import STATES, check_shard, id_text, open_queue, positive_int, table, to_json, when

CLEAR_SCREEN = "\x1b[H\x1b[2J"
MIN_WATCH = 0.5  # seconds: a shorter --watch redraws faster than anyone reads, and only burns CPU and output
sleep = time.sleep  # the pause between two redraws (tests replace it)


def watch_seconds(text: str) -> float:
    """``--watch``: a finite number of seconds, ``MIN_WATCH`` at least."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not MIN_WATCH <= value < math.inf:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an interval to redraw at: give a number of seconds from {MIN_WATCH:g} up "
            f"(a shorter one redraws faster than anyone can read)"
        )
    return value


def collect(queue: Queue, shard: int | None) -> dict[str, Any]:
    """The figures as one JSON-ready dict: state counts and ``total`` at the top level (of one shard with
    ``shard``), then ``shards``, ``queues``, ``workers``, ``circuit_breakers``, ``rate_limits`` and
    ``paused`` (each pause in force: queue, task, paused_at, until, reason, by),
    ``concurrency_limits``."""
    rows = [{"shard": index, **counts} for index, counts in enumerate(queue.shard_stats())]
    if shard is not None:
        rows = [rows[shard]]
    # "cancelled": the dead letters that are cancels (Job.cancelled), counted within "failed".
    out: dict[str, Any] = {
        key: sum(row.get(key, 0) for row in rows) for key in (*STATES, "cancelled", "total")
    }
    out.update(store=queue.path, shard_count=queue.shard_count)
    if shard is not None:
        out["shard"] = shard
    out["shards"] = rows
    out["queues"] = queue.queue_counts()
    out["workers"] = [
        {**dataclasses.asdict(worker), "current_jobs": [id_text(job) for job in worker.current_jobs]}
        for worker in queue.workers()
    ]
    out["circuit_breakers"] = queue.circuit_breakers()
    out["rate_limits"] = {
        key: {"rate": str(rate), "remaining": queue.remaining(key)}
        for key, rate in queue.rate_limits().items()
    }
    out["paused"] = [pause.as_dict() for pause in queue.pauses()]
    out["concurrency_limits"] = queue.concurrency_limits()
    return out


def render(stats: dict[str, Any]) -> str:
    """The figures of ``collect()`` as tables for people."""
    where = f"shard {stats['shard']} of " if "shard" in stats else ""
    sharded = stats["shard_count"] > 1  # a table of one shard would repeat the totals
    parts = [f"Store {stats['store']} ({where}{stats['shard_count']} shard{'s' if sharded else ''})"]
    counts = [(s, stats[s]) for s in STATES]
    counts.insert(STATES.index("failed") + 1, ("cancelled", stats["cancelled"]))  # (within failed)
    parts.append(table(["STATE", "JOBS"], [*counts, ("total puts", stats["total"])]))
    queues = [(name, c["pending"], c["scheduled"], c["running"]) for name, c in stats["queues"].items()]
    title = "Queues (all shards)" if sharded else "Queues"
    parts.append(_section(title, ["QUEUE", "PENDING", "SCHEDULED", "RUNNING"], queues))
    if sharded:
        shards = [[row["shard"], *(row[s] for s in STATES), row["total"]] for row in stats["shards"]]
        parts.append(_section("Shards", ["SHARD", *(s.upper() for s in STATES), "TOTAL"], shards))
    fields = ("worker_id", "pid", "host", "threads", "queues", "current_jobs", "processed", "failed")
    workers = [
        [w[f] for f in fields] + [when(w["started_at"]), when(w["last_heartbeat"])] for w in stats["workers"]
    ]
    for row in workers:
        row[4], row[5] = ",".join(row[4] or ["*"]), len(row[5])
    headers = ["WORKER", "PID", "HOST", "THREADS", "QUEUES", "RUNNING", "PROCESSED", "FAILED"]
    headers += ["STARTED (UTC)", "LAST HEARTBEAT (UTC)"]
    title = f"Workers ({len(workers)} live; figures as of each one's last heartbeat)"  # reports lag a beat
    parts.append(_section(title, headers, workers))
    breakers = [
        (key, b["state"], b["failures"], b["threshold"], b["recovery_timeout"], b["seconds_to_trial"])
        for key, b in stats["circuit_breakers"].items()
    ]
    headers = ["KEY", "STATE", "FAILURES", "THRESHOLD", "TIMEOUT (S)", "TRIAL IN (S)"]
    parts.append(_section("Circuit breakers", headers, breakers))
    limits = [(key, limit["rate"], limit["remaining"]) for key, limit in stats["rate_limits"].items()]
    parts.append(_section("Rate limits", ["KEY", "RATE", "TOKENS"], limits))
    paused = [
        (p["queue"], p["task"] or "(all)", when(p["paused_at"]),
         when(p["until"]) if p["until"] else "resumed", p["by"] or "-", p["reason"] or "-")
        for p in stats["paused"]
    ]  # fmt: skip
    headers = ["QUEUE", "TASK", "SINCE (UTC)", "UNTIL (UTC)", "BY", "REASON"]
    parts.append(_section("Paused", headers, paused))
    held = [(key, c["running"], c["waiting"]) for key, c in stats["concurrency_limits"].items()]
    parts.append(_section("Concurrency limits", ["KEY", "RUNNING", "WAITING"], held))
    return "\n\n".join(parts)


def _section(title: str, headers: list[str], rows: list[Any]) -> str:
    return f"{title}\n{table(headers, rows) if rows else '(none)'}"


class Command(QueueCommand):
    help = (
        "Show the job queue's figures: jobs per state, per queue and per shard, live workers, circuit "
        "breakers, rate-limit tokens and paused queues. --json prints one JSON object whose top level "
        "holds the state counts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of tables.")
        parser.add_argument(
            "--shard", type=int, metavar="N", help="Count the jobs of this shard only (0-based)."
        )
        parser.add_argument(
            "--watch",
            type=watch_seconds,
            metavar="SECONDS",
            help=f"Redraw every SECONDS ({MIN_WATCH:g} at least) until Ctrl-C.",
        )
        parser.add_argument("--iterations", type=positive_int, help=argparse.SUPPRESS)  # bounds --watch

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue(create=False)
        check_shard(queue, options["shard"])
        watch, iterations = options["watch"], options["iterations"]
        drawn = 0
        try:
            while True:
                stats = collect(queue, options["shard"])
                if options["json"]:
                    self.stdout.write(to_json(stats))
                else:
                    clear = CLEAR_SCREEN if watch is not None and self.stdout.isatty() else ""
                    self.stdout.write(clear + render(stats))
                self.stdout.flush()  # a redraw reaches a pipe (| grep, | jq) now, not when the buffer fills
                drawn += 1
                if watch is None or (iterations is not None and drawn >= iterations):
                    return
                if not options["json"]:
                    self.stdout.write("")
                sleep(watch)
        except KeyboardInterrupt:  # Ctrl-C ends --watch; that is not an error
            self.stdout.write("")
