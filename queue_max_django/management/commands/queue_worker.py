"""``manage.py queue_worker``: run worker processes over the store until stopped (or, with --burst, done)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import get_config
from ...engine import QueueError
from ...worker import WorkerOptionError, earlystop, run_worker
from ...worker.launch import make_launcher
from ...worker.logs import configure_logging
from ...worker.options import from_config, parse_autoscale
from ...worker.startup import open_waiting, preload, startup_stop, stopped
from ..base import QueueCommand
from ..common import non_negative_float

logger = logging.getLogger("queue_max_django.worker")


class Command(QueueCommand):
    help = (
        "Run the queue's workers: a supervisor starts worker processes (each with threads that claim and run "
        "jobs) and replaces any that dies. SIGTERM or Ctrl-C finishes running jobs first; a second one stops "
        "at once. Defaults come from QUEUE_MAX['WORKER']."
    )
    _stop = threading.Event()  # set by SIGTERM or SIGINT during start-up (worker/startup.py)

    # Each phase of the start-up looks at the stop (``stopped``): once it is set, the command ends with
    # status 0 having started nothing (or, past the fork server's start, nothing that outlives it).
    def execute(self, *args: Any, **options: Any) -> str | None:
        with startup_stop() as self._stop:  # before the system checks run: a stop then is graceful too
            if stopped("command", self._stop):
                return None
            return super().execute(*args, **options)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--processes", type=int, help="Worker processes (default: one per CPU this process can use)."
        )
        parser.add_argument("--threads", type=int, help="Threads per process (default: 1).")
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="Serve this queue (repeat for several; default: every queue).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once nothing is waiting, running or due within --burst-wait.",
        )
        parser.add_argument(
            "--burst-wait",
            type=non_negative_float,
            metavar="S",
            help="With --burst: wait for jobs due within S seconds.",
        )
        parser.add_argument("--max-jobs", type=int, metavar="N", help="Replace a process after N jobs.")
        parser.add_argument(
            "--max-memory",
            type=int,
            metavar="MB",
            dest="max_memory_mb",
            help="Replace a process past MB of RssAnon.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=non_negative_float,
            metavar="S",
            help="Seconds running jobs get to finish on stop (default 30).",
        )
        parser.add_argument(
            "--cancel-grace",
            type=non_negative_float,
            metavar="S",
            help="Seconds a cancelled running job gets to stop before its process is ended (default 10).",
        )
        parser.add_argument(
            "--worker-id", help="This command's id in the worker registry (default: HOST-PID)."
        )
        parser.add_argument(
            "--no-scheduler", action="store_true", help="Never enqueue periodic tasks from here."
        )
        parser.add_argument(
            "--autoscale",
            metavar="MIN,MAX",
            help="Threads per process follow the waiting jobs between MIN and MAX.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if stopped("checks", self._stop):
            return
        verbosity = int(options["verbosity"])
        try:
            worker_options = from_config(
                get_config().worker,
                processes=options["processes"],
                threads=options["threads"],
                queues=tuple(options["queues"]) if options["queues"] else None,
                burst=options["burst"] or None,
                burst_wait=options["burst_wait"],
                max_jobs=options["max_jobs"],
                max_memory_mb=options["max_memory_mb"],
                shutdown_timeout=options["shutdown_timeout"],
                cancel_grace=options["cancel_grace"],
                worker_id=options["worker_id"],
                scheduler=False if options["no_scheduler"] else None,
                autoscale=parse_autoscale(options["autoscale"]) if options["autoscale"] else None,
                verbosity=verbosity,
            )
        except WorkerOptionError as exc:
            raise CommandError(str(exc)) from None
        configure_logging(verbosity)
        if stopped("options", self._stop):
            return
        preload()
        launcher = make_launcher(worker_options.processes)  # the fork server forks here: no store is open
        try:
            if stopped("launcher", self._stop):
                return
            queue = open_waiting(self._stop)
            if queue is None:
                return  # stopped while waiting for the store
            if stopped("store", self._stop):
                queue.close()
                return
            if worker_options.queues is not None and queue.queues is not None:
                unknown = sorted(set(worker_options.queues) - set(queue.queues))
                if unknown:
                    served = ", ".join(sorted(queue.queues))
                    raise CommandError(
                        f"unknown queue(s) {', '.join(unknown)}: QUEUE_MAX['QUEUES'] lists {served}"
                    )
            earlystop.reached("supervisor")  # run_worker takes the signals over, then looks at the stop
            code = run_worker(queue, worker_options, launcher, stopped=self._stop)
        except WorkerOptionError as exc:  # a lease time the worker cannot renew
            raise CommandError(str(exc)) from None
        except QueueError as exc:
            raise CommandError(f"the store cannot be used: {exc}") from None
        finally:
            launcher.close()
        if code:
            raise SystemExit(code)
