"""The in-memory store's listing by tag (engine/tags.py): ``Space.tags`` holds each tag's job ids, sorted,
entered by ``Space.add`` and removed by ``Space.remove`` (delete, purge, retention, a cancel of a waiting
job), so a listing walks that tag's ids only, newest first."""

from __future__ import annotations

import bisect

from ...job import Job, State
from ...tags import stored_tags
from .reads import as_job
from .space import Space


def tagged(
    space: Space,
    tags: tuple[str, ...],
    *,
    state: State | None,
    queue: str | None,
    name: str | None,
    after: int | None,
    limit: int,
) -> list[Job]:
    """Up to ``limit`` jobs with every one of ``tags``, newest first (by id), with ids below ``after``."""
    ids = space.tags.get(tags[0], [])
    end = len(ids) if after is None else bisect.bisect_left(ids, after)
    others = set(tags[1:])
    out: list[Job] = []
    for at in range(end - 1, -1, -1):
        row = space.rows.get(ids[at])
        if row is None or (state is not None and row.state is not state):
            continue
        if (queue is not None and row.queue != queue) or (name is not None and row.name != name):
            continue
        if others and not others.issubset(stored_tags(row.metadata)):
            continue
        out.append(as_job(row))
        if len(out) >= limit:
            break
    return out
