"""The SQL of a job's life on the PostgreSQL store: the statements ``store.py`` runs to put, claim, renew,
complete, retry, fail and release jobs. Each moves rows and changes their counters (``sql.tally``) in one
statement, data-modifying CTEs doing the work; ``variant`` makes the queue-filtered forms."""

from __future__ import annotations

import functools

from ...job import CANCEL_KEY, UNIQUE_NOTE_KEY
from ...tags import TAGS_KEY
from ...workflows import WORKFLOW_KEY
from . import pauses
from .concurrency import WAITING_ANY, WAITING_IN
from .prepared import Statement, text_bool
from .rows import CLAIM_ALONE_NEXT, CLAIM_BATCH, CLAIMED
from .schema import CANCELLED, DONE, FAILED, IS_CANCEL, PENDING, RUNNING, SCHEDULED, TOTAL
from .sql import appended, notify_if, tally, tally_put


def _enqueue_sql(journal: bool) -> str:
    return f"""
WITH p AS (SELECT payload, n FROM unnest(%(payloads)s::bytea[]) WITH ORDINALITY AS t(payload, n)),
ids AS (SELECT nextval('qm_job_ids') AS id FROM generate_series(1, %(count)s)),
ranked AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM ids),
lead AS (SELECT CASE WHEN %(state)s = {PENDING}
    THEN NOT EXISTS (SELECT 1 FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NULL AND queue = %(queue)s
                     AND priority >= %(priority)s)
    ELSE NOT EXISTS (SELECT 1 FROM qm_jobs WHERE state = {SCHEDULED} AND ready_us <= %(ready)s) END AS yes),
ins AS (
    INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, max_retries, enqueued_us, timeout,
                         partition_key, payload, metadata)
    SELECT r.id, %(state)s, %(queue)s, %(name)s, %(priority)s, %(ready)s, %(max_retries)s, %(now)s,
           %(timeout)s, %(partition_key)s, p.payload, %(metadata)s::text::jsonb
    FROM p JOIN ranked r USING (n)
    RETURNING id, queue),
{tally(("ins", "%(state)s", 1), ("ins", str(TOTAL), 1), journal=journal)}
SELECT (SELECT array_agg(id ORDER BY id) FROM ins), {notify_if("(SELECT yes FROM lead)")},
       (SELECT yes FROM lead)
"""


ENQUEUE = _enqueue_sql(journal=False)
ENQUEUE_JOINED = _enqueue_sql(journal=True)  # in the caller's transaction


def _enqueue_one_sql(state: int, journal: bool) -> str:
    """``ENQUEUE`` of one job whose state is known: the statement of a single put. Nothing in it depends on
    a parameter's value (no ``CASE`` on the state, no ``generate_series(count)`` or ``unnest`` whose row
    count only a value tells), so the server's generic plan of the prepared statement costs what a custom
    one does, and after its first five runs the server plans it no more: planning was half of a put's time
    on the server (docs/benchmarks.md). It returns the job's id as a number, not an array of one, which
    psycopg would parse from its text at a cost a single put notices."""
    if state == PENDING:
        lead = (
            f"NOT EXISTS (SELECT 1 FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NULL "
            "AND queue = %(queue)s AND priority >= %(priority)s)"
        )
    else:
        lead = f"NOT EXISTS (SELECT 1 FROM qm_jobs WHERE state = {SCHEDULED} AND ready_us <= %(ready)s)"
    return f"""
WITH lead AS (SELECT {lead} AS yes),
ins AS (
    INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, max_retries, enqueued_us, timeout,
                         partition_key, payload, metadata)
    VALUES (nextval('qm_job_ids'), {state}, %(queue)s, %(name)s, %(priority)s, %(ready)s, %(max_retries)s,
            %(now)s, %(timeout)s, %(partition_key)s, %(payload)s, %(metadata)s::text::jsonb)
    RETURNING id, queue),
{tally_put((state, TOTAL), journal)}
SELECT (SELECT id FROM ins), {notify_if("(SELECT yes FROM lead)")}, (SELECT yes FROM lead)
"""


# (state, joined the caller's transaction) -> the single put's statement
ENQUEUE_ONE = {
    (state, joined): _enqueue_one_sql(state, journal=joined)
    for state in (PENDING, SCHEDULED)
    for joined in (False, True)
}

# state -> the single put's statement on the store's own connection, run through libpq (prepared.py): the
# job's id, the hints sent, whether it leads its queue
PUT_ONE = {
    state: Statement(f"qm_put_{state}", ENQUEUE_ONE[state, False], (int, None, text_bool))
    for state in (PENDING, SCHEDULED)
}

FLOW_VERSION = "(SELECT version FROM qm_flow WHERE id = 1)"
"""The flow control's committed version (``control.py``), returned by the claims and acknowledgements so
that a busy consumer's ``PgControl.version()`` never needs a round trip of its own."""
CLAIM_JOBS_AT = 5  # a claim's row: head, eta, alone, waiting, flow version, then the claimed job's columns
NONE_DUE = f"AND NOT EXISTS (SELECT 1 FROM qm_jobs WHERE state = {SCHEDULED} AND ready_us <= %(now)s)"
"""A claim's guard: it takes nothing while a scheduled job is due (the store then promotes and claims again),
so that it never passes over a job whose ETA passed for one of lower priority, at the cost of one index
probe instead of a promotion statement before every claim."""

WORKERS = (
    f"CASE WHEN %(worker)s::text IS NULL THEN j.worker_ids ELSE {appended('j.worker_ids', '%(worker)s')} END"
)

CLAIM = f"""
WITH picked AS (
    SELECT id, claim, priority, ready_us FROM qm_jobs
    WHERE state = {PENDING} AND cgroup IS NULL @QUEUES@
      @MIN_PRIORITY@ @PAUSED@ @NONE_DUE@
    ORDER BY priority DESC, ready_us, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
ordered AS (SELECT id, claim, row_number() OVER (ORDER BY priority DESC, ready_us, id) AS rn FROM picked),
cut AS (SELECT coalesce(min(rn) FILTER (WHERE claim = {CLAIM_ALONE_NEXT} AND rn > 1), 2147483647) AS stop,
               coalesce(bool_or(claim = {CLAIM_ALONE_NEXT} AND rn = 1), false) AS alone FROM ordered),
chosen AS (SELECT id, rn FROM ordered, cut WHERE CASE WHEN cut.alone THEN rn = 1 ELSE rn < cut.stop END),
many AS (SELECT count(*) > 1 AS yes FROM chosen),
upd AS (
    UPDATE qm_jobs j SET state = {RUNNING}, started_us = %(now)s, lease_us = %(lease)s, token = %(token)s,
        attempts = j.attempts + 1, worker_ids = {WORKERS},
        claim = CASE WHEN (SELECT yes FROM many) THEN {CLAIM_BATCH} ELSE NULL END
    FROM chosen WHERE j.id = chosen.id
    RETURNING {", ".join("j." + c.strip() for c in CLAIMED.split(","))}, chosen.rn, j.claim AS was),
{tally(("upd", str(PENDING), -1), ("upd", str(RUNNING), 1))},
head AS (SELECT max(priority) AS priority FROM qm_jobs
    WHERE state = {PENDING} AND cgroup IS NULL @QUEUES@
      AND id NOT IN (SELECT id FROM chosen)),
eta AS (SELECT min(ready_us) AS ready_us FROM qm_jobs WHERE state = {SCHEDULED})
SELECT (SELECT priority FROM head), (SELECT ready_us FROM eta), (SELECT alone FROM cut), @WAITING@,
    {FLOW_VERSION}, upd.* @PAUSE_VERSION@
FROM (SELECT 1) one LEFT JOIN upd ON true ORDER BY upd.rn
"""

HEAD = f"""
SELECT (SELECT max(priority) FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NULL
        @QUEUES@),
       (SELECT min(ready_us) FROM qm_jobs WHERE state = {SCHEDULED}),
       @WAITING@
"""

CLAIM_JOB = f"""
WITH old AS (SELECT id, state, queue FROM qm_jobs WHERE id = %(id)s AND state = ANY(%(states)s) @PAUSED@
    AND cgroup IS NULL FOR UPDATE),
upd AS (
    UPDATE qm_jobs j SET state = {RUNNING}, started_us = %(now)s, lease_us = %(lease)s, token = %(token)s,
        attempts = j.attempts + 1, worker_ids = {WORKERS}, claim = NULL
    FROM old WHERE j.id = old.id
    RETURNING {", ".join("j." + c.strip() for c in CLAIMED.split(","))}, old.state AS was),
{tally(("upd", "was", -1), ("upd", str(RUNNING), 1))}
@CLAIMED_JOB@
"""


# A limited job that ends gives its slots back: the claims its limits held may take another job now (the
# hint wakes the idle consumers, as a put does). -> 1 if it was sent.
FREES_A_SLOT = notify_if("EXISTS (SELECT 1 FROM gone WHERE gone.cgroup IS NOT NULL)")


def _complete_sql(one: bool) -> str:
    """Finish running jobs as done: ``items`` (arrays of ids, tokens, results) or, with ``one``, the single
    job ``%(id)s``, a statement the server plans once (see ``_enqueue_one_sql``): a job acknowledged alone
    (``Record.ack``, a ``django.tasks`` job) is not planned again each time."""
    if one:
        source = f"qm_jobs j WHERE j.id = %(id)s AND j.state = {RUNNING} AND j.token = %(token)s"
        result = "%(result)s::bytea"
    else:
        source = f"qm_jobs j USING items i WHERE j.id = i.id AND j.state = {RUNNING} AND j.token = i.token"
        result = "i.result"
    items = (
        ""
        if one
        else "items AS (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bytea[], %(results)s::bytea[])\n"
        "               AS t(id, token, result)),\n"
    )
    return f"""
WITH {items}gone AS (
    DELETE FROM {source}
    RETURNING j.*, {result} AS result_),
ins AS (
    INSERT INTO qm_finished (id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us,
        started_us, finished_us, timeout, partition_key, payload, result, worker_ids, error_types,
        error_msgs, error, error_type, traceback, metadata)
    SELECT id, {DONE}, queue, name, priority, retries, max_retries, attempts, enqueued_us, started_us,
        %(now)s, timeout, partition_key, payload, result_, worker_ids, error_types, error_msgs,
        error, error_type, traceback,  -- the last failed attempt's, kept as the LMDB store keeps them
        metadata
    FROM gone RETURNING id, queue),
{tally(("ins", str(RUNNING), -1), ("ins", str(DONE), 1))}
SELECT (SELECT array_agg(id) FROM ins), {FREES_A_SLOT}, {FLOW_VERSION}
"""


COMPLETE = _complete_sql(one=False)
COMPLETE_ONE = _complete_sql(one=True)

_OWN_KEYS = ", ".join(f"'{key}'" for key in (CANCEL_KEY, WORKFLOW_KEY, UNIQUE_NOTE_KEY, TAGS_KEY))
SAVE_METADATA = f"""
UPDATE qm_jobs SET metadata = CASE
    WHEN jsonb_typeof(metadata) = 'object' AND metadata ?| ARRAY[{_OWN_KEYS}]
    THEN coalesce(%s::text::jsonb, '{{}}'::jsonb)
         || (SELECT jsonb_object_agg(key, value) FROM jsonb_each(metadata) WHERE key IN ({_OWN_KEYS}))
    ELSE %s::text::jsonb END
WHERE id = %s AND state = {RUNNING} AND token = %s RETURNING id
"""  # the store's own keys stay (metadata.keeping_cancel_note): the cancel note, a node's link, its key, tags

RETRY = f"""
WITH upd AS (
    UPDATE qm_jobs j SET state = %(state)s, ready_us = %(ready)s, retries = j.retries + 1, token = NULL,
        lease_us = NULL, error = %(error)s, error_type = %(error_type)s, traceback = %(traceback)s,
        error_types = {appended("j.error_types", "%(error_type)s")},
        error_msgs = {appended("j.error_msgs", "%(error)s")}
    WHERE j.id = %(id)s AND j.state = {RUNNING} AND j.token = %(token)s
    RETURNING j.id, j.queue),
{tally(("upd", str(RUNNING), -1), ("upd", "%(state)s", 1))}
SELECT (SELECT id FROM upd), {notify_if("EXISTS (SELECT 1 FROM upd)")}
"""

DEAD = f"""
WITH gone AS (
    DELETE FROM qm_jobs j WHERE j.id = %(id)s AND j.state = {RUNNING} AND j.token = %(token)s RETURNING j.*),
ins AS (
    INSERT INTO qm_finished (id, state, queue, name, priority, retries, max_retries, attempts, enqueued_us,
        started_us, finished_us, timeout, partition_key, payload, result, worker_ids, error_types,
        error_msgs, error, error_type, traceback, metadata, cgroup, climits, cns)
    SELECT id, {FAILED}, queue, name, priority, retries + 1, max_retries, attempts, enqueued_us, started_us,
        %(now)s, timeout, partition_key, payload, NULL, worker_ids,
        {appended("error_types", "%(error_type)s")}, {appended("error_msgs", "%(error)s")},
        %(error)s, %(error_type)s, %(traceback)s, metadata, cgroup, climits, cns
    FROM gone RETURNING id, queue, error_type),
{tally(("ins", str(RUNNING), -1), ("ins", str(FAILED), 1), ("ins", str(CANCELLED), IS_CANCEL))}
SELECT (SELECT id FROM ins), {FREES_A_SLOT}
"""

RELEASE = f"""
WITH upd AS (
    UPDATE qm_jobs j SET state = %(state)s, token = NULL, lease_us = NULL, started_us = NULL,
        attempts = greatest(coalesce(j.attempts, 1) - 1, 0),
        ready_us = coalesce(%(ready)s::bigint, j.ready_us)
    WHERE j.id = %(id)s AND j.state = {RUNNING} AND j.token = %(token)s RETURNING j.id, j.queue),
{tally(("upd", str(RUNNING), -1), ("upd", "%(state)s", 1))}
SELECT (SELECT id FROM upd), {notify_if("EXISTS (SELECT 1 FROM upd)")}
"""

ADMISSIBLE = f"""
SELECT b.id, b.priority, b.ready_us, b.queue, b.name,
       (SELECT min(ready_us) FROM qm_jobs WHERE state = {SCHEDULED})
FROM (SELECT 1) one LEFT JOIN LATERAL (
    SELECT id, priority, ready_us, queue, name FROM qm_jobs
    WHERE state = {PENDING} AND cgroup IS NULL @QUEUES@
      AND queue <> ALL (%(skip_queues)s::text[]) AND coalesce(name, '') <> ALL (%(skip_names)s::text[])
    ORDER BY priority DESC, ready_us, id LIMIT 1) b ON true
"""


@functools.cache
def variant(
    sql: str, filtered: bool, floor: bool = False, guarded: bool = False, none_due: bool = False
) -> str:
    """``sql`` with or without its queue filter and priority floor: separate statements, so that each has
    a plan of its own that uses the right index (a generic plan for "no filter, or this filter" would not).
    ``guarded``: a claim that takes nothing unless the pauses' version is ``%(pauses)s``, and returns the
    committed one as its last column (``pauses.py``). ``none_due``: a claim that takes nothing while a
    scheduled job is due (``NONE_DUE``)."""
    sql = sql.replace("@NONE_DUE@", NONE_DUE if none_due else "")
    sql = sql.replace("@QUEUES@", "AND queue = ANY(%(queues)s)" if filtered else "")
    sql = sql.replace("@PAUSED@", pauses.GUARD if guarded else "")
    sql = sql.replace("@PAUSE_VERSION@", f", {pauses.COMMITTED}" if guarded else "")
    claimed_job = f"SELECT upd.*, {pauses.COMMITTED} FROM (SELECT 1) one LEFT JOIN upd ON true"
    sql = sql.replace("@CLAIMED_JOB@", claimed_job if guarded else "SELECT * FROM upd")
    sql = sql.replace("@WAITING@", WAITING_IN if filtered else WAITING_ANY)
    return sql.replace("@MIN_PRIORITY@", "AND priority >= %(min_priority)s" if floor else "")
