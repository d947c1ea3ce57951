"""``queue_list --where args.NAME:VALUE`` / ``meta.KEY:VALUE``: jobs whose argument or metadata value is the
one given. Unindexed: a walk of the listing (of ``--status``, or of ``--tag``'s jobs through the tag index)
testing each job, which stops after ``--scan-limit`` jobs examined (100,000) and says where to go on from,
rather than running until it has looked at the whole store."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from ..engine import Job
from .common import (
    engine_errors,
    id_text,
    job_dict,
    jobs_table,
    open_queue,
    parse_status,
    readable_job,
    to_json,
)

BATCH = 500  # jobs asked of the engine at a time


def by_where(command: Any, options: dict[str, Any]) -> None:
    from ..admin.fieldsearch import field_of, matches  # only here: the admin's import costs a start-up

    fields = []
    for word in options["where"]:
        found = field_of(word)
        if found is None:
            raise CommandError(f"--where {word!r}: give args.NAME:VALUE or meta.KEY:VALUE")
        fields.append(found)
    if options["status"] is None and not options["tag"]:
        raise CommandError("--where needs --status (the state whose jobs are walked) or --tag")
    state = None if options["status"] is None else parse_status(options["status"])
    queue = open_queue(create=False)
    limit, bound = options["limit"], options["scan_limit"]
    found_jobs: list[Job] = []
    examined, cursor, stopped = 0, options["after"], False
    with engine_errors():
        while len(found_jobs) < limit:
            size = min(BATCH, bound - examined)
            if size <= 0:
                stopped = True
                break
            where = {"queue": options["queue"], "name": options["task"], "after": cursor, "limit": size}
            if options["tag"]:
                batch = queue.tagged(*options["tag"], state=state, **where)
            else:
                assert state is not None
                batch = queue.jobs(state, newest_first=options["newest_first"], **where)
            for job in batch:
                examined += 1
                cursor = job.job_id
                if all(matches(job, field, decrypt=options["decrypt"]) for field in fields):
                    found_jobs.append(readable_job(job, options["decrypt"]))
                    if len(found_jobs) >= limit:
                        break
            if len(batch) < size:
                break
    more = len(found_jobs) >= limit or stopped
    next_after = cursor if more else None
    if options["json"]:
        data = {"where": options["where"], "count": len(found_jobs), "examined": examined, "stopped": stopped}
        out = {**data, "next_after": None if next_after is None else id_text(next_after)}
        command.stdout.write(to_json({**out, "jobs": [job_dict(job) for job in found_jobs]}))
        return
    if found_jobs:
        command.stdout.write(jobs_table(found_jobs))
    footer = f"{len(found_jobs)} job{'s' if len(found_jobs) != 1 else ''} matched, {examined:,} examined"
    if stopped:
        footer += f"; stopped at the scan limit ({bound:,}): go on with --after {next_after}"
    elif more:
        footer += f"; more may follow: --after {next_after}"
    command.stdout.write(footer + ".")
