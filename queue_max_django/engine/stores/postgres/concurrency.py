"""The PostgreSQL store's concurrency limits (``stores/contract/concurrency.py``).

A limited job's row carries its group (``cgroup``) and its limits (``climits`` keys, ``cns`` sizes); a
dead letter keeps them in ``qm_finished``, and a requeue puts them back (``upkeep.requeue``). Waiting, it
is only in ``qm_jobs_waiting`` (the claim's own indexes leave limited rows out, so the plain claim never
walks past them); ``qm_turns`` holds each group's place in the turns, from its first put (or requeue) until
a claim finds no job of it left.

A running limited job holds a slot of each of its keys (``qm_limit_slots``, ``limitslots.py``): a row
naming the job and its claim's token, written in the claim's transaction. Whatever ends the job (complete,
fail, release, a recovered lease, cancel, delete) frees its slots with no statement of its own: a slot whose
job no longer runs with that token is free. A claim of limited jobs is one call of the server-side function
``qm_claim_limited`` (``limitfn.py``): the group's next job locked, a free slot of each of its keys taken
(``qm_take_slots``), then the start; claims of one key take different slots side by side, and a key has at
most ``n`` slots, so no number of claims racing passes a limit. ``claim_job`` of a limited job takes its
slots the same way, in a transaction of a few statements. ``running()`` counts the running rows
(``qm_jobs_limited_running``): what the stats show, never what a claim decides on.
"""

from __future__ import annotations

from typing import Any

from ...concurrency import SCAN_GROUPS, Skip, group_of
from ...errors import QueueCorrupted
from ...jobspec import JobSpec
from ..contract.concurrency import LimitedClaim
from ..types import Claimed
from . import upkeep
from .limitslots import TAKEN
from .rows import CLAIM_ALONE_NEXT, CLAIMED, CLAIMED_COLUMNS, as_claimed, micros
from .schema import PENDING, RUNNING, SCHEDULED
from .sql import Statements, slot, tally

LIMIT_NEW = """
WITH upd AS (UPDATE qm_jobs SET cgroup = %(cgroup)s, climits = %(keys)s, cns = %(ns)s
             WHERE id = ANY(%(ids)s) RETURNING 1)
INSERT INTO qm_turns (grp, turn) SELECT %(cgroup)s, nextval('qm_turn_seq') WHERE EXISTS (SELECT 1 FROM upd)
ON CONFLICT (grp) DO NOTHING
"""


NEXT_OF_GROUP = f"""
SELECT id, priority, climits, cns, claim FROM qm_jobs WHERE state = {PENDING} AND cgroup COLLATE "C" = %(grp)s
ORDER BY priority DESC, ready_us, id LIMIT 1 FOR UPDATE SKIP LOCKED
"""

TAKE_SLOTS = (
    "SELECT qm_take_slots(%(id)s::bigint, %(keys)s::text[], %(ns)s::integer[], %(token)s::bytea, "
    "%(now)s::bigint)"
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


RUNNING_ALL = f"""
SELECT k, count(*) FROM qm_jobs, unnest(climits) k WHERE state = {RUNNING} AND climits IS NOT NULL
GROUP BY k ORDER BY k
"""

CLAIM_LIMITED = """
SELECT * FROM qm_claim_limited(%(queues)s::text[], %(min)s::integer, %(limit)s::integer, %(now)s::bigint,
    %(lease)s::bigint, %(token)s::bytea, %(worker)s::text, %(slot)s::bigint, %(scan)s::integer,
    %(skip)s::text[])
"""


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


class PgConcurrency:
    """``Store.concurrency`` of a ``PostgresStore``."""

    passes_paused_tasks = True  # its claim takes ``skip`` (stores/contract/concurrency.py)

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
        took = conn.execute(TAKE_SLOTS, {"id": found_id, "keys": keys, "ns": ns, "token": params["token"],
                                         "now": params["now"]}).fetchone()[0]  # fmt: skip
        if took != TAKEN:
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
        skip: Skip | None = None,
    ) -> LimitedClaim:
        """One round trip for the due jobs' promotion, one for the claim (``limitfn.py``), one for whether
        limited jobs still wait. ``skip``: the paused tasks whose jobs the claim passes over."""
        store = self._store
        listed = None if queues is None else list(queues)
        passed = [f"{queue}\x1f{name}" for queue, names in (skip or {}).items() for name in sorted(names)]
        store.one(upkeep.PROMOTE, store.params(now=micros(now), batch=upkeep.BATCH))
        rows = store.rows(CLAIM_LIMITED, {
            "queues": listed, "min": min_priority, "limit": limit, "now": micros(now),
            "lease": micros(now + lease_time), "token": token, "worker": worker, "slot": slot(),
            "scan": SCAN_GROUPS, "skip": passed or None,
        })  # fmt: skip
        taken: list[Claimed] = []
        for row in rows:
            claimed = self._claimed(now, (row[:CLAIMED_COLUMNS], row[CLAIMED_COLUMNS]))
            if claimed is not None:
                taken.append(claimed)
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
