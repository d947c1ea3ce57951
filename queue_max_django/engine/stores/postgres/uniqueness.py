"""Unique keys in the PostgreSQL store (``contract/uniqueness.py``): each put's decision, in the put's
transaction (the caller's, with ``connection``). ``qm_unique`` holds one row per key (its primary key):
(key, holder id, µs taken, hold, window end µs).

A put first inserts the key's row (``ON CONFLICT DO NOTHING``): that waits for a transaction that inserted
the same key and has not committed, so of two transactions racing on one key, the second decides after the
first committed (or rolled back). A key already there is locked (``FOR UPDATE``, in a statement of its own,
so that the holder's state is read in a snapshot taken after the lock was granted: a subquery of the
locking statement would read the holder in the snapshot from before the wait, and miss a holder that the
transaction it waited for wrote), then its holder read, then decided as ``holds`` says, by the same rules
as the other stores. Duplicates are counted in ``qm_counts`` rows of their own state codes, through the
journal (a new row each: no counter lock taken in the middle of a put).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import DuplicateJob, StoreError
from ..contract.uniqueness import (
    HOLD_FINISHED,
    HOLD_STARTED,
    ON_DUPLICATE_RAISE,
    ON_DUPLICATE_REPLACE,
    UniqueRule,
    counted,
    holds,
    until_of,
)
from ..types import NewJobs
from .rows import micros
from .schema import DUPLICATES_REPLACED, DUPLICATES_SKIPPED, PENDING, SCHEDULED
from .sql import notify_if, tally

Execute = Callable[[str, Any], Any]

TAKE = """
INSERT INTO qm_unique (key, job_id, used_us, hold, until_us) VALUES (%(key)s, 0, %(now)s, %(hold)s, %(until)s)
ON CONFLICT DO NOTHING RETURNING 1
"""
LOCK = "SELECT job_id, hold, until_us FROM qm_unique WHERE key = %(key)s FOR UPDATE"
STATE = "SELECT state FROM qm_jobs WHERE id = %s"
RETAKE = (
    "UPDATE qm_unique SET job_id = 0, used_us = %(now)s, hold = %(hold)s, until_us = %(until)s "
    "WHERE key = %(key)s"
)
NAME = "UPDATE qm_unique SET job_id = %s WHERE key = %s"
SKIPPED = f"""
WITH d AS (SELECT %(queue)s::text AS queue),
{tally(("d", str(DUPLICATES_SKIPPED), 1), journal=True)}
SELECT 1
"""
REPLACE = f"""
WITH old AS (SELECT id, state AS was FROM qm_jobs
             WHERE id = %(id)s AND state IN ({PENDING}, {SCHEDULED}) FOR UPDATE),
upd AS (
    UPDATE qm_jobs j SET payload = %(payload)s, metadata = %(metadata)s::text::jsonb, ready_us = %(ready)s,
        state = %(state)s
    FROM old WHERE j.id = old.id RETURNING j.id, j.queue, old.was),
{
    tally(
        ("upd", "was", -1),
        ("upd", "%(state)s", 1),
        ("upd", str(DUPLICATES_REPLACED), "%(counted)s"),
        journal=True,
    )
}
SELECT (SELECT id FROM upd), {notify_if("EXISTS (SELECT 1 FROM upd)")}
"""
ATTEMPTS = 5  # a key's row that vacuum removes between the insert and the lock: insert again


def decide(store: Any, execute: Execute, batch: NewJobs, rule: UniqueRule, now_us: int) -> int | None:
    """The put of ``batch`` (one payload) with ``rule``: None, write the job (the key's row names job 0
    until ``name``); else the holder's id, the batch a duplicate. ``DuplicateJob`` for ``raise`` (the
    caller rolls the transaction, or its savepoint, back)."""
    batch.unique_hit = batch.replaced = False
    params = {"key": rule.key, "now": now_us, "hold": rule.hold, "until": until_of(rule, now_us)}
    for _attempt in range(ATTEMPTS):
        if execute(TAKE, params).fetchone() is not None:
            return None  # a new key
        row = execute(LOCK, params).fetchone()
        if row is not None:
            break
    else:
        raise StoreError(f"unique key {rule.text!r}: its row came and went {ATTEMPTS} times in a row")
    job_id, hold, until_us = row
    state = None
    if hold in (HOLD_STARTED, HOLD_FINISHED) or rule.on_duplicate == ON_DUPLICATE_REPLACE:
        found = execute(STATE, (job_id,)).fetchone()
        state = None if found is None else found[0]
    if not holds(hold, until_us, state, now_us):
        execute(RETAKE, params)
        return None
    if rule.on_duplicate == ON_DUPLICATE_RAISE:
        raise DuplicateJob(job_id, rule.text)
    if rule.on_duplicate == ON_DUPLICATE_REPLACE:
        if state not in (PENDING, SCHEDULED) or not _replace(store, execute, job_id, batch, rule, now_us):
            execute(RETAKE, params)  # not waiting: untouched, and the new job takes the key
            return None
        batch.replaced = True
    elif counted(rule):
        execute(SKIPPED, store.params(queue=batch.spec.queue))
    batch.unique_hit = True
    return int(job_id)


def _replace(
    store: Any, execute: Execute, job_id: int, batch: NewJobs, rule: UniqueRule, now_us: int
) -> bool:
    """The waiting job takes the batch's payload, metadata and ready time. -> False if it was no longer
    waiting (a claim took it first)."""
    spec = batch.spec
    ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
    params = store.params(
        id=job_id, payload=bytes(batch.payloads[0]), ready=max(ready_us, now_us),
        metadata=None if spec.metadata is None else spec.metadata.decode(),
        state=SCHEDULED if ready_us > now_us else PENDING, counted=int(counted(rule)),
    )  # fmt: skip
    replaced, _sent = execute(REPLACE, params).fetchone()
    if replaced is not None:
        store.hints.local()
    return replaced is not None


def name(execute: Execute, rule: UniqueRule, job_id: int) -> None:
    """The key's row names the new job ``job_id`` (written in the same transaction)."""
    execute(NAME, (job_id, rule.key))


VACUUM = f"""
WITH old AS (
    SELECT u.key FROM qm_unique u
    WHERE CASE u.hold WHEN 0 THEN u.used_us <= %(cutoff)s
                      WHEN 3 THEN u.used_us <= %(cutoff)s OR u.until_us <= %(now)s
                      ELSE NOT EXISTS (SELECT 1 FROM qm_jobs j WHERE j.id = u.job_id
                                       AND j.state < CASE u.hold WHEN {HOLD_STARTED} THEN 2 ELSE 3 END) END
    LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
DELETE FROM qm_unique u USING old WHERE u.key = old.key
"""
"""Vacuum: the keys that hold nothing now, and the remembered or window keys used before the cutoff."""

COUNTS = f"""
SELECT coalesce(sum(n) FILTER (WHERE state = {DUPLICATES_SKIPPED}), 0),
       coalesce(sum(n) FILTER (WHERE state = {DUPLICATES_REPLACED}), 0)
FROM qm_counts WHERE state IN ({DUPLICATES_SKIPPED}, {DUPLICATES_REPLACED})
"""
