"""``manage.py queue_retry``: dead letters back to waiting, one by id or all (of a shard, of a task). A dead
letter quarantined as corrupted (``Job.corrupted``) is never retried: nothing is left to run."""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import Job, Queue, State
from ..base import QueueCommand
from ..common import check_shard, engine_errors, job_id, open_queue, unknown_task_warning
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
                self._retry_one(queue, job_id)
                return
            check_shard(queue, shard)
            corrupted: list[int] = []  # never retried: nothing is left to run (Job.corrupted)

            def retriable(job: Job) -> bool:
                if job.corrupted:
                    corrupted.append(job.job_id)
                return not job.corrupted

            ids = job_ids(queue, State.FAILED, shard=shard, task=task, keep=retriable)
            retried = sum(queue.requeue(each) for each in ids)  # False: someone else requeued or purged it
        warning = None if ids or corrupted else unknown_task_warning(task, "failed jobs")
        if warning is not None:
            self.stderr.write(f"Warning: {warning}")
        self.stdout.write(f"Retried {retried} failed job{'' if retried == 1 else 's'}.")
        if corrupted:
            many = len(corrupted)
            self.stdout.write(
                f"Skipped {many} failed job{'' if many == 1 else 's'} quarantined as corrupted (error type "
                f"Corrupted): the data stored did not decode, so nothing is left to run. Read them with "
                f"queue_show, delete them with queue_delete."
            )

    def _retry_one(self, queue: Queue, job_id: int) -> None:
        if not queue.requeue(job_id):
            job = queue.job(job_id)
            if job is not None and job.corrupted:
                raise CommandError(
                    f"job {job_id} was quarantined as corrupted ({job.error}): its data did not decode, so "
                    f"nothing is left to run and it cannot be retried. Delete it (queue_delete {job_id})."
                )
            raise CommandError(not_failed(queue, job_id, "only dead letters can be retried"))
        self.stdout.write(f"Retried 1 failed job ({job_id}).")
