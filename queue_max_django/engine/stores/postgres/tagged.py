"""The PostgreSQL store's listing by tag (engine/tags.py): a job's tags are in its ``metadata`` (jsonb) under
``tags.TAGS_KEY``, and a partial GIN index on that expression on each of the two job tables
(``tag_schema.py``, schema version 11; only tagged jobs are in it) finds a tag's jobs without reading any
other row. PostgreSQL keeps the index in the statements that write, move and delete rows (put, a job's end,
delete, purge, retention), so there is nothing else to keep. A listing is one statement: the rows of the
first tag (a bitmap scan of the index), filtered by the other tags, the state, queue and task, sorted newest
first by id."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...job import STATE_CODE, Job, State
from ...tags import TAGS_KEY
from .rows import FINISHED, LIVE_AS_FINISHED, as_job
from .tag_schema import TAGGED

if TYPE_CHECKING:
    from .sql import Statements

_LIVE_STATES = (State.PENDING, State.SCHEDULED, State.RUNNING)


def tagged(
    store: Statements,
    tags: tuple[str, ...],
    *,
    state: State | None,
    queue: str | None,
    name: str | None,
    after: int | None,
    limit: int,
) -> list[Job]:
    """Up to ``limit`` jobs with every one of ``tags``, newest first (by id), with ids below ``after``."""
    params: dict[str, object] = {"tags": json.dumps(list(tags)), "limit": limit, "queue": queue, "name": name}
    where = [TAGGED, f"(metadata -> '{TAGS_KEY}') @> %(tags)s::jsonb"]  # TAGGED: the partial index's
    if state is not None:
        where.append(f"state = {STATE_CODE[state]}")
    if queue is not None:
        where.append("queue = %(queue)s")
    if name is not None:
        where.append("name = %(name)s")
    if after is not None:
        where.append("id < %(after)s")
        params["after"] = after
    condition = " AND ".join(where)
    # "id + 0": not the primary key's order, which a LIMIT tempts the planner into (walking every job back
    # from the newest, testing each, until it has ``limit``: the whole table for a tag of old jobs), but the
    # tag index's rows, sorted: the cost is the tag's jobs.
    each = f"WHERE {condition} ORDER BY id + 0 DESC LIMIT %(limit)s)"
    parts = []
    if state is None or state in _LIVE_STATES:
        parts.append(f"(SELECT {LIVE_AS_FINISHED} FROM qm_jobs {each}")
    if state is None or state not in _LIVE_STATES:
        parts.append(f"(SELECT {FINISHED} FROM qm_finished {each}")
    sql = f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS found ORDER BY 1 DESC LIMIT %(limit)s"
    return [as_job(row) for row in store.rows(sql, params)]
