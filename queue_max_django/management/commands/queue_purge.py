"""``manage.py queue_purge``: delete the jobs in one state (never running ones), after a confirmation.
``--json``: one object saying what was asked, how many jobs matched and how many were removed."""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import Job, Queue, State
from ..base import QueueCommand
from ..common import engine_errors, non_negative_float, open_queue, parse_status, status_missing, to_json
from ..jobs import job_ids

DAY = 86400.0  # seconds


def matching(queue: Queue, state: State, older_than: float | None, name: str | None) -> list[int]:
    """The ids of the jobs ``purge``/``cancel`` would remove: in ``state`` (of queue ``name``), finished
    (done/failed) or enqueued (pending/scheduled) at least ``older_than`` seconds ago."""
    cutoff = None if older_than is None else time.time() - older_than
    return job_ids(
        queue, state, queue_name=name, keep=None if cutoff is None else lambda j: _stamp(j) <= cutoff
    )


def _stamp(job: Job) -> float:
    finished = job.finished_at if job.state in (State.DONE, State.FAILED) else None
    return job.enqueued_at if finished is None else finished


class Command(QueueCommand):
    help = (
        "Delete the jobs in one state (not running ones), optionally only those older than --days and of one "
        "--queue. Asks for confirmation on a terminal unless --yes; refuses without --yes elsewhere."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status",
            metavar="STATE",
            required=True,
            help="Which jobs to delete: pending, scheduled, done or failed.",
        )
        parser.add_argument(
            "--days",
            type=non_negative_float,
            metavar="N",
            help="Only jobs finished (done, failed) or enqueued (pending, scheduled) "
            "at least this many days ago.",
        )
        parser.add_argument("--queue", help="Only jobs of this queue.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print one JSON object: {"status", "queue", "days", "dry_run", "cancelled" (answered no), '
            '"matched", "removed"} (a question on a terminal goes to standard error).',
        )

    def missing(self, options: dict[str, Any]) -> str | None:
        return status_missing(options)

    def handle(self, *args: Any, **options: Any) -> None:
        state = parse_status(options["status"])
        if state is State.RUNNING:
            raise CommandError(
                "running jobs cannot be purged: they belong to live workers (an expired lease "
                "brings a dead worker's job back by itself)."
            )
        name, days, dry_run = options["queue"], options["days"], options["dry_run"]
        ask = not options["yes"] and not dry_run
        if ask and not sys.stdin.isatty():
            raise CommandError(
                "refusing to purge without --yes: stdin is not a terminal, so nobody can "
                "confirm. Add --yes (or --dry-run to count first)."
            )
        older_than = None if days is None else days * DAY
        queue = open_queue()
        with engine_errors():
            ids = None if name is None and older_than is None else matching(queue, state, older_than, name)
            count = queue.stats()[state.value] if ids is None else len(ids)
            what = _jobs(count, state, name) + ("" if days is None else f" older than {_days(days)}")
            confirmed = (
                not ask
                or not count
                or self._confirm(f"Delete {what}? This cannot be undone. [y/N] ", to_stderr=options["json"])
            )
            if dry_run or not confirmed or not count:
                removed = 0
            elif name is None:
                removed = queue.purge(state, older_than=older_than)
            else:  # one job at a time, each only if it is still in that state
                removed = sum(queue.delete(job_id, state=state) for job_id in ids or ())
        if options["json"]:
            asked = {"status": state.value, "queue": name, "days": days, "dry_run": dry_run}
            data = {**asked, "cancelled": not confirmed, "matched": count, "removed": removed}
            self.stdout.write(to_json(data))
        elif dry_run:
            self.stdout.write(f"Would remove {what} (dry run: nothing removed).")
        elif not confirmed:
            self.stdout.write("Purge cancelled: nothing removed.")
        else:
            self.stdout.write(f"Removed {_jobs(removed, state, name)}.")

    def _confirm(self, question: str, *, to_stderr: bool) -> bool:
        stream = self.stderr if to_stderr else self.stdout  # --json: standard output holds the JSON only
        stream.write(question, ending="")
        stream.flush()
        return sys.stdin.readline().strip().lower() in ("y", "yes")


def _days(days: float) -> str:
    """``1 day``, ``2.5 days``, ``0 days``."""
    return f"{days:g} day{'' if days == 1 else 's'}"


def _jobs(count: int, state: State, queue: str | None) -> str:
    """``3 failed jobs``, ``1 pending job of queue 'mail'``."""
    return f"{count} {state.value} job{'' if count == 1 else 's'}" + (
        "" if queue is None else f" of queue {queue!r}"
    )
