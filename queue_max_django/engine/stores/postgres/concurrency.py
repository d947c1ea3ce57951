"""The PostgreSQL store's concurrency limits (``stores/contract/concurrency.py``).

A limited job's row carries its group (``cgroup``) and its limits (``climits`` keys, ``cns`` sizes). Waiting,
it is only in ``qm_jobs_waiting`` (the claim's own indexes leave limited rows out, so the plain claim never
walks past them); ``qm_turns`` holds each group's place in the turns, from its first put until a claim finds
no job of it left. The jobs running with a key are counted from the running rows (``qm_jobs_limited_running``,
a GIN index of the running rows' keys): whatever ends a job (complete, fail, release, a recovered lease) gives
its slot back with no statement of its own, and the hot statements of unlimited jobs are unchanged.

A claim of a limited job is one transaction per group it tries: the group's next job locked (``FOR UPDATE
SKIP LOCKED``), then a transaction-level advisory lock on each of the job's keys, in key order, then the
count of the running rows with each key, then the job made running. Every claim of a key takes its lock
before it counts, and a claim's lock is released only after its commit is visible, so the count a claim
reads includes every start before it: no number of claims racing passes a limit.
"""

from __future__ import annotations

import collections
from typing import Any

from ...concurrency import SCAN_GROUPS, group_of
from ...errors import QueueCorrupted
from ...jobspec import JobSpec
from ..contract.concurrency import LimitedClaim
from ..types import Claimed
from . import upkeep
from .rows import CLAIM_ALONE_NEXT, CLAIM_BATCH, CLAIMED, CLAIMED_COLUMNS, as_claimed, micros
from .schema import PENDING, RUNNING, SCHEDULED
from .sql import Statements, tally

LIMIT_NEW = """
WITH upd AS (UPDATE qm_jobs SET cgroup = %(cgroup)s, climits = %(keys)s, cns = %(ns)s
             WHERE id = ANY(%(ids)s) RETURNING 1)
INSERT INTO qm_turns (grp, turn) SELECT %(cgroup)s, nextval('qm_turn_seq') WHERE EXISTS (SELECT 1 FROM upd)
ON CONFLICT (grp) DO NOTHING
"""

TURNS = """
SELECT grp FROM qm_turns @FILTER@ ORDER BY turn LIMIT %(scan)s
"""

NEXT_OF_GROUP = f"""
SELECT id, priority, climits, cns, claim FROM qm_jobs WHERE state = {PENDING} AND cgroup COLLATE "C" = %(grp)s
ORDER BY priority DESC, ready_us, id LIMIT 1 FOR UPDATE SKIP LOCKED
"""

LOCK_KEYS = (
    "SELECT pg_advisory_xact_lock(hashtextextended('qm_limit:' || k, 0)) FROM unnest(%(keys)s::text[]) k"
)

RUNNING_OF = f"""
SELECT k, (SELECT count(*) FROM qm_jobs WHERE state = {RUNNING} AND climits @> ARRAY[k])
FROM unnest(%(keys)s::text[]) k
"""

TO_BACK = "UPDATE qm_turns SET turn = nextval('qm_turn_seq') WHERE grp = %(grp)s"

# A group leaves the turns when none of its jobs is live (a scheduled or running one will wait again).
LEAVE_IF_DONE = (
    "DELETE FROM qm_turns WHERE grp = %(grp)s AND NOT EXISTS (SELECT 1 FROM qm_jobs WHERE cgroup = %(grp)s)"
)

START = f"""
WITH upd AS (
    UPDATE qm_jobs j SET state = {RUNNING}, started_us = %(now)s, lease_us = %(lease)s, token = %(token)s,
        attempts = j.attempts + 1, worker_ids = CASE WHEN %(worker)s::text IS NULL THEN j.worker_ids
            ELSE (j.worker_ids || %(worker)s::text)[greatest(cardinality(j.worker_ids) - 8, 1):] END,
        claim = NULL
    WHERE j.id = %(id)s AND j.state = ANY(%(states)s)
    RETURNING {", ".join("j." + c.strip() for c in CLAIMED.split(","))}, %(was)s::smallint AS was),
{tally(("upd", "was", -1), ("upd", str(RUNNING), 1))}
SELECT * FROM upd
"""

# Do limited jobs wait (of the claim's queues: a range of the waiting index per queue, as a group's name
# starts with its queue's and chr(31))?
WAITING_ANY = f"EXISTS (SELECT 1 FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NOT NULL)"
WAITING_IN = f"""
EXISTS (SELECT 1 FROM unnest(%(queues)s::text[]) q WHERE EXISTS (
    SELECT 1 FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NOT NULL
    AND cgroup COLLATE "C" > q || chr(31) AND cgroup COLLATE "C" < q || chr(32)))
"""

FILTER = "WHERE split_part(grp, chr(31), 1) = ANY(%(queues)s)"

RUNNING_ALL = f"""
SELECT k, count(*) FROM qm_jobs, unnest(climits) k WHERE state = {RUNNING} AND climits IS NOT NULL
GROUP BY k ORDER BY k
"""

MARK_BATCH = (
    f"UPDATE qm_jobs SET claim = {CLAIM_BATCH} WHERE id = ANY(%(ids)s) AND token = %(token)s RETURNING 1"
)

WAITING_ALL = f"""
SELECT cgroup, count(*) FROM qm_jobs WHERE state = {PENDING} AND cgroup IS NOT NULL
GROUP BY cgroup ORDER BY cgroup
"""


def limit_new(ids: list[int], spec: JobSpec, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The statement that makes the new jobs ``ids`` of ``spec`` limited (run in the put's transaction)."""
    limits = spec.concurrency
    assert limits is not None
    params.update(ids=list(ids), cgroup=group_of(spec.queue, limits), keys=[key for key, _n in limits],
                  ns=[n for _key, n in limits])  # fmt: skip
    return LIMIT_NEW, params


def _filtered(sql: str, queues: tuple[str, ...] | None) -> str:
    return sql.replace("@FILTER@", FILTER if queues is not None else "")


class PgConcurrency:
    """``Store.concurrency`` of a ``PostgresStore``."""

    def __init__(self, store: Statements) -> None:
        self._store = store

    def _try(
        self,
        conn: Any,
        group: str | None,
        job_id: int | None,
        min_priority: int | None,
        params: dict[str, Any],
        alone_ok: bool = True,
    ) -> tuple[str, Any]:
        """One attempt, inside the caller's transaction on ``conn``: the next job of ``group`` (or the job
        ``job_id``). -> ("claimed", row), ("held", None), ("none", None) or ("low", None)."""
        if group is not None:
            found = conn.execute(NEXT_OF_GROUP, {"grp": group}).fetchone()
        else:
            found = conn.execute(
                "SELECT id, priority, climits, cns, claim, state FROM qm_jobs WHERE id = %(id)s "
                "AND cgroup IS NOT NULL AND state = ANY(%(states)s) FOR UPDATE SKIP LOCKED",
                {"id": job_id, "states": params["states"]},
            ).fetchone()
        if found is None:
            return "none", None
        found_id, priority, keys, ns, claim = found[:5]
        if min_priority is not None and priority < min_priority:
            return "low", None
        if claim == CLAIM_ALONE_NEXT and not alone_ok:
            return "alone", None
        ordered = sorted(zip(keys, ns, strict=True))
        conn.execute(LOCK_KEYS, {"keys": [key for key, _n in ordered]})
        running = dict(conn.execute(RUNNING_OF, {"keys": [key for key, _n in ordered]}).fetchall())
        if any(running.get(key, 0) >= n for key, n in ordered):
            return "held", None
        was = found[5] if group is None else PENDING
        row = conn.execute(START, {**params, "id": found_id, "was": was}).fetchone()
        return ("claimed", (row, claim == CLAIM_ALONE_NEXT)) if row is not None else ("none", None)

    def _claimed(self, now: float, found: Any) -> Claimed | None:
        row, alone = found
        try:
            return as_claimed(row[:CLAIMED_COLUMNS], alone)
        except QueueCorrupted as exc:
            upkeep.quarantine(self._store, micros(now), row[0], str(exc))
            return None

    def claim(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        lease_time: float,
        token: bytes,
        worker: str | None,
        min_priority: int | None,
        limit: int = 1,
    ) -> LimitedClaim:
        store = self._store
        listed = None if queues is None else list(queues)
        store.one(upkeep.PROMOTE, store.params(now=micros(now), batch=upkeep.BATCH))
        params = store.params(now=micros(now), lease=micros(now + lease_time), token=token, worker=worker,
                              states=[PENDING])  # fmt: skip
        found = store.rows(_filtered(TURNS, queues), {"queues": listed, "scan": SCAN_GROUPS})
        cycle = collections.deque(row[0] for row in found)
        taken: list[Claimed] = []
        while cycle and len(taken) < limit:
            group = cycle.popleft()
            with store.db.transaction() as conn:
                outcome, row = self._try(conn, group, None, min_priority, params, alone_ok=not taken)
                if outcome in ("held", "claimed"):
                    conn.execute(TO_BACK, {"grp": group})
                elif outcome == "none":
                    conn.execute(LEAVE_IF_DONE, {"grp": group})
            if outcome == "alone":
                break  # its lease once expired: the next claim takes it, alone
            if outcome == "claimed":
                claimed = self._claimed(now, row)
                if claimed is not None:
                    taken.append(claimed)
                    if claimed.alone:
                        break
                cycle.append(group)
        if len(taken) > 1:  # a batch: an expired lease sends them back uncharged (as Store.claim)
            store.one(MARK_BATCH, {"ids": [job.job_id for job in taken], "token": token})
        return LimitedClaim(taken, self._waiting(listed, queues))

    def _waiting(self, listed: list[str] | None, queues: tuple[str, ...] | None) -> bool:
        waiting = "SELECT " + (WAITING_ANY if queues is None else WAITING_IN)
        return bool(self._store.one(waiting, {"queues": listed})[0])

    def claim_job(
        self,
        now: float,
        job_id: int,
        lease_time: float,
        token: bytes,
        worker: str | None,
        scheduled_too: bool,
    ) -> Claimed | None:
        """``Store.claim_job`` of a limited job: only if its limits let it start now."""
        store = self._store
        params = store.params(now=micros(now), lease=micros(now + lease_time), token=token, worker=worker,
                              states=[PENDING, SCHEDULED] if scheduled_too else [PENDING])  # fmt: skip
        with store.db.transaction() as conn:
            outcome, row = self._try(conn, None, job_id, None, params)
        return self._claimed(now, row) if outcome == "claimed" else None

    def running(self) -> dict[str, int]:
        return {key: count for key, count in self._store.rows(RUNNING_ALL, None)}

    def waiting(self) -> dict[str, int]:
        return {group: count for group, count in self._store.rows(WAITING_ALL, None)}
