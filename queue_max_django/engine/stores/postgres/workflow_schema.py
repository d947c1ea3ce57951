"""The PostgreSQL store's workflow tables, and the triggers that settle a node inside the statement that
ends its job (``engine/workflows.py`` has the model; ``schema.py`` runs this DDL as its version 3 step).

``qm_workflows`` holds one row per workflow; ``qm_workflow_nodes`` one per node, with the payload and
options of a node that waits (a node is not a job until it is released). Two row triggers settle nodes:
one on ``qm_finished`` (a job became done or a dead letter: complete, fail, recovery, quarantine) and one on
``qm_jobs`` deletions of jobs that waited (cancel, delete, purge). Both fire only for rows whose metadata
holds the workflow key (a ``WHEN`` clause, evaluated without a function call), so jobs that are not nodes
pay nothing more. ``qm_wf_settle`` is ``workflows.settle`` in SQL: the same walk, in the same
transaction as the statement that fired it. A released job's counts go to a journal row of its own (as a
put in a caller's transaction does: schema.py), so the trigger never waits on a shared counter row.
"""

from __future__ import annotations

WORKFLOW_TABLES = ("qm_workflows", "qm_workflow_nodes")
FUNCTIONS = (
    "qm_wf_settle(bigint, integer, text, bytea, text, bigint)",
    "qm_wf_finished()",
    "qm_wf_removed()",
)


def workflow_ddl(pending: int, scheduled: int, done: int, total: int, channel: str) -> str:
    return f"""
-- Version 3: workflows (engine/stores/postgres/workflow_schema.py).
CREATE TABLE IF NOT EXISTS qm_workflows (
    id bigint PRIMARY KEY,
    created_us bigint NOT NULL,
    nodes integer NOT NULL,
    cancelled boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS qm_workflow_nodes (
    workflow_id bigint NOT NULL REFERENCES qm_workflows (id) ON DELETE CASCADE,
    idx integer NOT NULL,
    name text NOT NULL,
    parents integer[] NOT NULL,
    children integer[] NOT NULL,
    always boolean NOT NULL,
    waiting integer NOT NULL,
    state text NOT NULL,
    job_id bigint,
    doomed text,
    payload bytea,
    queue text,
    job_name text,
    priority smallint,
    max_retries integer,
    timeout double precision,
    partition_key bytea,
    metadata jsonb,
    result bytea,
    error text,
    PRIMARY KEY (workflow_id, idx)
);
-- A workflow's status is read from its nodes by state (no shared counter row: a settling never waits on one).
CREATE INDEX IF NOT EXISTS qm_workflow_nodes_state ON qm_workflow_nodes (workflow_id, state);

CREATE OR REPLACE FUNCTION qm_wf_settle(p_wf bigint, p_idx integer, p_state text, p_result bytea,
                                        p_error text, p_now bigint) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    w_idx integer[] := ARRAY[p_idx];
    w_state text[] := ARRAY[p_state];
    w_result bytea[] := ARRAY[p_result];
    w_error text[] := ARRAY[p_error];
    k integer; st text; res bytea; err text; last integer;
    n_name text; n_children integer[];
    c_waiting integer; c_state text; c_doomed text; c_always boolean;
    child integer;
    new_id bigint;
    journal bigint;
    released integer := 0;
BEGIN
    -- Only the columns used are read (never a node's parents: a chord's callback has every member as one).
    WHILE cardinality(w_idx) > 0 LOOP
        last := cardinality(w_idx);
        k := w_idx[last]; st := w_state[last]; res := w_result[last]; err := w_error[last];
        w_idx := w_idx[1:last - 1]; w_state := w_state[1:last - 1];
        w_result := w_result[1:last - 1]; w_error := w_error[1:last - 1];
        -- One statement records the end and locks the row (none for a node that ended before: a second end).
        UPDATE qm_workflow_nodes SET state = st, result = res, error = err
        WHERE workflow_id = p_wf AND idx = k AND state NOT IN ('succeeded', 'failed', 'cancelled')
        RETURNING name, children INTO n_name, n_children;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        FOREACH child IN ARRAY n_children LOOP
            -- A child that still waits on another parent after this one, and whose doom does not change:
            -- one statement (a chord member's end, nearly always).
            UPDATE qm_workflow_nodes SET waiting = waiting - 1
            WHERE workflow_id = p_wf AND idx = child AND state = 'waiting' AND waiting > 1
              AND (st = 'succeeded' OR doomed IS NOT NULL);
            CONTINUE WHEN FOUND;
            SELECT waiting, state, doomed, always INTO c_waiting, c_state, c_doomed, c_always
            FROM qm_workflow_nodes WHERE workflow_id = p_wf AND idx = child FOR UPDATE;
            CONTINUE WHEN c_state <> 'waiting';
            c_waiting := c_waiting - 1;
            IF st <> 'succeeded' AND c_doomed IS NULL THEN
                c_doomed := 'parent ' || quote_literal(n_name) || ' ' || st;
            END IF;
            IF c_waiting > 0 OR (c_doomed IS NOT NULL AND NOT c_always) THEN
                UPDATE qm_workflow_nodes SET waiting = c_waiting, doomed = c_doomed
                WHERE workflow_id = p_wf AND idx = child;
                IF c_waiting = 0 THEN
                    w_idx := w_idx || child; w_state := w_state || 'cancelled'::text;
                    w_result := w_result || NULL::bytea; w_error := w_error || ('cancelled: ' || c_doomed);
                END IF;
            ELSE
                new_id := nextval('qm_job_ids');
                INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, max_retries, enqueued_us,
                                     timeout, partition_key, payload, metadata)
                SELECT new_id, {pending}, queue, job_name, priority, p_now, max_retries, p_now, timeout,
                       partition_key, payload, metadata
                FROM qm_workflow_nodes WHERE workflow_id = p_wf AND idx = child;
                journal := nextval('qm_count_journal');
                INSERT INTO qm_counts (queue, state, slot, n)
                SELECT queue, s, journal, 1 FROM qm_workflow_nodes, unnest(ARRAY[{pending}, {total}]) AS s
                WHERE workflow_id = p_wf AND idx = child;
                UPDATE qm_workflow_nodes SET waiting = 0, doomed = c_doomed, state = 'queued',
                    job_id = new_id, payload = NULL, metadata = NULL
                WHERE workflow_id = p_wf AND idx = child;
                released := released + 1;
            END IF;
        END LOOP;
    END LOOP;
    IF released > 0 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN released;
END
$fn$;

CREATE OR REPLACE FUNCTION qm_wf_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    link jsonb := NEW.metadata -> '_workflow';
BEGIN
    IF jsonb_typeof(link) = 'array' THEN
        IF NEW.state = {done} THEN
            PERFORM qm_wf_settle((link ->> 0)::bigint, (link ->> 1)::integer, 'succeeded', NEW.result, NULL,
                                 NEW.finished_us);
        ELSE
            PERFORM qm_wf_settle((link ->> 0)::bigint, (link ->> 1)::integer,
                CASE WHEN NEW.error_type IS NOT DISTINCT FROM @CANCELLED@
                     THEN 'cancelled' ELSE 'failed' END,
                NULL, NEW.error, NEW.finished_us);
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION qm_wf_removed() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    link jsonb := OLD.metadata -> '_workflow';
BEGIN
    IF jsonb_typeof(link) = 'array' THEN
        PERFORM qm_wf_settle((link ->> 0)::bigint, (link ->> 1)::integer, 'cancelled', NULL,
                             'cancelled: its job was removed', greatest(OLD.ready_us, OLD.enqueued_us));
    END IF;
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS qm_wf_finished ON qm_finished;
CREATE TRIGGER qm_wf_finished AFTER INSERT ON qm_finished FOR EACH ROW
    WHEN (NEW.metadata ? '_workflow') EXECUTE FUNCTION qm_wf_finished();
DROP TRIGGER IF EXISTS qm_wf_removed ON qm_jobs;
CREATE TRIGGER qm_wf_removed AFTER DELETE ON qm_jobs FOR EACH ROW
    WHEN (OLD.state IN ({pending}, {scheduled}) AND OLD.metadata ? '_workflow')
    EXECUTE FUNCTION qm_wf_removed();
"""
