"""``manage.py queue_schedule list|add|pause|resume|remove [--json]``: the schedules kept in the store, beside
the ones declared in code (``@periodic_task``), without a deploy. The checks and the changes are
``scheduling/editing.py``'s; this module parses and prints."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...coordination.pausing import DURATION_HELP, command_author, parse_duration
from ...engine import Queue
from ...scheduling import editing
from ...scheduling.entries import entries
from ..base import QueueCommand
from ..common import engine_errors, open_queue, table, to_json, when


def json_value(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(
                f"give a JSON {'list' if kind is list else 'object'}, not {text}"
            )
        return value

    return parse


def until_time(text: str) -> float:
    """A duration from now (``2h``) or a time (``2026-12-24T18:00``, UTC unless it says its zone)."""
    try:
        return time.time() + parse_duration(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration ({DURATION_HELP}) nor a time (2026-12-24T18:00, UTC by default)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


class Command(QueueCommand):
    help = (
        "List, add, pause, resume and remove schedules. Schedules declared in code (@periodic_task) are "
        "listed and can be paused and resumed, never edited or removed here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        listing = actions.add_parser("list", help="Every schedule, code-declared and kept in the store.")
        add = actions.add_parser("add", help="Keep a new schedule in the store.")
        add.add_argument("name", help="The schedule's name (unique).")
        add.add_argument("task", help="A registered task's name (module.function).")
        add.add_argument(
            "--args",
            dest="call_args",
            type=json_value(list),
            default=[],
            help="Positional arguments: a JSON list.",
        )
        add.add_argument(
            "--kwargs",
            dest="call_kwargs",
            type=json_value(dict),
            default={},
            help="Named arguments: a JSON object.",
        )
        every = add.add_mutually_exclusive_group(required=True)
        every.add_argument("--interval", type=float, metavar="SECONDS", help="Tick every SECONDS.")
        every.add_argument("--cron", metavar="EXPR", help='A cron expression: "*/15 * * * *".')
        add.add_argument("--tz", metavar="ZONE", help="The cron expression's time zone (default UTC).")
        add.add_argument("--queue", help="The queue of its jobs (default: the task's).")
        add.add_argument("--priority", type=int, help="The priority of its jobs (default: the task's).")
        add.add_argument("--misfire-grace-time", type=float, default=60.0, metavar="SECONDS",
                         help="How late a missed tick is still enqueued (default 60).")  # fmt: skip
        add.add_argument(
            "--coalesce", action="store_true", help="Of several missed ticks, enqueue the latest."
        )
        add.add_argument("--disabled", action="store_true", help="Keep it disabled until resumed.")
        pause = actions.add_parser("pause", help="Pause a schedule (code-declared ones too).")
        pause.add_argument("name")
        pause.add_argument("--until", type=until_time, metavar="WHEN",
                           help=f"Until a time, or for a duration ({DURATION_HELP}); "
                                "without it, disabled until resumed.")  # fmt: skip
        resume = actions.add_parser("resume", help="Resume a paused or disabled schedule.")
        resume.add_argument("name")
        remove = actions.add_parser("remove", help="Remove a schedule kept in the store.")
        remove.add_argument("name")
        for sub in (listing, add, pause, resume, remove):
            sub.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue()
        action = options["action"]
        by = command_author("queue_schedule")
        with engine_errors():
            try:
                if action == "list":
                    return self._list(queue, options["json"])
                name = options["name"]
                if action == "add":
                    made = editing.build(
                        name, options["task"], args=options["call_args"], kwargs=options["call_kwargs"],
                        interval=options["interval"], cron=options["cron"], tz=options["tz"],
                        queue=options["queue"], priority=options["priority"],
                        misfire_grace_time=options["misfire_grace_time"], coalesce=options["coalesce"],
                        enabled=not options["disabled"], by=by, served=queue.queues,
                    )  # fmt: skip
                    editing.add(queue, made)
                    said = f"added schedule {name!r}"
                elif action == "pause":
                    editing.pause(queue, name, until=options["until"], by=by)
                    ends = options["until"]
                    said = f"paused {name!r} " + (
                        "until resumed" if ends is None else f"until {when(ends)} UTC"
                    )
                elif action == "resume":
                    editing.resume(queue, name, by=by)
                    said = f"resumed {name!r}"
                else:
                    editing.remove(queue, name)
                    said = f"removed schedule {name!r}"
            except editing.ScheduleError as exc:
                raise CommandError(str(exc)) from None
        if options["json"]:
            found = [item.as_dict(time.time()) for item in entries(queue) if item.name == name]
            self.stdout.write(to_json({"action": action, "schedule": found[0] if found else {"name": name}}))
        else:
            self.stdout.write(said)

    def _list(self, queue: Queue, as_json: bool) -> None:
        now = time.time()
        found = entries(queue)
        if as_json:
            self.stdout.write(to_json({"schedules": [item.as_dict(now) for item in found]}))
            return
        rows = []
        for item in found:
            runs = item.next_runs(now, 1)
            status = item.status(now)
            if status == "paused":
                status = f"paused until {when(item.paused_until)}"
            arguments = "" if item.declared else json.dumps([item.args, item.kwargs])
            rows.append([item.name, item.kind, item.task, arguments, item.schedule_text, status,
                         when(runs[0].timestamp()) if runs else "-"])  # fmt: skip
        if not rows:
            self.stdout.write("no schedules")
            return
        self.stdout.write(
            table(["name", "kind", "task", "arguments", "schedule", "status", "next run (UTC)"], rows)
        )
