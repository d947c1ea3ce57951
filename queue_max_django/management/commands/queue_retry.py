"""``manage.py queue_retry``: dead letters (failed jobs) back to waiting, their retries reset."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...engine import Queue, State
from ..common import check_shard, engine_errors, open_queue, positive_int

PAGE = 1000


def failed_ids(queue: Queue, *, shard: int | None, task: str | None) -> list[int]:
    """The ids of every failed job (of ``task``, in ``shard``), read a page at a time before any changes."""
    ids: list[int] = []
    after = None
    while True:
        page = queue.jobs(State.FAILED, name=task, after=after, limit=PAGE)
        ids += [job.job_id for job in page if shard is None or job.shard == shard]
        if len(page) < PAGE:
            return ids
        after = page[-1].job_id


class Command(BaseCommand):
    help = (
        "Put dead letters (failed jobs) back to waiting with their retries reset: one job with --job-id, "
        "or every failed job with --all (of one shard with --shard, of one task with --task)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--job-id", type=positive_int, metavar="ID", help="Retry this failed job.")
        which.add_argument("--all", action="store_true", help="Retry every failed job (see --shard, --task).")
        parser.add_argument(
            "--shard", type=int, metavar="N", help="With --all: only the failed jobs of this shard."
        )
        parser.add_argument(
            "--task", help="With --all: only the failed jobs of this task (its registered name)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        job_id, shard, task = options["job_id"], options["shard"], options["task"]
        if job_id is None and not options["all"]:
            raise CommandError("say which jobs to retry: --job-id ID, or --all.")
        if job_id is not None and (shard is not None or task is not None):
            raise CommandError("--shard and --task go with --all, not with --job-id.")
        queue = open_queue()
        with engine_errors():
            if job_id is not None:
                self._retry_one(queue, job_id)
                return
            check_shard(queue, shard)
            ids = failed_ids(queue, shard=shard, task=task)
            retried = sum(queue.requeue(each) for each in ids)  # False: someone else requeued or purged it
        self.stdout.write(f"Retried {retried} failed job{'' if retried == 1 else 's'}.")

    def _retry_one(self, queue: Queue, job_id: int) -> None:
        if queue.requeue(job_id):
            self.stdout.write(f"Retried 1 failed job ({job_id}).")
            return
        job = queue.job(job_id)
        if job is None:
            raise CommandError(f"no job {job_id}: it never existed, or was purged or vacuumed.")
        raise CommandError(
            f"job {job_id} is {job.state.value}, not failed: only dead letters can be retried."
        )
