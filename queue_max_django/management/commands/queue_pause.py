"""``manage.py queue_pause QUEUE... [--task NAME] [--until DURATION] [--reason TEXT]``: stop every worker
from taking the jobs of these queues (or of one task in them), at once, until ``queue_resume`` (or for
DURATION)."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser

from ...coordination.pausing import DURATION_HELP, command_author, parse_duration, warnings
from ...engine import Pause
from ..base import QueueCommand
from ..common import engine_errors, open_queue, to_json, when


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def said(pause: Pause) -> str:
    what = f"task {pause.task!r} in queue {pause.queue!r}" if pause.task else f"queue {pause.queue!r}"
    until = "until resumed" if pause.until is None else f"until {when(pause.until)} UTC"
    return f"paused {what} {until}" + (f": {pause.reason}" if pause.reason else "")


class Command(QueueCommand):
    help = (
        "Pause queues, or one task in them: no worker, on any machine, takes their jobs until "
        "queue_resume (or --until passes). Running jobs finish; scheduled jobs come due and wait. A queue "
        "that never had a job is paused with a warning; a name that cannot be a queue's is an error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="+", metavar="QUEUE", help="The queues to pause.")
        parser.add_argument("--task", metavar="NAME", help="Pause only this task's jobs in these queues.")
        parser.add_argument(
            "--until",
            type=duration,
            metavar="DURATION",
            help=f"End the pause by itself after DURATION: {DURATION_HELP}.",
        )
        parser.add_argument(
            "--reason", default="", help="Why (shown with the pause; at most 500 characters)."
        )
        parser.add_argument(
            "--json", action="store_true", help='Print one JSON object (a list under "paused").'
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue()
        with engine_errors():
            by = command_author("queue_pause")
            made = queue.pause(options["queues"], task=options["task"], duration=options["until"],
                               reason=options["reason"] or None, by=by)  # fmt: skip
            warned = warnings(queue, options["queues"], options["task"])
        if options["json"]:
            self.stdout.write(to_json({"paused": [pause.as_dict() for pause in made], "warnings": warned}))
            return
        for text in warned:
            self.stderr.write(f"warning: {text}")
        for pause in made:
            self.stdout.write(said(pause))
