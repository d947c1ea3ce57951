"""``queue_list --tag``: the jobs that have every tag given, newest first, through the store's tag index
(``Queue.tagged``, engine/tags.py): the cost is the first tag's jobs, never the store's size."""

from __future__ import annotations

from typing import Any

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


def by_tags(command: Any, options: dict[str, Any]) -> None:
    """List the jobs of ``options["tag"]`` (with ``--status``, ``--queue``, ``--task``, ``--after``,
    ``--limit``, ``--json``) to ``command``'s output."""
    tags = options["tag"]
    state = None if options["status"] is None else parse_status(options["status"])
    queue = open_queue(create=False)
    with engine_errors():
        jobs = queue.tagged(
            *tags,
            state=state,
            queue=options["queue"],
            name=options["task"],
            after=options["after"],
            limit=options["limit"],
        )
    more = len(jobs) == options["limit"]
    jobs = [readable_job(job, options["decrypt"]) for job in jobs]  # encrypted ones: (encrypted)
    if options["json"]:
        next_after = id_text(jobs[-1].job_id) if more else None
        data = {"tags": tags, "status": None if state is None else state.value, "count": len(jobs)}
        command.stdout.write(
            to_json({**data, "next_after": next_after, "jobs": [job_dict(job) for job in jobs]})
        )
        return
    what = ("" if state is None else f"{state.value} ") + "jobs tagged " + " and ".join(tags)
    if not jobs:
        command.stdout.write(f"No {what}.")
        return
    command.stdout.write(jobs_table(jobs))
    footer = f"{len(jobs)} {what}, newest first"
    if more:
        footer += f"; more may follow: --after {jobs[-1].job_id}"
    command.stdout.write(footer + ".")
