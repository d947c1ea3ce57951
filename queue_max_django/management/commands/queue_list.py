"""``manage.py queue_list``: the jobs in one state, a page at a time."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...engine import Job, State
from ..base import QueueCommand
from ..bytags import by_tags
from ..common import (
    STATUS_HELP,
    engine_errors,
    id_text,
    job_dict,
    job_id,
    open_queue,
    parse_status,
    positive_int,
    readable_job,
    status_missing,
    table,
    to_json,
    unknown_task_warning,
    when,
)
from ..where import by_where

ERROR_WIDTH = 60  # characters of a failed job's error shown in the table


class Command(QueueCommand):
    help = (
        "List the jobs in one state (claim order for pending, ETA order for scheduled, finish order for "
        "done, enqueue order for running and failed), or the jobs of a tag (--tag, in any state unless "
        '--status is given, newest first). --json prints one JSON object with a "jobs" list.'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status", metavar="STATE", help=f"Which jobs to list: {STATUS_HELP}. Optional with --tag."
        )
        parser.add_argument(
            "--tag",
            action="append",
            metavar="TAG",
            help="Only jobs with this tag, found through the store's tag index (repeat it: jobs with all of "
            "them). Newest first; --after pages on.",
        )
        parser.add_argument(
            "--where",
            action="append",
            metavar="FIELD:VALUE",
            help="Only jobs whose argument (args.NAME:VALUE) or metadata value (meta.KEY:VALUE) is VALUE "
            "(repeat it: all of them). Unindexed: a walk of --status's jobs (or --tag's) that stops after "
            "--scan-limit jobs.",
        )
        parser.add_argument(
            "--scan-limit",
            type=positive_int,
            default=100_000,
            metavar="N",
            help="With --where: examine at most this many jobs (default 100,000), then say where to go on.",
        )
        parser.add_argument("--queue", help="Only jobs of this queue.")
        parser.add_argument("--task", help="Only jobs of this task (its registered name).")
        parser.add_argument(
            "--limit", type=positive_int, default=50, metavar="N", help="At most this many (default 50)."
        )
        parser.add_argument(
            "--after",
            type=job_id,
            metavar="JOB_ID",
            help="The next page: the jobs after this one (the last id of the previous page).",
        )
        parser.add_argument("--newest-first", action="store_true", help="Reverse the order.")
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead of a table.")
        parser.add_argument("--decrypt", action="store_true",
                            help="Show encrypted jobs' arguments, result, metadata and errors decrypted "
                                 "(default: (encrypted)).")  # fmt: skip

    def missing(self, options: dict[str, Any]) -> str | None:
        return None if options["tag"] or options["where"] else status_missing(options)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["where"]:
            return by_where(self, options)
        if options["tag"]:
            return by_tags(self, options)
        missing = status_missing(options)  # --status is required without --tag: argparse cannot say so
        if missing is not None:
            self.create_parser("manage.py", "queue_list").error(missing)
        state = parse_status(options["status"])
        queue = open_queue(create=False)
        with engine_errors():
            jobs = queue.jobs(
                state,
                queue=options["queue"],
                name=options["task"],
                after=options["after"],
                limit=options["limit"],
                newest_first=options["newest_first"],
            )
        more = len(jobs) == options["limit"]
        jobs = [readable_job(job, options["decrypt"]) for job in jobs]  # encrypted ones: (encrypted)
        warning = None if jobs else unknown_task_warning(options["task"], f"{state.value} jobs")
        if warning is not None:
            self.stderr.write(f"Warning: {warning}")
        if options["json"]:
            next_after = id_text(jobs[-1].job_id) if more else None
            data = {"status": state.value, "count": len(jobs), "next_after": next_after}
            self.stdout.write(to_json({**data, "jobs": [job_dict(job) for job in jobs]}))
            return
        if not jobs:
            self.stdout.write(f"No {state.value} jobs.")
            return
        self.stdout.write(table(*_columns(state, jobs)))
        footer = f"{len(jobs)} {state.value} job{'s' if len(jobs) != 1 else ''}"
        if more:
            footer += f"; more may follow: --after {jobs[-1].job_id}"
        self.stdout.write(footer + ".")


def _columns(state: State, jobs: list[Job]) -> tuple[list[str], list[list[Any]]]:
    headers = ["ID", "QUEUE", "TASK", "PRIORITY", "ATTEMPTS", "ENQUEUED (UTC)"]
    rows: list[list[Any]] = [
        [
            job.job_id,
            job.queue,
            job.name,
            job.priority,
            f"{job.attempts}/{job.max_retries + 1}",  # attempts made / allowed, as the admin shows them
            when(job.enqueued_at),
        ]
        for job in jobs
    ]
    extra: dict[State, tuple[str, Any]] = {
        State.SCHEDULED: ("ETA (UTC)", lambda job: when(job.eta)),
        State.RUNNING: ("STARTED (UTC)", lambda job: when(job.started_at)),
        State.DONE: ("FINISHED (UTC)", lambda job: when(job.finished_at)),
        State.FAILED: ("ERROR", lambda job: _short(f"{job.error_type or 'Error'}: {job.error or ''}")),
    }
    if state in extra:
        title, value = extra[state]
        headers.append(title)
        for row, job in zip(rows, jobs, strict=True):
            row.append(value(job))
    return headers, rows


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 1] + "…"
