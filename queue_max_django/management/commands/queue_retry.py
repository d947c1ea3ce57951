"""``manage.py queue_retry``: dead letters back to waiting, one by id or all (of a shard, of a task). A dead
letter quarantined as corrupted (``Job.corrupted``) is never retried: nothing is left to run. ``--json``: one
object, ``{"retried": N, "job_ids": [...], "skipped": [{"job_id": ..., "reason": ...}]}`` (``job_ids`` with
``--job-id`` only: ``--all`` may retry millions)."""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import Job, Queue, State
from ..base import QueueCommand
from ..common import check_shard, engine_errors, id_text, job_id, open_queue, to_json, unknown_task_warning
from ..jobs import job_ids, not_failed


class Command(QueueCommand):
    help = (
        "Put dead letters (failed jobs) back to waiting with their retries reset: one job with --job-id, "
        "or every failed job with --all (of one shard with --shard, of one task with --task)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--job-id", type=job_id, metavar="ID", help="Retry this failed job.")
        which.add_argument("--all", action="store_true", help="Retry every failed job (see --shard, --task).")
        parser.add_argument(
            "--shard", type=int, metavar="N", help="With --all: only the failed jobs of this shard."
        )
        parser.add_argument(
            "--task", help="With --all: only the failed jobs of this task (its registered name)."
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print one JSON object: {"retried": N, "skipped": [{"job_id", "reason"}, ...]} (and the '
            '"job_ids" retried, with --job-id).',
        )

    def missing(self, options: dict[str, Any]) -> str | None:
        if options["job_id"] is not None or options["all"]:
            return None
        shard, task = options["shard"], options["task"]
        if shard is None and task is None:
            return "say which jobs to retry: --job-id ID, or --all."
        given = [name for name, value in (("--shard", shard), ("--task", task)) if value is not None]
        what = "every failed job" + (f" of task {task!r}" if task is not None else "")
        what += f" in shard {shard}" if shard is not None else ""
        argv = (f" --shard {shard}" if shard is not None else "") + (
            f" --task {shlex.quote(task)}" if task is not None else ""
        )
        return (
            f"--all is missing: {' and '.join(given)} only narrow{'s' if len(given) == 1 else ''} down "
            f"--all. Add it to retry {what} (queue_retry --all{argv}), or give --job-id ID alone."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job_id, shard, task = options["job_id"], options["shard"], options["task"]
        if job_id is not None and (shard is not None or task is not None):
            raise CommandError("--shard and --task go with --all, not with --job-id.")
        queue = open_queue()
        with engine_errors():
            if job_id is not None:
                self._retry_one(queue, job_id, as_json=options["json"])
                return
            check_shard(queue, shard)
            corrupted: list[Job] = []  # never retried: nothing is left to run (Job.corrupted)

            def retriable(job: Job) -> bool:
                if job.corrupted:
                    corrupted.append(job)
                return not job.corrupted

            ids = job_ids(queue, State.FAILED, shard=shard, task=task, keep=retriable)
            gone = [each for each in ids if not queue.requeue(each)]  # someone else requeued or purged it
        retried = len(ids) - len(gone)
        warning = None if ids or corrupted else unknown_task_warning(task, "failed jobs")
        if warning is not None:
            self.stderr.write(f"Warning: {warning}")
        if options["json"]:
            skipped = [_skipped(job.job_id, f"corrupted: {job.error}") for job in corrupted]
            skipped += [_skipped(each, "not failed any more (retried or deleted meanwhile)") for each in gone]
            self.stdout.write(to_json({"retried": retried, "skipped": skipped}))
            return
        self.stdout.write(f"Retried {retried} failed job{'' if retried == 1 else 's'}.")
        if corrupted:
            many = len(corrupted)
            self.stdout.write(
                f"Skipped {many} failed job{'' if many == 1 else 's'} quarantined as corrupted (error type "
                f"Corrupted): the data stored did not decode, so nothing is left to run. Read them with "
                f"queue_show, delete them with queue_delete."
            )

    def _retry_one(self, queue: Queue, job_id: int, *, as_json: bool) -> None:
        if queue.requeue(job_id):
            if as_json:
                self.stdout.write(to_json({"retried": 1, "job_ids": [id_text(job_id)], "skipped": []}))
            else:
                self.stdout.write(f"Retried 1 failed job ({job_id}).")
            return
        job = queue.job(job_id)
        if job is not None and job.corrupted:
            why = (
                f"job {job_id} was quarantined as corrupted ({job.error}): its data did not decode, so "
                f"nothing is left to run and it cannot be retried. Delete it (queue_delete {job_id})."
            )
        else:
            why = not_failed(queue, job_id, "only dead letters can be retried")
        if as_json:
            self.stdout.write(to_json({"retried": 0, "job_ids": [], "skipped": [_skipped(job_id, why)]}))
        raise CommandError(why)


def _skipped(job_id: int, reason: str) -> dict[str, str | None]:
    return {"job_id": id_text(job_id), "reason": reason}
