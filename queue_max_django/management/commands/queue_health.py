"""``manage.py queue_health``: exit 0 when the queue is healthy, 1 with a one-line reason when it is not, for
container health checks: a worker heartbeat recent enough (of the store's workers, or of one replica's
with ``--worker-id``/``--this-host``), each ``--queue`` named served, no queue that no live worker serves
with a job waiting past ``--unserved-after``, and optionally the oldest waiting job young enough
(``--max-lag``). The judging is ``management/health.py``'s."""

from __future__ import annotations

import argparse
import math
import socket
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ..base import QueueCommand
from ..common import engine_errors, open_queue, positive_int, to_json
from ..health import DEFAULT_HEARTBEAT_WITHIN, DEFAULT_UNSERVED_AFTER, Replica, check


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 (e.g. 60 or 2.5)")
    return value


class Command(QueueCommand):
    help = (
        "Exit 0 when the job queue is healthy, 1 with a one-line reason when not (for container health "
        "checks): a worker heartbeat within --heartbeat-within seconds (of one replica's workers with "
        "--worker-id or --this-host, serving each --queue given), no job waiting longer than "
        "--unserved-after in a queue no live worker serves, and with --max-lag, no waiting job older than "
        "that."
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
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--worker-id",
            metavar="ID",
            help="Judge one replica, the queue_worker started with --worker-id ID: each of its processes "
            "must report (a liveness probe), whatever other workers of the store do.",
        )
        which.add_argument(
            "--this-host",
            action="store_true",
            help="Judge the workers running on this host (its hostname: a Kubernetes pod's name) as "
            "--worker-id judges one.",
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            metavar="N",
            help="With --worker-id or --this-host: at least N of its worker processes must report.",
        )
        parser.add_argument(
            "--unserved-after",
            type=seconds,
            default=DEFAULT_UNSERVED_AFTER,
            metavar="SECONDS",
            help="Fail when a job has waited longer than SECONDS in a queue no live worker serves (default "
            f"{DEFAULT_UNSERVED_AFTER:g}); sooner, or when judging one replica, it is a warning.",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of a line.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["processes"] is not None and not (options["worker_id"] or options["this_host"]):
            raise CommandError("--processes goes with --worker-id or --this-host.")
        replica = None
        if options["worker_id"] is not None:
            replica = Replica(worker_id=options["worker_id"])
        elif options["this_host"]:
            replica = Replica(host=socket.gethostname())
        queue = open_queue(create=False)
        with engine_errors():
            health = check(
                queue,
                heartbeat_within=options["heartbeat_within"],
                max_lag=options["max_lag"],
                queues=options["queue"],
                replica=replica,
                processes=options["processes"],
                unserved_after=options["unserved_after"],
            )
        if options["json"]:
            judged = None if replica is None else str(replica)
            data = {"ok": health.reason is None, "store": queue.path, "replica": judged, **vars(health)}
            self.stdout.write(to_json(data))
        else:
            for warning in health.warnings:
                self.stderr.write(f"Warning: {warning}")
            if health.reason is None:
                oldest = max(health.lag.values(), default=0.0)
                newest = health.newest_heartbeat_age or 0.0
                whose = "" if replica is None else f" of {replica}"
                self.stdout.write(
                    f"OK: {health.workers} live worker(s){whose}, the newest heartbeat {newest:.1f} s old; "
                    f"the oldest waiting job has waited {oldest:.1f} s."
                )
        if health.reason is not None:
            raise CommandError(f"unhealthy: {health.reason}")
