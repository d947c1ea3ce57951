"""``manage.py queue_delete``: delete dead letters by id, each on its own. ``--json``: one object,
``{"deleted": N, "job_ids": [...], "skipped": [{"job_id": ..., "reason": ...}]}``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import State
from ..base import QueueCommand
from ..common import engine_errors, id_text, job_id, open_queue, to_json
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
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print one JSON object: {"deleted": N, "job_ids": [...], "skipped": [{"job_id", '
            '"reason"}, ...]}.',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids = list(dict.fromkeys(options["job_ids"]))  # an id given twice is deleted once
        queue = open_queue()
        deleted: list[int] = []
        refused: dict[int, str] = {}
        with engine_errors():
            for each in ids:
                if queue.delete(each, state=State.FAILED):
                    deleted.append(each)
                else:
                    refused[each] = not_failed(queue, each, "queue_delete deletes dead letters only")
        if options["json"]:
            skipped = [{"job_id": id_text(each), "reason": reason} for each, reason in refused.items()]
            done = [id_text(each) for each in deleted]
            self.stdout.write(to_json({"deleted": len(deleted), "job_ids": done, "skipped": skipped}))
        else:
            self.stdout.write(f"Deleted {len(deleted)} failed job{'' if len(deleted) == 1 else 's'}.")
        if refused:
            listed = "\n".join(f"  {reason}" for reason in refused.values())
            raise CommandError(f"{len(refused)} of {len(ids)} jobs not deleted:\n{listed}")
