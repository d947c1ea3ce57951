"""The slots of the PostgreSQL store's concurrency limits (schema version 7): ``qm_limit_slots`` and the
server-side function ``qm_take_slots`` that the limited claim (``limitfn.py``) and ``claim_job`` of a limited
job call.

A key with limit ``n`` has up to ``n`` slot rows (``slot`` 0 .. n-1), made as claims need them. A running
limited job holds one slot of each of its keys: the row names the job and the token of the claim that started
it, written in that claim's transaction. A slot is *free* when it names no job, or a job that no longer runs
with that token: whatever ends a job (complete, fail, retry, release, a recovered lease, cancel, delete,
quarantine) frees its slots with no statement of its own, and a job claimed again holds a new token, so its
old slot stays free. The number of jobs running with a key is then the number of its taken slots, and a
claim never counts them: it takes a free slot.

``qm_take_slots(job, keys, ns, token, now)``, for each key in key order:

- a slot above the job's ``n`` still held (the limit was lowered since other jobs of the key started, or
  they were put with a larger one) holds the job: at most ``n`` run when it starts;
- the least recently taken slot below ``n`` that looks free in the statement's snapshot, locked ``FOR UPDATE
  SKIP LOCKED`` (a slot another claim is taking is passed over, never waited for: claims of one key take
  different slots at once); then a second statement, with a snapshot taken after the lock, checks that its
  occupant really has ended (the locking statement's re-check of a row changed since its snapshot reads
  ``qm_jobs`` in that old snapshot, where the job a claim just started there may not run yet); a slot
  found taken after all is passed over, and the next one tried;
- none free and fewer than ``n`` rows: the key's slot rows grow (doubling, up to ``n``) under a
  transaction-level advisory lock of the key taken only if free (``pg_try_advisory_xact_lock``): a claim that
  finds another growing the key's slots does not wait (-> 2, busy: the group keeps its turn);

and, a slot of every key found, writes the job and token into each (-> 0); a key with no free slot -> 1
(full). So a job gets a slot of every key or none, and no claim ever waits for another (slot and job rows
are locked ``SKIP LOCKED``, the advisory lock only tried): no deadlock.

The vacuum forgets the free slot rows not taken since its cutoff (``FORGET``): a key with nothing running
for that long has no rows left. ``FILL`` gives the jobs running when a database comes from version 6 (which
counted running rows instead) their slots.
"""

from __future__ import annotations

from ...job import STATE_CODE, State

RUNNING = STATE_CODE[State.RUNNING]

# The occupant of slot row ``l`` still runs with the token it took the slot with.
_HELD = (
    f"EXISTS (SELECT 1 FROM qm_jobs r WHERE r.id = l.job_id AND r.state = {RUNNING} AND r.token = l.token)"
)

DDL = """
CREATE TABLE IF NOT EXISTS qm_limit_slots (
    key text NOT NULL,
    slot integer NOT NULL,
    job_id bigint,
    token bytea,
    taken_us bigint NOT NULL,
    PRIMARY KEY (key, slot)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);
CREATE INDEX IF NOT EXISTS qm_limit_slots_taken ON qm_limit_slots (key, taken_us);
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
    tried integer[];
    s integer;
    i integer;
BEGIN
    SELECT array_agg(u.k ORDER BY u.k), array_agg(u.n ORDER BY u.k) INTO kk, nn
        FROM unnest(p_keys, p_ns) AS u(k, n);
    FOR i IN 1 .. coalesce(cardinality(kk), 0) LOOP
        PERFORM 1 FROM qm_limit_slots l WHERE l.key = kk[i] AND l.slot >= nn[i] AND l.job_id IS NOT NULL
            AND {_HELD} LIMIT 1;
        IF FOUND THEN
            RETURN 1;
        END IF;
        tried := '{{}}';
        LOOP
            SELECT l.slot INTO s FROM qm_limit_slots l
                WHERE l.key = kk[i] AND l.slot < nn[i] AND l.slot <> ALL (tried)
                  AND (l.job_id IS NULL OR NOT {_HELD})
                ORDER BY l.taken_us LIMIT 1 FOR UPDATE OF l SKIP LOCKED;
            IF NOT FOUND THEN
                s := NULL;
                EXIT;
            END IF;
            -- a fresh snapshot, taken after the lock: the occupant a committed claim just wrote is seen
            PERFORM 1 FROM qm_limit_slots l WHERE l.key = kk[i] AND l.slot = s AND l.job_id IS NOT NULL
                AND {_HELD};
            EXIT WHEN NOT FOUND;
            tried := tried || s;
        END LOOP;
        IF s IS NULL THEN
            IF NOT pg_try_advisory_xact_lock(hashtextextended('qm_slots:' || kk[i], 0)) THEN
                RETURN 2;
            END IF;
            -- holding the key's growth lock: every row grown before is committed, and seen here
            WITH made AS (
                INSERT INTO qm_limit_slots (key, slot, job_id, token, taken_us)
                SELECT kk[i], g, NULL, NULL, 0 FROM generate_series(0, nn[i] - 1) g
                WHERE NOT EXISTS (SELECT 1 FROM qm_limit_slots l WHERE l.key = kk[i] AND l.slot = g)
                ORDER BY g
                LIMIT greatest((SELECT count(*) FROM qm_limit_slots l WHERE l.key = kk[i]), 1)
                ON CONFLICT DO NOTHING RETURNING slot)
            SELECT min(made.slot) INTO s FROM made;
            IF s IS NULL THEN
                RETURN 1;
            END IF;
        END IF;
        got := got || s;
    END LOOP;
    UPDATE qm_limit_slots l SET job_id = p_id, token = p_token, taken_us = p_now
        FROM unnest(kk, got) AS t(tk, ts) WHERE l.key = t.tk AND l.slot = t.ts;
    RETURN 0;
END
$fn$;
"""

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
             AND (l.job_id IS NULL OR NOT {_HELD}) LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
DELETE FROM qm_limit_slots l USING old WHERE l.key = old.key AND l.slot = old.slot
    AND l.taken_us <= %(cutoff)s
"""
"""Free slot rows not taken since ``cutoff``, a batch (a slot taken since the statement's snapshot has a
later ``taken_us`` in the row version the delete re-checks, and stays)."""
