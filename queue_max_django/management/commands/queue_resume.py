"""``manage.py queue_resume QUEUE... [--task NAME]``: lift the pauses of ``queue_pause``; waiting workers
take the jobs at once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ..base import QueueCommand
from ..common import engine_errors, open_queue, to_json


class Command(QueueCommand):
    help = (
        "Resume paused queues (or, with --task, the paused task in them): workers take their jobs again at "
        "once. A queue's own pause and its tasks' pauses are lifted apart. A target that was not paused is "
        "said so; that is not an error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="The queues to resume.")
        parser.add_argument("--task", metavar="NAME", help="Resume only this task's pause in these queues.")
        parser.add_argument(
            "--json",
            action="store_true",
            help='Print one JSON object (lists under "resumed" and "not_paused").',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue()
        task = options["task"]
        with engine_errors():
            lifted = queue.resume(options["queues"], task=task)
        resumed = [pause.queue for pause in lifted]
        not_paused = [name for name in dict.fromkeys(options["queues"]) if name not in resumed]
        if options["json"]:
            data = {"resumed": [pause.as_dict() for pause in lifted], "not_paused": not_paused, "task": task}
            self.stdout.write(to_json(data))
            return
        what = f"task {task!r} in queue" if task else "queue"
        for pause in lifted:
            self.stdout.write(
                f"resumed {what} {pause.queue!r}" + (f" (paused by {pause.by})" if pause.by else "")
            )
        for name in not_paused:
            self.stdout.write(f"{what} {name!r} was not paused: nothing to resume")
