"""The PostgreSQL store's listing by tag (engine/tags.py): a job's tags are in its ``metadata`` (jsonb) under
``tags.TAGS_KEY``, and a GIN index on that expression on each of the two job tables (``tag_schema.py``,
schema version 7) finds a tag's jobs without reading any other row. PostgreSQL keeps the index in the
statements that write, move and delete rows (put, a job's end, delete, purge, retention), so there is
nothing else to keep. A listing is one statement: the rows of the tags (a bitmap scan of the index),
filtered by the state, queue and task, newest first by id."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...job import STATE_CODE, Job, State
from ...tags import TAGS_KEY
from .rows import FINISHED, LIVE_AS_FINISHED, as_job

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
    where = [f"(metadata -> '{TAGS_KEY}') @> %(tags)s::jsonb"]
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
    parts = []
    if state is None or state in _LIVE_STATES:
        parts.append(
            f"(SELECT {LIVE_AS_FINISHED} FROM qm_jobs WHERE {condition} ORDER BY id DESC LIMIT %(limit)s)"
        )
    if state is None or state not in _LIVE_STATES:
        parts.append(
            f"(SELECT {FINISHED} FROM qm_finished WHERE {condition} ORDER BY id DESC LIMIT %(limit)s)"
        )
    sql = f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS found ORDER BY 1 DESC LIMIT %(limit)s"
    return [as_job(row) for row in store.rows(sql, params)]
