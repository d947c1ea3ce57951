"""The PostgreSQL store's workflow tables, and the triggers that settle a node inside the statement that
ends its job (``engine/workflows.py`` has the model; ``schema.py`` runs this DDL as its version 3 step).

``qm_workflows`` holds one row per workflow; ``qm_workflow_nodes`` one per node, with the payload and
options of a node that waits (a node is not a job until it is released). Two triggers settle nodes: a
statement trigger on ``qm_finished`` (jobs became done or dead letters: complete, fail, recovery,
quarantine), which settles every job its statement ended together, reading them from its transition table,
and a row trigger on ``qm_jobs`` deletions of jobs that waited (cancel, delete, purge), which fires only for
rows whose metadata holds the workflow key (a ``WHEN`` clause, evaluated without a function call). The
statement trigger runs once per statement of any jobs and returns after one scan of its rows when none is a
node. ``qm_wf_settle`` is ``workflows.settle`` in SQL: the same walk, in the same transaction as the
statement that fired it; an acknowledged batch's nodes are settled in bulk instead (``qm_wf_finished``), each
child's count changed once by the number of its parents the batch ended, so a chord's callback row is locked
once per batch, at the statement's end, and two workers' batches lock the children they share in one order.
A released job's counts go to a journal row of its own (as a put in a caller's transaction does:
schema.py), so the trigger never waits on a shared counter row.
"""

from __future__ import annotations

WORKFLOW_TABLES = ("qm_workflows", "qm_workflow_nodes")
FUNCTIONS = (
    "qm_wf_settle(bigint, integer, text, bytea, text, bigint)",
    "qm_wf_child(bigint, integer, integer, text, text, bigint)",
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

-- Version 12: what a child does when some of its parents ended is qm_wf_child, shared by the walk of one
-- parent's end (qm_wf_settle) and the settling of a whole statement's acknowledgements (qm_wf_finished).
CREATE OR REPLACE FUNCTION qm_wf_child(p_wf bigint, p_child integer, p_ended integer, p_st text,
                                       p_name text, p_now bigint, OUT released boolean, OUT doom text)
LANGUAGE plpgsql AS $fn$
DECLARE
    c_waiting integer; c_state text; c_doomed text; c_always boolean;
    new_id bigint;
    journal bigint;
BEGIN
    released := false;
    -- A child that still waits on another parent after these, and whose doom does not change: one statement
    -- (a chord's callback, nearly always). Its state is tested as "(state = 'waiting') IS TRUE", which no
    -- index serves, so that the plan finds the row by its primary key: with "state = 'waiting'" the generic
    -- plan took the (workflow_id, state) index and walked every waiting node of the workflow, each step of
    -- a chain of n reading the n waiting after it (0.6 ms a step at 3,000; 0.02 ms by the key).
    UPDATE qm_workflow_nodes SET waiting = waiting - p_ended
    WHERE workflow_id = p_wf AND idx = p_child AND (state = 'waiting') IS TRUE AND waiting > p_ended
      AND (p_st = 'succeeded' OR doomed IS NOT NULL);
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT waiting, state, doomed, always INTO c_waiting, c_state, c_doomed, c_always
    FROM qm_workflow_nodes WHERE workflow_id = p_wf AND idx = p_child FOR UPDATE;
    IF c_state IS DISTINCT FROM 'waiting' THEN
        RETURN;
    END IF;
    c_waiting := c_waiting - p_ended;
    IF p_st <> 'succeeded' AND c_doomed IS NULL THEN
        c_doomed := 'parent ' || quote_literal(p_name) || ' ' || p_st;
    END IF;
    IF c_waiting > 0 OR (c_doomed IS NOT NULL AND NOT c_always) THEN
        UPDATE qm_workflow_nodes SET waiting = c_waiting, doomed = c_doomed
        WHERE workflow_id = p_wf AND idx = p_child;
        IF c_waiting <= 0 THEN
            doom := c_doomed;  -- the caller cancels it (and walks its children)
        END IF;
        RETURN;
    END IF;
    new_id := nextval('qm_job_ids');
    INSERT INTO qm_jobs (id, state, queue, name, priority, ready_us, max_retries, enqueued_us,
                         timeout, partition_key, payload, metadata)
    SELECT new_id, {pending}, queue, job_name, priority, p_now, max_retries, p_now, timeout,
           partition_key, payload, metadata
    FROM qm_workflow_nodes WHERE workflow_id = p_wf AND idx = p_child;
    journal := nextval('qm_count_journal');
    INSERT INTO qm_counts (queue, state, slot, n)
    SELECT queue, s, journal, 1 FROM qm_workflow_nodes, unnest(ARRAY[{pending}, {total}]) AS s
    WHERE workflow_id = p_wf AND idx = p_child;
    UPDATE qm_workflow_nodes SET waiting = 0, doomed = c_doomed, state = 'queued',
        job_id = new_id, payload = NULL, metadata = NULL
    WHERE workflow_id = p_wf AND idx = p_child;
    released := true;
END
$fn$;

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
    child integer;
    c_released boolean; c_doom text;
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
        -- The children in index order: two transactions lock the children they share in one order.
        FOR child IN SELECT c FROM unnest(n_children) AS c ORDER BY c LOOP
            SELECT r.released, r.doom INTO c_released, c_doom
            FROM qm_wf_child(p_wf, child, 1, st, n_name, p_now) AS r;
            IF c_released THEN
                released := released + 1;
            ELSIF c_doom IS NOT NULL THEN
                w_idx := w_idx || child; w_state := w_state || 'cancelled'::text;
                w_result := w_result || NULL::bytea; w_error := w_error || ('cancelled: ' || c_doom);
            END IF;
        END LOOP;
    END LOOP;
    IF released > 0 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN released;
END
$fn$;

-- Version 12: a statement-level trigger (it was a row trigger). The jobs one statement ended (an
-- acknowledged batch: job_sql.COMPLETE) are settled together: their nodes' ends in one statement, then
-- each child's count once, by the number of its parents that ended here, the children in (workflow, index)
-- order. A chord's callback row is locked once per statement, at its end, not from the first member's
-- settling to the commit, and two acknowledging workers lock the children they share in one order.
-- A dead letter's end (failed, cancelled) still walks its descendants one parent at a time (qm_wf_settle).
CREATE OR REPLACE FUNCTION qm_wf_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    wfs bigint[]; kids integer[]; ns integer[]; ats bigint[];
    i integer;
    c_released boolean; c_doom text;
    released integer := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ended WHERE metadata ? '_workflow') THEN
        RETURN NULL;  -- no node ended here (a statement of plain jobs): one scan of its rows
    END IF;
    FOR r IN SELECT (metadata -> '_workflow' ->> 0)::bigint AS wf,
                    (metadata -> '_workflow' ->> 1)::integer AS k, error, error_type, finished_us
             FROM ended WHERE state <> {done} AND jsonb_typeof(metadata -> '_workflow') = 'array'
             ORDER BY 1, 2 LOOP
        PERFORM qm_wf_settle(r.wf, r.k,
            CASE WHEN r.error_type IS NOT DISTINCT FROM @CANCELLED@ THEN 'cancelled' ELSE 'failed' END,
            NULL, r.error, r.finished_us);
    END LOOP;
    WITH m AS (
        SELECT (metadata -> '_workflow' ->> 0)::bigint AS wf, (metadata -> '_workflow' ->> 1)::integer AS k,
               result, finished_us
        FROM ended WHERE state = {done} AND jsonb_typeof(metadata -> '_workflow') = 'array'
        ORDER BY 1, 2),  -- the nodes locked in index order, as a workflow's cancel locks them
    done_nodes AS (
        UPDATE qm_workflow_nodes n SET state = 'succeeded', result = m.result, error = NULL
        FROM m WHERE n.workflow_id = m.wf AND n.idx = m.k
          AND n.state NOT IN ('succeeded', 'failed', 'cancelled')
        RETURNING n.workflow_id, n.children, m.finished_us),
    per_child AS (
        SELECT workflow_id, child, count(*)::integer AS ended_here, max(finished_us) AS at
        FROM done_nodes, unnest(children) AS child GROUP BY workflow_id, child)
    SELECT array_agg(workflow_id ORDER BY workflow_id, child), array_agg(child ORDER BY workflow_id, child),
           array_agg(ended_here ORDER BY workflow_id, child), array_agg(at ORDER BY workflow_id, child)
    INTO wfs, kids, ns, ats FROM per_child;
    FOR i IN 1 .. coalesce(cardinality(kids), 0) LOOP
        -- qm_wf_child's first statement without its call (a chord's callback that still waits)
        UPDATE qm_workflow_nodes SET waiting = waiting - ns[i]
        WHERE workflow_id = wfs[i] AND idx = kids[i] AND (state = 'waiting') IS TRUE AND waiting > ns[i];
        CONTINUE WHEN FOUND;
        SELECT c.released, c.doom INTO c_released, c_doom
        FROM qm_wf_child(wfs[i], kids[i], ns[i], 'succeeded', NULL, ats[i]) AS c;
        IF c_released THEN
            released := released + 1;
        ELSIF c_doom IS NOT NULL THEN  -- its last parents succeeded, after one that failed: it is cancelled
            released := released + qm_wf_settle(wfs[i], kids[i], 'cancelled', NULL, 'cancelled: ' || c_doom,
                                                ats[i]);
        END IF;
    END LOOP;
    IF released > 0 THEN
        PERFORM pg_notify('{channel}', '');
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
CREATE TRIGGER qm_wf_finished AFTER INSERT ON qm_finished REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION qm_wf_finished();
DROP TRIGGER IF EXISTS qm_wf_removed ON qm_jobs;
CREATE TRIGGER qm_wf_removed AFTER DELETE ON qm_jobs FOR EACH ROW
    WHEN (OLD.state IN ({pending}, {scheduled}) AND OLD.metadata ? '_workflow')
    EXECUTE FUNCTION qm_wf_removed();
"""
