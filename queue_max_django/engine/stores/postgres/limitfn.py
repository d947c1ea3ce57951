"""The PostgreSQL store's limited claim as one server-side function (``qm_claim_limited``), created with the
schema (version 3; slots since version 7): a claim of up to ``p_limit`` limited jobs is one round trip.

It goes round the groups of ``qm_turns`` in turn order. For each group: its next waiting job, locked ``FOR
UPDATE SKIP LOCKED``; then a slot of each of its keys (``qm_take_slots``, ``limitslots.py``: a free slot
row locked ``SKIP LOCKED``, its occupant checked in a snapshot taken after the lock), and the start in the
same transaction. A key with no free slot sends the group to the back of the turns (held); a key whose
slot rows another claim is growing at that moment leaves the group its turn (the claim goes on to the next
group). No statement here waits for another claim (job and slot rows ``SKIP LOCKED``, the growth lock only
tried, a group's row in ``qm_turns`` moved or removed only if no other claim holds it), so claims of one
key run side by side and never deadlock. Counter rows are written once, at the end, in key order, as every
statement of the store writes them. (Before schema version 7 the claim took an advisory lock per key and
counted the key's running rows under it: every claim of a key waited in line for the one before.)
"""

from __future__ import annotations

from ...job import STATE_CODE, State
from .limitslots import BUSY, TAKEN
from .rows import CLAIM_ALONE_NEXT, CLAIM_BATCH, HISTORY_MAX

PENDING, RUNNING = STATE_CODE[State.PENDING], STATE_CODE[State.RUNNING]  # as schema.py numbers them

FUNCTION = f"""
CREATE OR REPLACE FUNCTION qm_claim_limited(
    p_queues text[], p_min integer, p_limit integer, p_now bigint, p_lease bigint, p_token bytea,
    p_worker text, p_slot bigint, p_scan integer)
RETURNS TABLE (id bigint, token bytea, payload bytea, retries integer, max_retries integer,
               attempts integer, enqueued_us bigint, priority smallint, queue text, name text,
               timeout double precision, lease_us bigint, worker_ids text[], claim smallint,
               metadata text, partition_key bytea, alone boolean)
LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
    groups text[];
    g text;
    j record;
    took smallint;
    ngroups integer;
    taken bigint[] := '{{}}';
    queues text[] := '{{}}';
    pos integer := 1;
    was_alone boolean;
    ids bigint[] := '{{}}';
    first_key text;
    first_n integer;
    first_queue text;
BEGIN
    SELECT array_agg(t.grp ORDER BY t.turn) INTO groups FROM (
        SELECT qt.grp, qt.turn FROM qm_turns qt
        WHERE p_queues IS NULL OR split_part(qt.grp, chr(31), 1) = ANY(p_queues)
        ORDER BY qt.turn LIMIT p_scan) t;
    IF groups IS NULL THEN
        RETURN;
    END IF;
    ngroups := cardinality(groups);
    IF ngroups = 1 AND p_limit > 1 THEN
        -- One group: its next jobs with the same single key as the first (none taken alone, none below the
        -- floor) take their slots and start together, a few statements in all.
        g := groups[1];
        FOR j IN SELECT q.id, q.priority, q.climits, q.cns, q.claim, q.queue FROM qm_jobs q
                WHERE q.state = {PENDING} AND q.cgroup COLLATE "C" = g
                ORDER BY q.priority DESC, q.ready_us, q.id LIMIT p_limit FOR UPDATE SKIP LOCKED LOOP
            EXIT WHEN cardinality(j.climits) <> 1 OR j.claim IS NOT DISTINCT FROM {CLAIM_ALONE_NEXT}
                OR (p_min IS NOT NULL AND j.priority < p_min)
                OR (first_key IS NOT NULL AND (j.climits[1] <> first_key OR j.cns[1] <> first_n));
            first_key := j.climits[1];
            first_n := j.cns[1];
            first_queue := j.queue;
            ids := ids || j.id;
        END LOOP;
        IF cardinality(ids) > 1 THEN
            taken := qm_take_many(ids, first_key, first_n, p_token, p_now);
            RETURN QUERY
            WITH started AS (
                UPDATE qm_jobs u SET state = {RUNNING}, started_us = p_now, lease_us = p_lease,
                    token = p_token, attempts = u.attempts + 1,
                    worker_ids = CASE WHEN p_worker IS NULL THEN u.worker_ids ELSE (u.worker_ids || p_worker)[
                        greatest(cardinality(u.worker_ids) - {HISTORY_MAX - 2}, 1):] END,
                    claim = CASE WHEN cardinality(taken) > 1 THEN {CLAIM_BATCH}::smallint ELSE NULL END
                WHERE u.id = ANY(taken)
                RETURNING u.id, u.token, u.payload, u.retries, u.max_retries, u.attempts, u.enqueued_us,
                    u.priority, u.queue, u.name, u.timeout, u.lease_us, u.worker_ids, u.claim,
                    u.metadata::text, u.partition_key, false)
            SELECT * FROM started s ORDER BY array_position(ids, s.id);
            queues := array_fill(first_queue, ARRAY[cardinality(taken)]);
            pos := ngroups + 1;  -- done: the group's jobs not taken wait for a slot
        END IF;
    END IF;
    WHILE pos <= cardinality(groups) AND cardinality(taken) < p_limit LOOP
        g := groups[pos];
        pos := pos + 1;
        SELECT q.id, q.priority, q.climits, q.cns, q.claim, q.queue INTO j FROM qm_jobs q
            WHERE q.state = {PENDING} AND q.cgroup COLLATE "C" = g
            ORDER BY q.priority DESC, q.ready_us, q.id LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            DELETE FROM qm_turns t
                WHERE t.grp = (SELECT l.grp FROM qm_turns l WHERE l.grp = g FOR UPDATE SKIP LOCKED)
                AND NOT EXISTS (SELECT 1 FROM qm_jobs WHERE cgroup = g);
            CONTINUE;
        END IF;
        IF p_min IS NOT NULL AND j.priority < p_min THEN
            CONTINUE;
        END IF;
        was_alone := j.claim IS NOT DISTINCT FROM {CLAIM_ALONE_NEXT};
        IF was_alone AND cardinality(taken) > 0 THEN
            EXIT;
        END IF;
        took := qm_take_slots(j.id, j.climits, j.cns, p_token, p_now);
        IF took = {BUSY} THEN
            CONTINUE;  -- another claim is growing a key's slots now: this group keeps its turn
        END IF;
        -- to the back of the turns (not when it is the only group: no other is served before it); a claim
        -- that is moving it there now (its row locked) is not waited for
        IF ngroups > 1 THEN
            UPDATE qm_turns t SET turn = nextval('qm_turn_seq')
                WHERE t.grp = (SELECT l.grp FROM qm_turns l WHERE l.grp = g FOR UPDATE SKIP LOCKED);
        END IF;
        IF took <> {TAKEN} THEN
            CONTINUE;
        END IF;
        RETURN QUERY
        UPDATE qm_jobs u SET state = {RUNNING}, started_us = p_now, lease_us = p_lease, token = p_token,
            attempts = u.attempts + 1,
            worker_ids = CASE WHEN p_worker IS NULL THEN u.worker_ids
                ELSE (u.worker_ids || p_worker)[greatest(cardinality(u.worker_ids) - {HISTORY_MAX - 2}, 1):]
                END,
            claim = CASE WHEN cardinality(taken) > 0 THEN {CLAIM_BATCH}::smallint ELSE NULL END
        WHERE u.id = j.id
        RETURNING u.id, u.token, u.payload, u.retries, u.max_retries, u.attempts, u.enqueued_us,
            u.priority, u.queue, u.name, u.timeout, u.lease_us, u.worker_ids, u.claim, u.metadata::text,
            u.partition_key, was_alone;
        IF cardinality(taken) = 1 THEN
            UPDATE qm_jobs SET claim = {CLAIM_BATCH} WHERE qm_jobs.id = taken[1];
        END IF;
        taken := taken || j.id;
        queues := queues || j.queue;
        IF was_alone THEN
            EXIT;
        END IF;
        groups := groups || g;  -- its next job, after the other groups
    END LOOP;
    IF cardinality(taken) > 0 THEN
        INSERT INTO qm_counts AS c (queue, state, slot, n)
        SELECT d.queue, d.state, p_slot, sum(d.n) FROM (
            SELECT x AS queue, {PENDING}::smallint AS state, -1::bigint AS n FROM unnest(queues) x
            UNION ALL SELECT x, {RUNNING}::smallint, 1::bigint FROM unnest(queues) x) d
        GROUP BY d.queue, d.state ORDER BY d.queue, d.state
        ON CONFLICT (queue, state, slot) DO UPDATE SET n = c.n + EXCLUDED.n;
    END IF;
END
$fn$;
"""
