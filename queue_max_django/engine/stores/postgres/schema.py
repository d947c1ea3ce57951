"""The PostgreSQL store's tables, and how they are created and checked.

Two job tables keep the hot one small: ``qm_jobs`` holds the live jobs (pending, scheduled, running), which
every claim walks; a job that ends (done, or a dead letter) moves to ``qm_finished`` in the same transaction,
so a million finished jobs never slow a claim. Each table has a partial index per state in the order that
state is read: pending by (priority desc, ready time, id), the store's claim order; scheduled by ETA; running
by lease expiry; done by finish time (the vacuum's order); dead letters by id.

Times are integer microseconds since the epoch (``*_us``), as the LMDB store keeps them, read from the
store's clock (the database server's, or a test's fake clock): SQL here never calls ``now()``.

Job ids come from a sequence that counts in steps of 256 from 256, so every id's low byte is 0: the
store's one shard, as ``job.shard_of`` reads it (``MAX_SHARDS``).

Counts (``stats()``, ``queue_counts()``) are counter rows changed in the same transaction as the jobs they
count, spread over ``COUNTER_SLOTS`` rows per (queue, state) so that concurrent writers rarely wait on the
same row; a transaction writes its counters last, in key order, so counters never take part in a deadlock.
A put in the caller's own transaction (``put(connection=)``), which may stay open a while, never locks a
shared counter row: its counts are a journal row of their own (a slot from ``qm_count_journal``), which no
other writer touches, and the store's upkeep folds committed journal rows into the shared ones.

``SCHEMA_VERSION`` is in ``qm_meta``; ``create(conn)`` makes the tables (idempotent), brings an older
schema up to this one (version 1 -> 2 adds the ``metadata`` column with ``ADD COLUMN IF NOT EXISTS``: a
nullable column, so no row is rewritten), and ``version(conn)`` reads what a database has, for the system
checks and for opening the store.
"""

from __future__ import annotations

from typing import Any

from ...errors import SchemaError
from ...job import CANCELLED as CANCELLED_TYPE
from . import limitfn, limitslots
from . import schedules as schedule_schema
from .tag_schema import TAGS_DDL
from .workflow_schema import FUNCTIONS, WORKFLOW_TABLES, workflow_ddl

SCHEMA_VERSION = 12  # 2: the metadata column of qm_jobs and qm_finished, qm_cancels, qm_samples;
# 3: qm_pauses; 4: holds of unique keys (qm_unique.hold, until_us); 5: workflows; 6: concurrency limits;
# 7: qm_moved (queue_transfer); 8: limit slots (qm_limit_slots, qm_take_slots) and a dead letter's limits
# (qm_finished.cgroup, climits, cns); 9: qm_schedules; 10: qm_wf_settle records a node's end, and a
# child's count that stays above zero, in one statement each (CREATE OR REPLACE); 11: the tag indexes
# (tag_schema.py); 12: qm_wf_finished is a statement trigger that settles an acknowledged batch's nodes at
# once, a child's count changed once per statement (qm_wf_child; CREATE OR REPLACE, the trigger re-created)
LIMIT_FUNCTIONS = ("qm_claim_limited", "qm_take_slots", "qm_take_many")
SLOTS_VERSION = 8  # a database from before this version gets slots for its running limited jobs
COUNTER_SLOTS = 16
JOURNAL_START = 1000  # counter rows from this slot on are journal entries of the caller's transactions
TOTAL = -1  # the counter "state" of every put ever made (the ``total`` of stats())
# Counter "states" of the done jobs and dead letters that ever left that state (vacuumed, purged, deleted,
# requeued): with the state counts, the jobs ever done and ever dead-lettered (``finished_totals``).
DONE_LEFT, FAILED_LEFT = -2, -3
# Counter "states" of the dead letters that are cancels (error type ``job.CANCELLED``) now, and of those that
# left the failed state since (``Store.cancel_counts``); the statements that move dead letters keep them.
CANCELLED, CANCELLED_LEFT = -4, -5
# Counter "states" of the duplicates a unique key skipped and replaced, ever (``Store.unique_counts``).
DUPLICATES_SKIPPED, DUPLICATES_REPLACED = -6, -7
IS_CANCEL = f"(error_type IS NOT DISTINCT FROM '{CANCELLED_TYPE}')::int"  # per row of dead letters: 1 or 0

# State codes, as the LMDB store numbers them (job.STATES).
PENDING, SCHEDULED, RUNNING, DONE, FAILED = 0, 1, 2, 3, 4

TABLES: tuple[str, ...] = (
    "qm_meta", "qm_jobs", "qm_finished", "qm_counts", "qm_unique", "qm_limits", "qm_breakers", "qm_flow",
    "qm_locks", "qm_workers", "qm_samples", "qm_cancels", "qm_pauses", "qm_pause_version", "qm_turns",
    "qm_moved", "qm_limit_slots", schedule_schema.TABLE,
    *WORKFLOW_TABLES,
)  # fmt: skip

DDL = f"""
CREATE TABLE IF NOT EXISTS qm_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

CREATE SEQUENCE IF NOT EXISTS qm_job_ids START 256 INCREMENT 256 MINVALUE 256;

CREATE TABLE IF NOT EXISTS qm_jobs (
    id bigint PRIMARY KEY,
    state smallint NOT NULL CHECK (state IN ({PENDING}, {SCHEDULED}, {RUNNING})),
    queue text NOT NULL,
    name text,
    priority smallint NOT NULL,
    ready_us bigint NOT NULL,
    retries integer NOT NULL DEFAULT 0,
    max_retries integer NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    enqueued_us bigint NOT NULL,
    started_us bigint,
    lease_us bigint,
    token bytea,
    claim smallint,
    timeout double precision,
    partition_key bytea,
    payload bytea NOT NULL,
    worker_ids text[] NOT NULL DEFAULT '{{}}',
    error_types text[] NOT NULL DEFAULT '{{}}',
    error_msgs text[] NOT NULL DEFAULT '{{}}',
    error text,
    error_type text,
    traceback text,
    metadata jsonb,
    CHECK (state <> {RUNNING} OR (lease_us IS NOT NULL AND token IS NOT NULL))
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0,
        autovacuum_analyze_scale_factor = 0.02);
-- Version 3: concurrency limits (concurrency.py). A limited job has its group and its limits' keys and
-- sizes; waiting, it is in qm_jobs_waiting, never in the claim's indexes (qm_jobs_claim*), which replace
-- version 2's qm_jobs_ready and qm_jobs_ready_queue (the same columns, limited jobs left out).
ALTER TABLE qm_jobs ADD COLUMN IF NOT EXISTS cgroup text;
ALTER TABLE qm_jobs ADD COLUMN IF NOT EXISTS climits text[];
ALTER TABLE qm_jobs ADD COLUMN IF NOT EXISTS cns integer[];
CREATE INDEX IF NOT EXISTS qm_jobs_claim ON qm_jobs (priority DESC, ready_us, id)
    WHERE state = {PENDING} AND cgroup IS NULL;
CREATE INDEX IF NOT EXISTS qm_jobs_claim_queue ON qm_jobs (queue, priority DESC, ready_us, id)
    WHERE state = {PENDING} AND cgroup IS NULL;
DROP INDEX IF EXISTS qm_jobs_ready;
DROP INDEX IF EXISTS qm_jobs_ready_queue;
-- In byte order (COLLATE "C"): a queue's groups are the range after its name and chr(31) (concurrency.py).
CREATE INDEX IF NOT EXISTS qm_jobs_waiting ON qm_jobs ((cgroup COLLATE "C"), priority DESC, ready_us, id)
    WHERE state = {PENDING} AND cgroup IS NOT NULL;
CREATE INDEX IF NOT EXISTS qm_jobs_cgroup ON qm_jobs (cgroup) WHERE cgroup IS NOT NULL;
CREATE INDEX IF NOT EXISTS qm_jobs_limited_running ON qm_jobs (id)
    WHERE state = {RUNNING} AND climits IS NOT NULL;
CREATE TABLE IF NOT EXISTS qm_turns (
    grp text PRIMARY KEY,
    turn bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS qm_turns_order ON qm_turns (turn);
CREATE SEQUENCE IF NOT EXISTS qm_turn_seq;
-- Version 8: the slots of the limits (limitslots.py); the limited claim takes them (limitfn.py).
@LIMIT_SLOTS@
@LIMITED_CLAIM@
CREATE INDEX IF NOT EXISTS qm_jobs_scheduled ON qm_jobs (ready_us, id) WHERE state = {SCHEDULED};
CREATE INDEX IF NOT EXISTS qm_jobs_lease ON qm_jobs (lease_us, id) WHERE state = {RUNNING};

CREATE TABLE IF NOT EXISTS qm_finished (
    id bigint PRIMARY KEY,
    state smallint NOT NULL CHECK (state IN ({DONE}, {FAILED})),
    queue text NOT NULL,
    name text,
    priority smallint NOT NULL,
    retries integer NOT NULL,
    max_retries integer NOT NULL,
    attempts integer NOT NULL,
    enqueued_us bigint NOT NULL,
    started_us bigint,
    finished_us bigint NOT NULL,
    timeout double precision,
    partition_key bytea,
    payload bytea,
    result bytea,
    worker_ids text[] NOT NULL DEFAULT '{{}}',
    error_types text[] NOT NULL DEFAULT '{{}}',
    error_msgs text[] NOT NULL DEFAULT '{{}}',
    error text,
    error_type text,
    traceback text,
    metadata jsonb
) WITH (autovacuum_vacuum_scale_factor = 0.05);
-- Version 2: a job's metadata (NULL: none). A version 1 database gains the column here.
ALTER TABLE qm_jobs ADD COLUMN IF NOT EXISTS metadata jsonb;
ALTER TABLE qm_finished ADD COLUMN IF NOT EXISTS metadata jsonb;
-- Version 7: a dead letter keeps its limits (concurrency.py), which a requeue gives back to it.
ALTER TABLE qm_finished ADD COLUMN IF NOT EXISTS cgroup text;
ALTER TABLE qm_finished ADD COLUMN IF NOT EXISTS climits text[];
ALTER TABLE qm_finished ADD COLUMN IF NOT EXISTS cns integer[];
CREATE INDEX IF NOT EXISTS qm_finished_done ON qm_finished (finished_us, id) WHERE state = {DONE};
CREATE INDEX IF NOT EXISTS qm_finished_failed ON qm_finished (id) WHERE state = {FAILED};

CREATE TABLE IF NOT EXISTS qm_counts (
    queue text NOT NULL,
    state smallint NOT NULL,
    slot bigint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (queue, state, slot)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE SEQUENCE IF NOT EXISTS qm_count_journal START {JOURNAL_START} MINVALUE {JOURNAL_START};

CREATE TABLE IF NOT EXISTS qm_unique (
    key bytea PRIMARY KEY,
    job_id bigint NOT NULL,
    used_us bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS qm_unique_used ON qm_unique (used_us);
-- Version 3: how a key is held (contract/uniqueness.py: 0 remembered, 1 started, 2 finished, 3 a window
-- ending at until_us). A version 2 database's keys are remembered ones, the periodic ticks'.
ALTER TABLE qm_unique ADD COLUMN IF NOT EXISTS hold smallint NOT NULL DEFAULT 0;
ALTER TABLE qm_unique ADD COLUMN IF NOT EXISTS until_us bigint NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS qm_limits (
    key text PRIMARY KEY,
    value bytea NOT NULL
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS qm_breakers (
    key text PRIMARY KEY,
    value bytea NOT NULL
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS qm_flow (
    id smallint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO qm_flow VALUES (1, 0) ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS qm_locks (
    name text PRIMARY KEY,
    owner text,
    expires_us bigint,
    since_us bigint,
    last_owner text,
    last_expires_us bigint,
    last_since_us bigint
);
CREATE TABLE IF NOT EXISTS qm_workers (
    worker_id text PRIMARY KEY,
    report bytea NOT NULL,
    last_heartbeat_us bigint NOT NULL,
    stale_after double precision NOT NULL
);

-- The throughput history: a sample of the store-wide counters per minute (engine/throughput.py).
CREATE TABLE IF NOT EXISTS qm_samples (
    minute bigint PRIMARY KEY,
    done bigint NOT NULL,
    failed bigint NOT NULL,
    lag double precision NOT NULL
);

-- Running jobs marked "cancel requested", apart from their qm_jobs rows: the holder's heartbeat reads the
-- mark (cancels.py); requeue drops a mark, and the statements that remove jobs drop theirs.
CREATE TABLE IF NOT EXISTS qm_cancels (
    job_id bigint PRIMARY KEY,
    requested_us bigint NOT NULL
);

-- Version 3: paused queues and tasks (pauses.py): a row per target (task '' for the whole queue), its value
-- pausestate.pack's bytes; every pause and resume bumps the one version row, which each claim compares.
CREATE TABLE IF NOT EXISTS qm_pauses (
    queue text NOT NULL,
    task text NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (queue, task)
);
CREATE TABLE IF NOT EXISTS qm_pause_version (
    id smallint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO qm_pause_version VALUES (1, 0) ON CONFLICT DO NOTHING;

-- Version 7: the ids of the jobs a move (queue_transfer, transfer.py) wrote here, until it ends: a move run
-- again skips them, so a job that ran here after its move is never written a second time.
CREATE TABLE IF NOT EXISTS qm_moved (
    id bigint PRIMARY KEY
);
"""

# Version 3: workflows, their nodes, and the triggers that settle a node (workflow_schema.py).
WORKFLOW_DDL = workflow_ddl(PENDING, SCHEDULED, DONE, TOTAL, "queue_max").replace(
    "@CANCELLED@", f"'{CANCELLED_TYPE}'"
)


def create(conn: Any) -> None:
    """Create the store's tables in ``conn``'s database if they are not there (one transaction), and
    record the schema version. Refuses (``SchemaError``) a database whose schema is newer than this code."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(4242424242)")  # two migrations at once: one waits
        found = version(conn)
        if found is not None and found > SCHEMA_VERSION:
            raise SchemaError(
                f"the queue_max tables in this database are at schema version {found}, newer than this "
                f"version of queue_max_django reads ({SCHEMA_VERSION}): upgrade queue_max_django"
            )
        ddl = DDL.replace("@LIMIT_SLOTS@", limitslots.DDL + limitslots.FUNCTION + limitslots.MANY)
        conn.execute(ddl.replace("@LIMITED_CLAIM@", limitfn.FUNCTION))
        if found is not None and found < SLOTS_VERSION:
            conn.execute(limitslots.FILL)  # the jobs running now hold their slots
        conn.execute(WORKFLOW_DDL)
        conn.execute(schedule_schema.DDL)
        conn.execute(TAGS_DDL)
        conn.execute(
            "INSERT INTO qm_meta VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE SET value = %s",
            (str(SCHEMA_VERSION), str(SCHEMA_VERSION)),
        )


def version(conn: Any) -> int | None:
    """The schema version of ``conn``'s database, or None when it has no queue_max tables."""
    row = conn.execute("SELECT to_regclass('qm_meta') IS NOT NULL").fetchone()
    if not row[0]:
        return None
    found = conn.execute("SELECT value FROM qm_meta WHERE key = 'schema_version'").fetchone()
    return None if found is None else int(found[0])


def drop(conn: Any) -> None:
    """Remove every table of the store (``migrate queue_max_django zero``): its jobs are gone."""
    with conn.transaction():
        conn.execute("DROP TABLE IF EXISTS " + ", ".join(TABLES) + " CASCADE")
        conn.execute("DROP SEQUENCE IF EXISTS qm_job_ids, qm_count_journal, qm_turn_seq")
        conn.execute("DROP FUNCTION IF EXISTS " + ", ".join((*FUNCTIONS, *LIMIT_FUNCTIONS)))
