"""``manage.py queue_delete``: delete dead letters by id, each on its own."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import State
from ..base import QueueCommand
from ..common import engine_errors, job_id, open_queue
from ..jobs import not_failed


class Command(QueueCommand):
    help = (
        "Delete dead letters (failed jobs) by id, for good, with their payload and error. Each id is deleted "
        "on its own: an id that is not a failed job (it does not exist, or is waiting, running or done) is "
        "left as it is and named in the error, and the command then exits with status 1."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "job_ids",
            nargs="+",
            type=job_id,
            metavar="JOB_ID",
            help='A failed job\'s id, as queue_list prints it (or "quoted", as --json writes it).',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids = list(dict.fromkeys(options["job_ids"]))  # an id given twice is deleted once
        queue = open_queue()
        refused: list[str] = []
        with engine_errors():
            for each in ids:
                if not queue.delete(each, state=State.FAILED):
                    refused.append(not_failed(queue, each, "queue_delete deletes dead letters only"))
        deleted = len(ids) - len(refused)
        self.stdout.write(f"Deleted {deleted} failed job{'' if deleted == 1 else 's'}.")
        if refused:
            listed = "\n".join(f"  {reason}" for reason in refused)
            raise CommandError(f"{len(refused)} of {len(ids)} jobs not deleted:\n{listed}")
