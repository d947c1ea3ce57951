"""``manage.py queue_transfer --from NAME --to NAME``: move every job that is not running, the pauses, the
rate limits and the breakers from one store to another (``engine/transfer.py`` does the moving; the names are
``conf/transferstores.py``'s). ``--dry-run`` counts what would move; ``--json`` prints the report as one
JSON object."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser

from ...conf import transferstores
from ...engine import Queue
from ...engine.transfer import BATCH, Refused, Report, transfer_queues
from ..base import QueueCommand
from ..common import engine_errors, open_queue, positive_int, to_json


class Command(QueueCommand):
    help = (
        "Move the jobs (waiting, scheduled, dead letters, results), pauses, kept schedules, rate limits and "
        "breakers of one "
        "store to another: --from and --to name 'default' (QUEUE_MAX) or a key of QUEUE_MAX_TRANSFER. "
        "Refuses to start while a job of the source runs or a worker is registered there. Killed and run "
        "again, it finishes the move."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        named = "'default' or a key of QUEUE_MAX_TRANSFER"
        parser.add_argument("--from", dest="source", required=True, metavar="NAME",
                            help=f"The store to move from: {named}.")  # fmt: skip
        parser.add_argument("--to", dest="target", required=True, metavar="NAME",
                            help=f"The store to move to: {named}.")  # fmt: skip
        parser.add_argument("--dry-run", action="store_true",
                            help="Count what would move (per state), write nothing.")  # fmt: skip
        parser.add_argument("--batch", type=positive_int, default=BATCH, metavar="N",
                            help=f"Jobs per batch: one write to each store ({BATCH}).")  # fmt: skip
        parser.add_argument("--json", action="store_true", help="Print the report as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["source"] == options["target"]:
            raise CommandError(f"--from and --to name the same store ({options['source']!r})")
        source = self._open(options["source"], source=True)
        target = self._open(options["target"], source=False)
        try:
            with engine_errors():
                try:
                    report = transfer_queues(
                        source, target, dry_run=options["dry_run"], batch=options["batch"]
                    )
                except Refused as exc:
                    raise CommandError(f"nothing was moved: {exc}") from None
        finally:
            for queue, name in ((source, options["source"]), (target, options["target"])):
                if name != transferstores.DEFAULT_NAME:
                    queue.close()
        if options["json"]:
            self.stdout.write(
                to_json({"from": options["source"], "to": options["target"], **report.as_dict()})
            )
        else:
            self.stdout.write(_text(report, options["source"], options["target"]))

    @staticmethod
    def _open(name: str, *, source: bool) -> Queue:
        if name == transferstores.DEFAULT_NAME:
            return open_queue(create=not source)
        with engine_errors():
            try:
                return transferstores.open_named(name, source=source)
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from None


def _text(report: Report, source: str, target: str) -> str:
    verb = "would move" if report.dry_run else "moved"
    states = ", ".join(f"{n} {state}" for state, n in report.moved.items() if n) or "no jobs"
    lines = [f"{source} -> {target}: {verb} {report.jobs} job(s) ({states})"]
    if report.already_there:
        lines.append(f"{report.already_there} job(s) were in the target already (an earlier run): removed "
                     "from the source")  # fmt: skip
    lines.append(f"{verb} {report.pauses} pause(s), {report.schedules} kept schedule(s), "
                 f"{report.limits} rate limit(s), {report.breakers} breaker(s) (a limit starts full, "
                 "a breaker closed)")  # fmt: skip
    if report.unique_keys:
        lines.append(f"{verb} {report.unique_keys - report.unique_dropped} unique key(s) with their jobs")
    if report.unique_dropped:
        lines.append(f"{report.unique_dropped} unique key(s) stay behind: the target's shard for the key is "
                     "not its job's (a put of that key there is not a duplicate of it)")  # fmt: skip
    if report.left_in_source:
        lines.append(f"{report.left_in_source} job(s) stay in the source (running, or unreadable)")
    return "\n".join(lines)
