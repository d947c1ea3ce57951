"""``manage.py queue_check``: walk the whole store and report any inconsistency (exit 1 if there is one).
On the PostgreSQL store that is its counter rows against its job rows, and a lease for every running job."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import store_class
from ..base import QueueCommand
from ..common import STATES, engine_errors, load_config, open_queue, printable, to_json


class Command(QueueCommand):
    help = (
        "Check the job store: every record, index and counter of every shard must agree (the engine's "
        "verify(); reads only, O(jobs)); on the PostgreSQL store, the counters must match the job rows and "
        "every running job must have a lease. Exits with status 1 and lists the problems if anything is off."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help='Print {"ok": ..., "problems": [...]} instead of a report.'
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind = store_class(load_config()).kind
        queue = open_queue(create=False)
        with engine_errors():
            problems = queue.verify()
            jobs = sum(queue.stats()[state] for state in STATES)
        if options["json"]:
            data = {"ok": not problems, "store": queue.path, "shards": queue.shard_count, "jobs": jobs}
            self.stdout.write(to_json({**data, "problems": problems}))
        elif not problems and kind == "postgresql":
            self.stdout.write(
                f"The PostgreSQL store {queue.path} is consistent ({jobs:,} jobs): its counters match its "
                f"job rows and every running job has a lease."
            )
        elif not problems:
            self.stdout.write(
                f"The store {queue.path} is consistent ({queue.shard_count} shards, {jobs:,} jobs)."
            )
        else:
            self.stdout.write(f"The store {queue.path} has {len(problems)} problem(s):")
            self.stdout.write("\n".join(f"  {printable(problem)}" for problem in problems))
        if problems:
            keep = "the database (pg_dump)" if kind == "postgresql" else "the data directory"
            raise CommandError(
                f"{len(problems)} problem(s) in the store. Stop the workers and keep a copy of {keep} "
                f"before repairing anything; `queue_list` and `queue_purge` can remove bad jobs."
            )
