"""The PostgreSQL store's cancel requests (``engine/cancels.py``): the ``qm_cancels`` table (schema.py) marks
running jobs "cancel requested", apart from their rows in ``qm_jobs`` (a claim, a heartbeat and a completion
never write it). ``CANCEL`` removes a waiting job or marks a running one in one statement; ``HEARTBEAT``
renews a lease and reads the mark in one. A mark stays while its job is stored (in ``qm_jobs`` or, done or
a dead letter, in ``qm_finished``): ``requeue`` drops it, and every statement that removes jobs (``CANCEL``,
delete, purge, vacuum: upkeep.py) drops theirs with them (``UNMARK_GONE``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...cancels import CancelOutcome
from ...errors import StoreError
from ...job import CANCEL_KEY
from .rows import micros
from .schema import PENDING, RUNNING, SCHEDULED
from .sql import tally

if TYPE_CHECKING:
    from .sql import Statements

TRIES = 5  # a job claimed between the statement's snapshot and its DELETE: the statement runs again

HEARTBEAT = f"""
WITH upd AS (UPDATE qm_jobs SET lease_us = %s WHERE id = %s AND state = {RUNNING} AND token = %s
             RETURNING id, lease_us)
SELECT upd.lease_us, EXISTS (SELECT 1 FROM qm_cancels c WHERE c.job_id = upd.id) FROM upd
"""

UNMARK_GONE = "unmark AS (DELETE FROM qm_cancels c USING gone WHERE c.job_id = gone.id)"
"""A CTE of a statement whose CTE ``gone`` returns the ids of the jobs it removes: their marks go too."""

CANCEL = f"""
WITH gone AS (DELETE FROM qm_jobs WHERE id = %(id)s AND state IN ({PENDING}, {SCHEDULED})
              RETURNING id, queue, state),
{UNMARK_GONE},
{tally(("gone", "state", -1))},
mark AS (INSERT INTO qm_cancels (job_id, requested_us)
         SELECT id, %(now)s FROM qm_jobs WHERE id = %(id)s AND state = {RUNNING}
         ON CONFLICT (job_id) DO UPDATE SET requested_us = EXCLUDED.requested_us RETURNING job_id),
note AS (UPDATE qm_jobs SET metadata = coalesce(metadata, '{{}}'::jsonb) || jsonb_build_object(
             '{CANCEL_KEY}', jsonb_build_object('by', %(by)s::text, 'at', %(now)s::float8 / 1000000))
         WHERE id = %(id)s AND state = {RUNNING} AND coalesce(jsonb_typeof(metadata), 'object') = 'object'
         RETURNING id)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM mark),
       (SELECT state FROM qm_jobs WHERE id = %(id)s), EXISTS (SELECT 1 FROM qm_finished WHERE id = %(id)s)
"""

MARKED = "SELECT EXISTS (SELECT 1 FROM qm_cancels WHERE job_id = %s)"

FORGET_ORPHANS = """
DELETE FROM qm_cancels c WHERE NOT EXISTS (SELECT 1 FROM qm_jobs j WHERE j.id = c.job_id)
    AND NOT EXISTS (SELECT 1 FROM qm_finished f WHERE f.id = c.job_id)"""


def cancel(store: Statements, now: float, job_id: int, by: str | None = None) -> CancelOutcome:
    """Remove the job if it is pending or scheduled, mark it if it is running (and note ``by`` and when in
    its metadata), else change nothing."""
    for _ in range(TRIES):
        params = store.params(id=job_id, now=micros(now), by=by)
        removed, marked, live_state, finished = store.one(CANCEL, params)
        if removed:
            return CancelOutcome.REMOVED
        if marked:
            return CancelOutcome.REQUESTED
        if live_state is None:
            return CancelOutcome.FINISHED if finished else CancelOutcome.MISSING
        # Live but neither removed nor marked: its state changed under the statement (a claim, a release):
        # run it again on a fresh snapshot.
    raise StoreError(f"job {job_id} changed state {TRIES} times while it was being cancelled: try again")


def forget_orphans(store: Statements) -> int:
    """Drop the marks of jobs no longer stored (the vacuum's). Every removal takes its jobs' marks; a mark
    is left behind only when a ``CANCEL`` read the job as running while it ended and was removed, and its
    insert was not yet committed for the removal to see. -> how many."""
    conn = store.db.connection()
    with store.db.guard(conn):
        return int(conn.execute(FORGET_ORPHANS).rowcount)
