"""A claim of the next jobs on the PostgreSQL store, for ``PostgresStore.claim``: the statements it runs
(``claim_rows``) and the jobs it hands over (``delivered``), a payload that does not decode quarantined."""

from __future__ import annotations

from typing import Any

from ...errors import QueueCorrupted
from ..types import Claimed, CorruptedJobQuarantined
from . import job_sql, upkeep
from .rows import CLAIMED_COLUMNS, as_claimed, micros
from .schema import PENDING
from .sql import Statements


def claim_rows(
    store: Statements, params: dict[str, Any], filtered: bool, floor: bool, guarded: bool
) -> list[Any]:
    """The rows of ``job_sql.CLAIM`` (its variant for a queue filter, a priority floor and the pauses'
    guard), run on this thread's connection. A claim never passes over a job whose ETA passed for one of
    lower priority (the caller's view of the ETAs may be stale): the statement takes nothing while one is
    due (``job_sql.NONE_DUE``), which it tells by its ETA column; then due jobs become pending first and the
    claim runs again, in one round trip: the two statements go out in one pipeline, each its own
    transaction, in order. So a claim is one statement, and two more only when a scheduled job is due."""
    conn = store.db.connection()
    with store.db.guard(conn):
        rows: list[Any] = conn.execute(
            job_sql.variant(job_sql.CLAIM, filtered, floor, guarded, True), params
        ).fetchall()
        if rows[0][1] is None or rows[0][1] > params["now"]:
            return rows
        promote = store.params(now=params["now"], batch=upkeep.BATCH)
        with conn.pipeline():
            promoting = conn.execute(upkeep.PROMOTE, promote)
            claiming = conn.execute(job_sql.variant(job_sql.CLAIM, filtered, floor, guarded), params)
        if promoting.fetchone()[0]:
            store.hints.local()
        rows = claiming.fetchall()
    return rows


def delivered(store: Statements, rows: list[Any], alone: bool, now: float, token: bytes) -> list[Claimed]:
    """The jobs of a claim's ``rows``. As on LMDB: a job whose payload does not decode is quarantined; the
    jobs before it are the claim, those after it go back (uncharged) for the next claim, and if it came
    first the claim raises ``CorruptedJobQuarantined``."""
    claimed: list[Claimed] = []
    broken: tuple[int, str] | None = None
    back: list[int] = []
    at = job_sql.CLAIM_JOBS_AT
    for row in rows:
        if row[at] is None:
            continue
        data = row[at : at + CLAIMED_COLUMNS]
        if broken is not None:
            back.append(data[0])
            continue
        try:
            claimed.append(as_claimed(data, alone))
        except QueueCorrupted as exc:
            broken = (data[0], str(exc))
    if broken is not None:
        upkeep.quarantine(store, micros(now), *broken)
        for job_id in back:
            store.one(job_sql.RELEASE, store.params(id=job_id, token=token, state=PENDING, ready=None))
        if back:
            store.hints.local()
        if not claimed:
            raise CorruptedJobQuarantined(*broken)
    return claimed
