"""``PgProbe``: the ``StoreProbe`` of the PostgreSQL store (tests/engine/probes.py has the protocol): plain
SQL on the store's database, on a connection of its own, past the engine's readers.

A row is a job's one place, indexed by the partial index of its state, so what the LMDB probe finds as
separate records, payloads and index entries is one row here; damage that a typed row or a CHECK
constraint makes impossible (a lost lease, a stray entry, a half-written record) skips with the reason.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Literal

import msgpack
import pytest

from queue_max_django.engine import Queue, State
from queue_max_django.engine.job import STATES
from tests import pgserver
from tests.engine.probes import Stored, Where
from tests.faults import corrupt

_LIVE = "qm_jobs"
_FINISHED = "qm_finished"
_CLAIMS: dict[Any, Any] = {None: None, 1: "batch", 2: "alone-next"}
_TABLES = ("qm_jobs", "qm_finished", "qm_counts", "qm_unique", "qm_limits", "qm_breakers", "qm_flow",
           "qm_locks", "qm_workers")  # fmt: skip
_UNDECODABLE = corrupt.GARBAGE  # starts with 0xc1, never valid msgpack


class PgProbe:
    kind = "postgres"

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.url: str = queue._store.url  # type: ignore[attr-defined]
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        """A connection of the probe's own, opened on first use and closed with the probe."""
        if self._conn is None:
            self._conn = pgserver.connect(self.url)
            weakref.finalize(self, self._conn.close)
        return self._conn

    def _row(self, job_id: int) -> tuple[str, dict[str, Any]] | None:
        for table in (_LIVE, _FINISHED):
            cursor = self.conn.execute(f"SELECT * FROM {table} WHERE id = %s", (job_id,))
            row = cursor.fetchone()
            if row is not None:
                names = [column.name for column in cursor.description or ()]
                return table, dict(zip(names, row, strict=True))
        return None

    # ------------------------------------------------------------------------------------------- reading

    def shard_of(self, job_id: int) -> int:
        return 0

    def stored(self, job_id: int) -> Stored | None:
        found = self._row(job_id)
        if found is None:
            return None
        _table, r = found
        key = r["partition_key"]
        return Stored(
            state=STATES[r["state"]],
            queue=r["queue"],
            name=r["name"],
            priority=r["priority"],
            retries=r["retries"],
            max_retries=r["max_retries"],
            attempts=r["attempts"] or 0,
            enqueued_at_us=r["enqueued_us"],
            ready_at_us=r.get("ready_us"),
            started_at_us=r["started_us"],
            finished_at_us=r.get("finished_us"),
            lease_until_us=r.get("lease_us"),
            token=None if r.get("token") is None else bytes(r["token"]),
            error=r["error"],
            error_type=r["error_type"],
            traceback=r["traceback"],
            result=None if r.get("result") is None else bytes(r["result"]),
            timeout=r["timeout"],
            partition_key=None if key is None else msgpack.unpackb(key, raw=False),
            payload=None if r["payload"] is None else bytes(r["payload"]),
            workers=tuple(r["worker_ids"]) or None,
            errors=tuple(zip(r["error_types"], r["error_msgs"], strict=True)) or None,
            claim=_CLAIMS[r.get("claim")],
            metadata=r["metadata"],  # jsonb, as psycopg reads it: a dict
        )

    def places(self, job_id: int) -> list[str]:
        found = self._row(job_id)
        places = [] if found is None else [found[0]]
        if self.conn.execute("SELECT 1 FROM qm_unique WHERE job_id = %s", (job_id,)).fetchone():
            places.append("qm_unique")
        return places

    def indexes_naming(self, job_id: int) -> list[State]:
        found = self._row(job_id)
        return [] if found is None else [STATES[found[1]["state"]]]

    def index_problems(self) -> list[str]:
        """The counter rows against the jobs, and each table's states (a row is its state's index entry)."""
        problems = []
        rows = self.conn.execute(
            "WITH actual AS (SELECT queue, state, count(*) AS n FROM qm_jobs GROUP BY 1, 2 UNION ALL "
            "SELECT queue, state, count(*) FROM qm_finished GROUP BY 1, 2), "
            "kept AS (SELECT queue, state, sum(n) AS n FROM qm_counts WHERE state >= 0 GROUP BY 1, 2) "
            "SELECT queue, state, coalesce(a.n, 0), coalesce(k.n, 0) FROM actual a FULL JOIN kept k "
            "USING (queue, state) WHERE coalesce(a.n, 0) <> coalesce(k.n, 0)"
        ).fetchall()
        for queue, state, actual, kept in rows:
            problems.append(f"{queue!r} {STATES[state].value}: {actual} jobs, counted {kept}")
        for table, states in ((_LIVE, (0, 1, 2)), (_FINISHED, (3, 4))):
            for (job_id,) in self.conn.execute(
                f"SELECT id FROM {table} WHERE NOT state = ANY(%s)", (list(states),)
            ).fetchall():
                problems.append(f"job {job_id} is in {table} in another state")
        both = self.conn.execute("SELECT id FROM qm_jobs JOIN qm_finished USING (id)").fetchall()
        problems.extend(f"job {job_id} is both live and finished" for (job_id,) in both)
        return problems

    def leases(self) -> dict[int, int]:
        return dict(self.conn.execute("SELECT id, lease_us FROM qm_jobs WHERE state = 2").fetchall())

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for table in _TABLES:
            out[table] = self.conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        out["qm_job_ids"] = self.conn.execute("SELECT last_value, is_called FROM qm_job_ids").fetchone()
        return out

    def coordination_snapshot(self) -> list[Any]:
        return [
            *self.conn.execute("SELECT * FROM qm_locks ORDER BY name").fetchall(),
            *self.conn.execute("SELECT * FROM qm_workers ORDER BY worker_id").fetchall(),
        ]

    def cancel_marks(self) -> set[int]:
        return {row[0] for row in self.conn.execute("SELECT job_id FROM qm_cancels").fetchall()}

    def unique_keys(self) -> dict[str, int]:
        rows = self.conn.execute("SELECT key, job_id FROM qm_unique").fetchall()
        return {bytes(key).decode(): job_id for key, job_id in rows}

    def record_bytes(self, job_id: int) -> bytes | None:
        pytest.skip("the PostgreSQL store keeps a job as a typed row, not as one msgpack value")

    # ------------------------------------------------------------------------------------------- damage

    def drop_lease(self, job_id: int) -> None:
        pytest.skip("a running job without a lease cannot be stored: a CHECK constraint refuses it")

    def drop_payload(self, job_id: int) -> None:
        pytest.skip("a live job's payload is a NOT NULL column of its row")

    def drop_entry(self, job_id: int, where: Where) -> list[str]:
        pytest.skip("a job's row is its one place: there is no separate record, payload or index entry")

    def stray_entry(self, job_id: int, state: State) -> None:
        pytest.skip("a state's index is a partial index of the rows: it cannot hold a stray entry")

    def steal_claim(self, job_id: int) -> bytes:
        token = os.urandom(16)
        self.conn.execute("UPDATE qm_jobs SET token = %s WHERE id = %s AND state = 2", (token, job_id))
        return token

    def break_record(self, job_id: int, how: str) -> None:
        pytest.skip("a row's columns are typed and written whole: it cannot be half-written or garbled")

    def break_payload(self, job_id: int) -> None:
        for table in (_LIVE, _FINISHED):
            self.conn.execute(f"UPDATE {table} SET payload = %s WHERE id = %s", (_UNDECODABLE, job_id))

    def as_before_metadata(self, job_id: int) -> None:
        for table in (_LIVE, _FINISHED):
            self.conn.execute(f"UPDATE {table} SET metadata = NULL WHERE id = %s", (job_id,))

    def break_result(self, job_id: int) -> None:
        self.conn.execute("UPDATE qm_finished SET result = %s WHERE id = %s", (_UNDECODABLE, job_id))

    def break_control(self, what: Literal["limits", "breakers", "locks"], key: str) -> None:
        if what == "locks":  # an owner without its times: the one way a typed row cannot be read
            self.conn.execute(
                "INSERT INTO qm_locks (name, owner) VALUES (%s, 'someone') ON CONFLICT (name) DO UPDATE "
                "SET owner = 'someone', expires_us = NULL, since_us = NULL",
                (key,),
            )
            return
        self.conn.execute(
            f"INSERT INTO qm_{what} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = %s",
            (key, _UNDECODABLE, _UNDECODABLE),
        )
