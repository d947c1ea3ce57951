"""``manage.py queue_cancel JOB_ID...``: cancel jobs in any state, and say for each what happened."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import CancelOutcome
from ..base import QueueCommand
from ..common import engine_errors, id_text, job_id, open_queue, to_json

BY = "queue_cancel command"  # who cancelled, as the job's metadata notes it (``Job.cancel_note``)

SAID = {
    CancelOutcome.REMOVED: "removed: it was waiting or scheduled, and never runs",
    CancelOutcome.REQUESTED: (
        "cancel requested: it is running; its worker stops it at its next heartbeat (then it is "
        "cancelled: kept with the dead letters, error Cancelled, not counted as a failure)"
    ),
    CancelOutcome.FINISHED: "not cancelled: it already finished (nothing to cancel, nothing changed)",
    CancelOutcome.MISSING: "not found: no such job (purged, vacuumed, cancelled before it ran, or never one)",
}


class Command(QueueCommand):
    help = (
        "Cancel jobs by id, whatever their state: a waiting or scheduled job is removed; a running one is "
        "marked 'cancel requested' and its worker stops it (a dead letter with the error Cancelled); a "
        "finished one is left as it is. Exit status 1 if any id named no job."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job_ids", nargs="+", type=job_id, metavar="JOB_ID", help="The jobs to cancel.")
        parser.add_argument(
            "--json", action="store_true", help='Print one JSON object (a list under "jobs").'
        )
        parser.add_argument(
            "--reason",
            default="",
            help="Why, noted with who cancelled a running job ('queue_cancel command: REASON').",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ids: list[int] = list(dict.fromkeys(options["job_ids"]))  # each once, in the order given
        queue = open_queue()
        with engine_errors():
            by = BY + (f": {options['reason']}" if options["reason"] else "")
            outcomes = [(each, queue.request_cancel(each, by=by)) for each in ids]
        if options["json"]:
            counts = {outcome.value: 0 for outcome in CancelOutcome}
            for _each, outcome in outcomes:
                counts[outcome.value] += 1
            jobs = [{"job_id": id_text(each), "outcome": outcome.value} for each, outcome in outcomes]
            self.stdout.write(to_json({**counts, "jobs": jobs}))
        else:
            for each, outcome in outcomes:
                self.stdout.write(f"job {each}: {SAID[outcome]}")
        missing = [each for each, outcome in outcomes if outcome is CancelOutcome.MISSING]
        if missing:
            raise CommandError(
                f"{len(missing)} of {len(ids)} job id(s) named no job: " + " ".join(map(str, missing))
            )
