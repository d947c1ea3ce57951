"""``manage.py queue_show``: one job by id, every field of its snapshot."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...engine import Job, State
from ...engine.workflows import WORKFLOW_KEY
from ..base import QueueCommand
from ..common import (
    engine_errors,
    id_text,
    job_dict,
    job_id,
    open_queue,
    printable,
    readable_job,
    to_json,
    when,
)
from ..jobs import get_job

FIRST = (
    "job_id",
    "state",
    "task",
    "queue",
    "shard",
    "priority",
)  # then the rest in the order of Job's fields
TIMES = ("enqueued_at", "started_at", "finished_at", "eta", "lease_until")  # unix seconds, shown as UTC
AS_JSON = ("payload", "result", "partition_key", "metadata")  # stored values: shown as JSON (bytes: base64)


def job_lines(job: Job, *, cancel_requested: bool = False) -> list[str]:
    """Every field of ``job`` (as ``job_dict`` names them: its name is ``task``, and ``shard`` is added),
    one a line, for people; the traceback last, under its own heading. ``cancel_requested``: a running
    job's cancel was requested (a line after its state says so)."""
    fields = job_dict(job)
    fields.pop("cancelled")  # said after the state, for a cancelled job only
    data: dict[str, Any] = {}
    for key in FIRST:
        data[key] = fields.pop(key)
        if key == "state" and cancel_requested:  # why a job asked to stop still runs
            data["cancel"] = "requested: its worker stops it at its next heartbeat"
        if key == "state" and job.cancelled:  # a dead letter by its store, but an outcome someone asked for
            data["cancelled"] = cancelled_text(job)
        if key == "task" and node_of_job(job) is not None:  # a step of a workflow: which, and how to see it
            workflow_id, index = node_of_job(job)  # type: ignore[misc]
            data["workflow"] = f"{workflow_id}, node {index} (manage.py queue_workflow {workflow_id})"
    if job.unique is not None:  # the key it was put with (kept in its metadata too)
        data["unique_key"] = str(job.unique)
    for key, value in fields.items():  # attempts as the admin and queue_list count them, where retries were
        if key == "retries":
            data["attempts"] = attempts_text(job)
        elif key == "tags":  # kept in its metadata too (under "_tags")
            data[key] = ", ".join(value) if value else "none"
        elif key not in ("max_retries", "attempts", "attempts_allowed"):
            data[key] = value
    traceback = data.pop("traceback")
    width = max(len(key) for key in data)
    lines = []
    for key, value in data.items():
        first, *more = _value(key, value).split("\n")  # only the errors take more than a line
        lines += [f"{key:<{width}}  {first}", *(" " * (width + 2) + line for line in more)]
    if traceback:
        lines += ["", "traceback (of the last failed attempt):"]
        lines += [f"  {printable(line)}" for line in traceback.rstrip("\n").split("\n")]
    return lines


def node_of_job(job: Job) -> tuple[int, int] | None:
    """(workflow id, node index) of a job that is a step of a workflow (its metadata says), else None."""
    link = job.metadata.get(WORKFLOW_KEY)
    if isinstance(link, list) and len(link) == 2 and all(type(part) is int for part in link):
        return link[0], link[1]
    return None


def cancelled_text(job: Job) -> str:
    """``by alice at 2026-12-03 14:02:07 UTC (not a failure)``: who cancelled a cancelled job and when."""
    note = job.cancel_note
    if note is None:
        return "yes (not a failure; who and when were not noted)"
    by = f"by {note.by} " if note.by else ""
    return f"{by}at {when(note.at)} UTC (not a failure)"


def attempts_text(job: Job) -> str:
    """``2 of 4 allowed (the first and 3 retries)``: attempts made and allowed, as the admin says them."""
    retries = job.max_retries
    allowed = "no retries" if not retries else f"the first and {retries} retr{'y' if retries == 1 else 'ies'}"
    return f"{job.attempts} of {retries + 1} allowed ({allowed})"


def _value(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in TIMES:
        moment = when(value)
        return moment if moment == "-" else f"{moment} UTC"
    if key in AS_JSON:
        return printable(to_json(value))
    if key == "timeout":
        return f"{value:g} s"
    if key == "worker_ids":
        return ", ".join(printable(worker) for worker in value) or "-"
    if key == "errors":  # (type, text) of each failed attempt, oldest first
        shown = [printable(f"{kind or 'Error'}: {text or ''}") for kind, text in value]
        return "\n".join(f"{number}. {each}" for number, each in enumerate(shown, start=1)) or "-"
    return printable(str(value))


class Command(QueueCommand):
    help = (
        "Show one job by id: every field of its snapshot (state, task, queue, arguments, result, attempts, "
        "errors, times, workers), the traceback of its last failure last. --json prints them as one JSON "
        "object, as queue_list --json prints each job."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "job_id",
            type=job_id,
            metavar="JOB_ID",
            help='The job\'s id, as queue_list prints it (or "quoted", as --json writes it).',
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead.")
        parser.add_argument("--decrypt", action="store_true",
                            help="Show encrypted jobs' arguments, result, metadata and errors decrypted "
                                 "(default: (encrypted)).")  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue(create=False)
        with engine_errors():
            job = get_job(queue, options["job_id"])
            marked = job.state is State.RUNNING and queue.cancel_requested(job.job_id)
        job = readable_job(job, options["decrypt"])  # an encrypted job's data: (encrypted), or opened
        if options["json"]:
            data = job_dict(job)  # as queue_list prints it, and for a workflow's step, which one
            found = node_of_job(job)
            if found is not None:
                data["workflow"] = {"workflow_id": id_text(found[0]), "node": found[1]}
            self.stdout.write(to_json(data))
        else:
            self.stdout.write("\n".join(job_lines(job, cancel_requested=marked)))
