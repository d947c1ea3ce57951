"""The slots of the PostgreSQL store's concurrency limits (schema version 8): ``qm_limit_slots`` and the
server-side function ``qm_take_slots`` that the limited claim (``limitfn.py``) and ``claim_job`` of a limited
job call.

A key with limit ``n`` has up to ``n`` slot rows (``slot`` 0 .. n-1), made as claims need them. A running
limited job holds one slot of each of its keys: the row names the job and the token of the claim that started
it, written in that claim's transaction. A slot is *free* when it names no job, or a job that no longer runs
with that token: whatever ends a job (complete, fail, retry, release, a recovered lease, cancel, delete,
quarantine) frees its slots with no statement of its own, and a job claimed again holds a new token, so its
old slot stays free. The number of jobs running with a key is then the number of its taken slots, and a
claim never counts them: it takes a free slot.

``qm_take_slots(job, keys, ns, token, now)``, for each key in key order, one ``UPDATE`` (usually):

- it looks at the key's slots below ``n`` least recently taken first (the likeliest to be free: the first
  four, then, none of them taken, all of them in a second statement), and takes the first that was free in
  the statement's snapshot and that no other claim is taking now: each slot has a transaction-level
  advisory lock (``(hashtext(key), slot)``), only tried (``pg_try_advisory_xact_lock``), which every write
  of a slot row holds; so claims of one key take different slots at once, and none waits for another;
- a slot row has a ``version``, which every take changes: the update writes the slot only if its version is
  still the one the snapshot saw. A take committed after the snapshot changed it, and the update's re-check
  of a changed row (READ COMMITTED) reads the row's newest version: the job a claim just started in the slot
  is never overwritten. (A condition on the occupant's state instead would be re-checked against
  ``qm_jobs`` in the statement's old snapshot, where that job may not run yet.) As the snapshot was taken
  before the slot's lock, a free slot it saw stays free: its occupant's claim had committed, and only an
  end of that job changes it since;
- a slot above the job's ``n`` still taken (the limit was lowered since other jobs of the key started, or
  they were put with a larger one) holds the job: at most ``n`` run when it starts;
- none free and fewer than ``n`` rows: the key's slot rows grow (doubling, up to ``n``) under an advisory
  lock of the key taken only if free: a claim that finds another growing the key's slots does not wait
  (-> 2, busy: the group keeps its turn).

A key with no free slot -> 1 (full), and the slots the job took of its earlier keys are given back in the
same transaction: a job gets a slot of every key or none. -> 0: it holds them all.

The vacuum forgets the free slot rows not taken since its cutoff (``FORGET``): a key with nothing running
for that long has no rows left. ``FILL`` gives the jobs running when a database comes from version 6 (which
counted running rows instead) their slots.
"""

from __future__ import annotations

from ...job import STATE_CODE, State

RUNNING = STATE_CODE[State.RUNNING]

# The occupant of slot row ``l`` still runs with the token it took the slot with (found by its primary key:
# no state in the WHERE clause, which would let the planner walk the running rows' lease index instead).
_HELD = f"""coalesce((SELECT r.state = {RUNNING} AND r.token = l.token FROM qm_jobs r WHERE r.id = l.job_id),
    false)"""

HELD_H = _HELD.replace("l.", "h.")

# Take for job ``p_id`` a slot of key ``kk[i]`` below ``nn[i]`` that was free in the statement's snapshot
# (among the ``{cands}`` least recently taken: the likeliest to be free), in the order of the last take:
# the first that no other claim is taking now (its transaction-level advisory lock, only tried), if its
# version is still the one the snapshot saw (the update's re-check of a row changed since: no take
# committed in between). -> its slot number, or nothing.
_TAKE_FREE = """
UPDATE qm_limit_slots l SET job_id = p_id, token = p_token, taken_us = p_now, version = l.version + 1
FROM (
    SELECT c.slot, c.version FROM (
        SELECT c.slot, c.version, c.taken_us, c.job_id, c.token FROM qm_limit_slots c
        WHERE c.key = kk[i] AND c.slot < nn[i] ORDER BY c.taken_us {cands}) c
    WHERE NOT EXISTS (SELECT 1 FROM qm_limit_slots h WHERE h.key = kk[i] AND h.slot >= nn[i]
                      AND h.job_id IS NOT NULL AND {held})
      AND CASE WHEN c.job_id IS NULL OR NOT coalesce((SELECT r.state = {running} AND r.token = c.token
                                                       FROM qm_jobs r WHERE r.id = c.job_id), false)
               THEN pg_try_advisory_xact_lock(hashtext(kk[i]), c.slot) ELSE false END
    LIMIT 1) f
WHERE l.key = kk[i] AND l.slot = f.slot AND l.version = f.version
RETURNING l.slot
"""

# No index but the primary key: a take changes no indexed column, a HOT update in the row's own page.
DDL = """
CREATE TABLE IF NOT EXISTS qm_limit_slots (
    key text NOT NULL,
    slot integer NOT NULL,
    job_id bigint,
    token bytea,
    taken_us bigint NOT NULL,
    version bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key, slot)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);
"""

FUNCTION = f"""
CREATE OR REPLACE FUNCTION qm_take_slots(
    p_id bigint, p_keys text[], p_ns integer[], p_token bytea, p_now bigint)
RETURNS smallint
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    kk text[];
    nn integer[];
    got integer[] := '{{}}';
    s integer;
    i integer;
    outcome smallint := 0;
BEGIN
    IF cardinality(p_keys) = 1 THEN
        kk := p_keys;
        nn := p_ns;
    ELSE
        SELECT array_agg(u.k ORDER BY u.k), array_agg(u.n ORDER BY u.k) INTO kk, nn
            FROM unnest(p_keys, p_ns) AS u(k, n);
    END IF;
    FOR i IN 1 .. coalesce(cardinality(kk), 0) LOOP
        {_TAKE_FREE.format(cands="LIMIT 4", running=RUNNING, held=HELD_H).strip()} INTO s;
        IF s IS NULL THEN
            -- slots above n (a lowered limit): the job waits while one is taken
            PERFORM 1 FROM qm_limit_slots l WHERE l.key = kk[i] AND l.slot >= nn[i] AND l.job_id IS NOT NULL
                AND {_HELD} LIMIT 1;
            IF FOUND THEN
                outcome := 1;
                EXIT;
            END IF;
            -- any of the key's slots, in a newer snapshot
            {_TAKE_FREE.format(cands="", running=RUNNING, held=HELD_H).strip()} INTO s;
        END IF;
        IF s IS NULL THEN
            IF NOT pg_try_advisory_xact_lock(hashtextextended('qm_slots:' || kk[i], 0)) THEN
                outcome := 2;
                EXIT;
            END IF;
            -- holding the key's growth lock: every row grown before is committed, and seen here
            WITH made AS (
                INSERT INTO qm_limit_slots (key, slot, job_id, token, taken_us, version)
                SELECT kk[i], g, CASE WHEN g = lo THEN p_id END, CASE WHEN g = lo THEN p_token END,
                    CASE WHEN g = lo THEN p_now ELSE 0 END, 0
                FROM (SELECT g, min(g) OVER () AS lo FROM generate_series(0, nn[i] - 1) g
                      WHERE NOT EXISTS (SELECT 1 FROM qm_limit_slots l WHERE l.key = kk[i] AND l.slot = g)
                      ORDER BY g
                      LIMIT greatest((SELECT count(*) FROM qm_limit_slots l WHERE l.key = kk[i]), 1)) m
                ON CONFLICT DO NOTHING RETURNING slot, job_id)
            SELECT min(made.slot) INTO s FROM made WHERE made.job_id IS NOT NULL;
            IF s IS NULL THEN
                outcome := 1;
                EXIT;
            END IF;
        END IF;
        got := got || s;
    END LOOP;
    IF outcome <> 0 AND cardinality(got) > 0 THEN  -- a key had no room: the slots taken go back
        UPDATE qm_limit_slots l SET job_id = NULL, token = NULL, version = l.version + 1
            FROM unnest(kk[1:cardinality(got)], got) AS t(tk, ts) WHERE l.key = t.tk AND l.slot = t.ts;
    END IF;
    RETURN outcome;
END
$fn$;
"""

MANY = f"""
CREATE OR REPLACE FUNCTION qm_take_many(
    p_ids bigint[], p_key text, p_n integer, p_token bytea, p_now bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    slots integer[];
    versions bigint[];
    got bigint[];
    more bigint[];
    tried integer;
    rest bigint[];
BEGIN
    PERFORM 1 FROM qm_limit_slots l WHERE l.key = p_key AND l.slot >= p_n AND l.job_id IS NOT NULL
        AND {_HELD} LIMIT 1;
    IF FOUND THEN
        RETURN '{{}}';
    END IF;
    SELECT array_agg(f.slot), array_agg(f.version) INTO slots, versions FROM (
        SELECT c.slot, c.version FROM (
            SELECT c.slot, c.version, c.job_id, c.token FROM qm_limit_slots c
            WHERE c.key = p_key AND c.slot < p_n ORDER BY c.taken_us) c
        WHERE CASE WHEN c.job_id IS NULL OR NOT coalesce((SELECT r.state = {RUNNING} AND r.token = c.token
                                                           FROM qm_jobs r WHERE r.id = c.job_id), false)
                   THEN pg_try_advisory_xact_lock(hashtext(p_key), c.slot) ELSE false END
        LIMIT cardinality(p_ids)) f;
    tried := coalesce(cardinality(slots), 0);
    IF tried > 0 THEN
        WITH t AS (
            UPDATE qm_limit_slots l
            SET job_id = x.jid, token = p_token, taken_us = p_now, version = l.version + 1
            FROM unnest(slots, versions, p_ids[1:tried]) AS x(s, v, jid)
            WHERE l.key = p_key AND l.slot = x.s AND l.version = x.v RETURNING l.job_id)
        SELECT array_agg(t.job_id) INTO got FROM t;
    END IF;
    got := coalesce(got, '{{}}');
    rest := p_ids[tried + 1:];
    IF cardinality(rest) > 0 AND pg_try_advisory_xact_lock(hashtextextended('qm_slots:' || p_key, 0)) THEN
        -- holding the key's growth lock: every row grown before is committed, and seen here
        WITH made AS (
            INSERT INTO qm_limit_slots (key, slot, job_id, token, taken_us, version)
            SELECT p_key, m.g, rest[m.o], p_token, p_now, 0 FROM (
                SELECT g, row_number() OVER (ORDER BY g) AS o FROM generate_series(0, p_n - 1) g
                WHERE NOT EXISTS (SELECT 1 FROM qm_limit_slots l WHERE l.key = p_key AND l.slot = g)
                ORDER BY g LIMIT cardinality(rest)) m
            ON CONFLICT DO NOTHING RETURNING job_id)
        SELECT array_agg(made.job_id) INTO more FROM made;
        got := got || coalesce(more, '{{}}');
    END IF;
    RETURN got;
END
$fn$;
"""
"""``qm_take_many(jobs, key, n, token, now)``: slots of one key for several jobs of one group (in claim
order) at once, as ``qm_take_slots`` takes one: the free slots looked at least recently taken first, each
taken under its advisory lock (tried) and only at the version the snapshot saw; rows grown for the rest (the
key's growth lock, tried). -> the jobs that got a slot (a job whose slot was taken since the snapshot does
not, and waits)."""

TAKEN, FULL, BUSY = 0, 1, 2  # what qm_take_slots returns

FILL = f"""
INSERT INTO qm_limit_slots (key, slot, job_id, token, taken_us)
SELECT k, (row_number() OVER (PARTITION BY k ORDER BY j.id) - 1)::integer, j.id, j.token,
    coalesce(j.started_us, 0)
FROM qm_jobs j, unnest(j.climits) k WHERE j.state = {RUNNING} AND j.climits IS NOT NULL
ON CONFLICT DO NOTHING
"""

FORGET = f"""
WITH old AS (SELECT key, slot FROM qm_limit_slots l WHERE l.taken_us <= %(cutoff)s
             AND CASE WHEN NOT {_HELD} THEN pg_try_advisory_xact_lock(hashtext(l.key), l.slot) ELSE false END
             LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
DELETE FROM qm_limit_slots l USING old WHERE l.key = old.key AND l.slot = old.slot
    AND l.taken_us <= %(cutoff)s
"""
"""Free slot rows not taken since ``cutoff``, a batch, each under its advisory lock as a take holds it (a
slot taken since the statement's snapshot has a later ``taken_us`` in the row version the delete
re-checks, and stays)."""
