"""``manage.py queue_health``: exit 0 when the queue is healthy, 1 with a one-line reason when it is not, for
container health checks: a worker heartbeat recent enough (serving each ``--queue`` named), and optionally
the oldest waiting job young enough (``--max-lag``)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import Queue
from ...engine.stores.types import WorkerInfo
from ..base import QueueCommand
from ..common import engine_errors, open_queue, printable, to_json

DEFAULT_HEARTBEAT_WITHIN = 60.0  # seconds: a worker reports every few seconds (at most 17 s apart under load)


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 (e.g. 60 or 2.5)")
    return value


@dataclass
class Health:
    """What the check found: ``reason`` is None when healthy, else the first failure, in one line."""

    workers: int  # with a heartbeat within the limit
    newest_heartbeat_age: float | None  # seconds since the most recent heartbeat of any registered worker
    lag: dict[str, float] = field(default_factory=dict)  # queue -> its oldest waiting job's age (seconds)
    reason: str | None = None


def check(
    queue: Queue, *, heartbeat_within: float, max_lag: float | None, queues: list[str] | None
) -> Health:
    """Read the worker registry and the queues' lag once, and judge them."""
    now = queue.now()
    registered = queue.workers(include_dead=True)
    live = [w for w in registered if now - w.last_heartbeat <= heartbeat_within]
    newest = min((now - w.last_heartbeat for w in registered), default=None)
    ages = queue.pending_ages()
    lag = ages if not queues else {name: ages[name] for name in queues if name in ages}
    health = Health(len(live), None if newest is None else max(0.0, newest), lag)
    health.reason = _worker_problem(live, registered, newest, heartbeat_within, queues) or _lag_problem(
        lag, max_lag
    )
    return health


def _worker_problem(
    live: list[WorkerInfo],
    registered: list[WorkerInfo],
    newest: float | None,
    within: float,
    queues: list[str] | None,
) -> str | None:
    if not live:
        if newest is None:
            return "no worker is registered in this store (is queue_worker running?)"
        return f"no worker heartbeat within {within:g} s (the newest is {newest:.1f} s old)"
    for name in queues or ():
        if not any(w.queues is None or name in w.queues for w in live):
            return f"no live worker serves the queue {printable(name)!r} ({len(live)} live serve others)"
    return None


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


class Command(QueueCommand):
    help = (
        "Exit 0 when the job queue is healthy, 1 with a one-line reason when not (for container health "
        "checks): a worker heartbeat within --heartbeat-within seconds (serving each --queue given), and "
        "with --max-lag, no waiting job older than that."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--heartbeat-within",
            type=seconds,
            default=DEFAULT_HEARTBEAT_WITHIN,
            metavar="SECONDS",
            help=f"A worker must have reported within SECONDS (default {DEFAULT_HEARTBEAT_WITHIN:g}).",
        )
        parser.add_argument(
            "--max-lag",
            type=seconds,
            metavar="SECONDS",
            help="Also fail when a queue's oldest waiting (pending) job has waited longer than SECONDS.",
        )
        parser.add_argument(
            "--queue",
            action="append",
            metavar="NAME",
            help="Check this queue only (repeat for several): a live worker must serve it, and --max-lag "
            "looks at it alone.",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of a line.")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue(create=False)
        with engine_errors():
            health = check(
                queue,
                heartbeat_within=options["heartbeat_within"],
                max_lag=options["max_lag"],
                queues=options["queue"],
            )
        if options["json"]:
            self.stdout.write(to_json({"ok": health.reason is None, "store": queue.path, **vars(health)}))
        elif health.reason is None:
            oldest = max(health.lag.values(), default=0.0)
            newest = health.newest_heartbeat_age or 0.0
            self.stdout.write(
                f"OK: {health.workers} live worker(s), the newest heartbeat {newest:.1f} s old; "
                f"the oldest waiting job has waited {oldest:.1f} s."
            )
        if health.reason is not None:
            raise CommandError(f"unhealthy: {health.reason}")
