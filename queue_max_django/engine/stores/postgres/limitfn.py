"""The PostgreSQL store's limited claim as one server-side function (``qm_claim_limited``), created with the
schema (version 3; slots since version 8): a claim of up to ``p_limit`` limited jobs is one round trip.

It goes round the groups of ``qm_turns`` in turn order. For each group: its next waiting job, locked ``FOR
UPDATE SKIP LOCKED``; then a slot of each of its keys (``qm_take_slots``, ``limitslots.py``: a slot free in
the statement's snapshot, under its advisory lock, only tried, at the version the snapshot saw), and the start
in the same transaction. A claim of several jobs does it in bulk: a scan that finds one group takes that
group's next jobs (of one key) and their slots at once (``qm_take_many``); several groups go round a round at
a time (``ROUNDS``). A key with no free slot sends the group to the back of the turns (held); a key whose slot
rows another claim is growing at that moment leaves the group its turn (the claim goes on to the next group).
No statement here waits for another claim (job rows ``SKIP LOCKED``, the slots' and the growth's advisory
locks only tried, a group's row in ``qm_turns`` moved or removed only if no other claim holds it), so claims
of one key run side by side and never deadlock. Counter rows are written once, at the end, in key order, as
every statement of the store writes them. (Before schema version 8 the claim took an advisory lock per key and
counted the key's running rows under it: every claim of a key waited in line for the one before.)
"""

from __future__ import annotations

from ...job import STATE_CODE, State
from .limitslots import BUSY, HELD_H, TAKEN
from .rows import CLAIM_ALONE_NEXT, CLAIM_BATCH, HISTORY_MAX

PENDING, RUNNING = STATE_CODE[State.PENDING], STATE_CODE[State.RUNNING]  # as schema.py numbers them

# A job the claim may take: not one of a paused task of its queue (``p_skip``: "queue chr(31) task" of each
# paused task of the claim's queues, [sc_concurrency_paused]); the scan of a group passes over those.
PASSING = "(p_skip IS NULL OR (q.queue || chr(31) || q.name) <> ALL(p_skip))"

# A claim of several jobs from several groups (``ROUNDS``, in ``qm_claim_limited``): it goes round the groups
# as the loop below does, a round at a time: one statement locks the next job of each group still in the
# round (in turn order), one takes a slot for each of them (the first free of its key among the four least
# recently taken, as ``qm_take_slots`` looks first), one starts those that got one. A job that got none there
# takes its slot alone (``qm_take_slots``: all the key's slots, and their growth). The groups served come
# round again, in the order served; a group held by a full limit leaves the claim; the turns move once, at
# the end, in the order the groups were last served or held. A first round with a job that must be taken
# alone, or of several keys, or below the floor, leaves the whole claim to the loop; a later round stops at a
# job taken alone, and passes over the others.
ROUNDS = f"""
        active := groups;
        LOOP
            EXIT WHEN last_round OR cardinality(active) = 0 OR cardinality(taken) >= p_limit;
            rnd := rnd + 1;
            SELECT array_agg(n.grp ORDER BY n.o), array_agg(n.id ORDER BY n.o),
                   array_agg(n.k ORDER BY n.o), array_agg(n.n ORDER BY n.o), array_agg(n.queue ORDER BY n.o),
                   array_agg(n.bad ORDER BY n.o), array_agg(n.alone ORDER BY n.o)
                INTO r_grp, r_id, r_key, r_n, r_queue, r_bad, r_alone
                FROM (SELECT a.grp, a.o, q.id, q.climits[1] AS k, q.cns[1] AS n, q.queue,
                             cardinality(q.climits) <> 1 OR (p_min IS NOT NULL AND q.priority < p_min) AS bad,
                             q.claim IS NOT DISTINCT FROM {CLAIM_ALONE_NEXT} AS alone
                      FROM unnest(active) WITH ORDINALITY a(grp, o)
                      CROSS JOIN LATERAL (
                          SELECT q.id, q.climits, q.cns, q.queue, q.priority, q.claim FROM qm_jobs q
                          WHERE q.state = {PENDING} AND q.cgroup COLLATE "C" = a.grp AND {PASSING}
                          ORDER BY q.priority DESC, q.ready_us, q.id LIMIT 1 FOR UPDATE SKIP LOCKED) q
                      ORDER BY a.o LIMIT p_limit - cardinality(taken)) n;
            IF rnd = 1 THEN
                -- the groups with no job left leave the turns
                DELETE FROM qm_turns t
                    WHERE t.grp IN (SELECT l.grp FROM qm_turns l
                                    WHERE l.grp = ANY(active) AND l.grp <> ALL(coalesce(r_grp, '{{}}'))
                                    FOR UPDATE SKIP LOCKED)
                    AND NOT EXISTS (SELECT 1 FROM qm_jobs WHERE cgroup = t.grp);
                IF r_id IS NULL OR true = ANY(r_bad) OR true = ANY(r_alone) THEN
                    EXIT;  -- the loop below takes this claim
                END IF;
            END IF;
            EXIT WHEN r_id IS NULL;
            k := array_position(r_alone, true);
            IF k IS NOT NULL THEN  -- taken alone: not after others; the round stops before it
                last_round := true;
                r_grp := r_grp[1:k - 1];
                r_id := r_id[1:k - 1];
                r_key := r_key[1:k - 1];
                r_n := r_n[1:k - 1];
                r_queue := r_queue[1:k - 1];
                r_bad := r_bad[1:k - 1];
                EXIT WHEN k = 1;
            END IF;
            WITH pick AS (
                SELECT x.id, x.k, c.slot, c.version
                FROM unnest(r_id, r_key, r_n, r_bad) AS x(id, k, n, bad)
                CROSS JOIN LATERAL (
                    SELECT c.slot, c.version FROM (
                        SELECT c.slot, c.version, c.job_id, c.token FROM qm_limit_slots c
                        WHERE c.key = x.k AND c.slot < x.n ORDER BY c.taken_us LIMIT 4) c
                    WHERE NOT EXISTS (SELECT 1 FROM qm_limit_slots h WHERE h.key = x.k AND h.slot >= x.n
                                      AND h.job_id IS NOT NULL AND {HELD_H})
                      AND CASE WHEN c.job_id IS NULL OR NOT coalesce((
                                   SELECT r.state = {RUNNING} AND r.token = c.token FROM qm_jobs r
                                   WHERE r.id = c.job_id), false)
                               THEN pg_try_advisory_xact_lock(hashtext(x.k), c.slot) ELSE false END
                    LIMIT 1) c
                WHERE NOT x.bad),
            t AS (
                UPDATE qm_limit_slots l
                SET job_id = pick.id, token = p_token, taken_us = p_now, version = l.version + 1
                FROM pick WHERE l.key = pick.k AND l.slot = pick.slot AND l.version = pick.version
                RETURNING l.job_id)
            SELECT array_agg(t.job_id) INTO r_got FROM t;
            r_got := coalesce(r_got, '{{}}');
            active := '{{}}';
            FOR k IN 1 .. coalesce(cardinality(r_id), 0) LOOP
                CONTINUE WHEN r_bad[k];  -- below the floor, or of several keys: passed over, keeping its turn
                IF NOT r_id[k] = ANY(r_got) THEN
                    took := qm_take_slots(r_id[k], ARRAY[r_key[k]], ARRAY[r_n[k]], p_token, p_now);
                    CONTINUE WHEN took = {BUSY};  -- keeps its turn
                    IF took = {TAKEN} THEN
                        r_got := r_got || r_id[k];
                    END IF;
                END IF;
                moved := moved || r_grp[k];
                IF r_id[k] = ANY(r_got) THEN
                    active := active || r_grp[k];
                END IF;
            END LOOP;
            CONTINUE WHEN cardinality(r_got) = 0;
            RETURN QUERY
            WITH started AS (
                UPDATE qm_jobs u SET state = {RUNNING}, started_us = p_now, lease_us = p_lease,
                    token = p_token, attempts = u.attempts + 1,
                    worker_ids = CASE WHEN p_worker IS NULL THEN u.worker_ids ELSE (u.worker_ids || p_worker)[
                        greatest(cardinality(u.worker_ids) - {HISTORY_MAX - 2}, 1):] END,
                    claim = CASE WHEN cardinality(taken) + cardinality(r_got) > 1 THEN {CLAIM_BATCH}::smallint
                                 ELSE NULL END
                WHERE u.id = ANY(r_got)
                RETURNING u.id, u.token, u.payload, u.retries, u.max_retries, u.attempts, u.enqueued_us,
                    u.priority, u.queue, u.name, u.timeout, u.lease_us, u.worker_ids, u.claim,
                    u.metadata::text, u.partition_key, false)
            SELECT * FROM started s ORDER BY array_position(r_id, s.id);
            IF cardinality(taken) = 1 THEN
                UPDATE qm_jobs SET claim = {CLAIM_BATCH} WHERE qm_jobs.id = taken[1];
            END IF;
            queues := queues || ARRAY(SELECT x.q FROM unnest(r_id, r_queue) WITH ORDINALITY x(i, q, o)
                                      WHERE x.i = ANY(r_got) ORDER BY x.o);
            taken := taken || ARRAY(SELECT x.i FROM unnest(r_id) WITH ORDINALITY x(i, o)
                                    WHERE x.i = ANY(r_got) ORDER BY x.o);
        END LOOP;
        IF rnd > 1 OR cardinality(moved) > 0 THEN
            pos := ngroups + 1;  -- the loop below has nothing to do
            UPDATE qm_turns t SET turn = v.turn
            FROM (SELECT m.grp, nextval('qm_turn_seq') AS turn
                  FROM (SELECT w.grp, max(w.o) AS o FROM unnest(moved) WITH ORDINALITY w(grp, o)
                        GROUP BY w.grp ORDER BY 2) m) v
            WHERE t.grp = v.grp AND t.grp IN (
                SELECT l.grp FROM qm_turns l WHERE l.grp = ANY(moved) FOR UPDATE SKIP LOCKED);
        END IF;
"""

FUNCTION = f"""
DROP FUNCTION IF EXISTS qm_claim_limited(  -- before the paused tasks' skip, its arguments were these
    text[], integer, integer, bigint, bigint, bytea, text, bigint, integer);
CREATE OR REPLACE FUNCTION qm_claim_limited(
    p_queues text[], p_min integer, p_limit integer, p_now bigint, p_lease bigint, p_token bytea,
    p_worker text, p_slot bigint, p_scan integer, p_skip text[])
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
    active text[];
    rnd integer := 0;
    moved text[] := '{{}}';
    r_grp text[];
    r_id bigint[];
    r_key text[];
    r_n integer[];
    r_queue text[];
    r_bad boolean[];
    r_alone boolean[];
    r_got bigint[];
    last_round boolean := false;
    k integer;
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
                WHERE q.state = {PENDING} AND q.cgroup COLLATE "C" = g AND {PASSING}
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
    ELSIF p_limit > 1 THEN
        {ROUNDS}
    END IF;
    WHILE pos <= cardinality(groups) AND cardinality(taken) < p_limit LOOP
        g := groups[pos];
        pos := pos + 1;
        SELECT q.id, q.priority, q.climits, q.cns, q.claim, q.queue INTO j FROM qm_jobs q
            WHERE q.state = {PENDING} AND q.cgroup COLLATE "C" = g AND {PASSING}
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
        -- that is moving it there at this moment, its row locked, is not waited for
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
