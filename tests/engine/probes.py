"""Test-side probes: what a store holds, read (and damaged) past the engine.

A contract test asserts what is stored, not only what the engine returns (STYLE.md: "assert the state on
disk"). It does so through a ``StoreProbe``, never through the store's internals, so that the same test runs
on every store: ``LmdbProbe`` reads the shards' environments; a PostgreSQL probe will run plain SQL. A probe
method that cannot exist on a store raises ``pytest.skip`` with the reason.

This is the one module of the engine tests that knows the LMDB layout (databases, key forms, record fields).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import msgpack

from queue_max_django.engine import Queue, State
from queue_max_django.engine.job import STATES, shard_of
from queue_max_django.engine.stores.lmdb import keys, layout
from queue_max_django.engine.stores.lmdb.access import UNIQUE as _UNIQUE
from tests.faults import corrupt

Where = State | Literal["record", "payload"]
"""What a damage helper removes: a state's index entry for the job, its record, or its external payload."""


@dataclasses.dataclass(frozen=True)
class Stored:
    """One job as the store keeps it, decoded by the probe (not by the engine's readers). Times are µs since
    the epoch, as stored; ``payload`` and ``result`` are their stored msgpack bytes."""

    state: State
    queue: str
    name: str | None
    priority: int
    retries: int
    max_retries: int
    attempts: int
    enqueued_at_us: int
    ready_at_us: int | None
    started_at_us: int | None
    finished_at_us: int | None
    lease_until_us: int | None
    token: bytes | None
    error: str | None
    error_type: str | None
    traceback: str | None
    result: bytes | None
    timeout: Any
    partition_key: Any
    payload: bytes | None
    workers: tuple[str, ...] | None
    errors: tuple[tuple[Any, ...], ...] | None
    claim: Literal["batch", "alone-next"] | None  # how it was last claimed, when that matters to recovery
    metadata: dict[str, Any] | None = None  # the stored metadata as a JSON reader sees it; None: none stored


class StoreProbe(Protocol):
    """What the contract tests read and break in a store, by meaning rather than by layout."""

    kind: str

    def stored(self, job_id: int) -> Stored | None:
        """The job as stored, or None when the store holds no record of it."""

    def shard_of(self, job_id: int) -> int:
        """The shard that holds the job; 0 on a store without shards."""

    def places(self, job_id: int) -> list[str]:
        """Every place the store holds something of the job (record, payload, index entries), by name:
        empty when no trace of it is left."""

    def indexes_naming(self, job_id: int) -> list[State]:
        """The states whose index holds an entry for the job (once per entry)."""

    def index_problems(self) -> list[str]:
        """RFC-INV-08 and its kin: each state's index holds exactly the jobs in that state, once each."""

    def leases(self) -> dict[int, int]:
        """job id -> lease expiry (µs) of every entry of the lease index."""

    def snapshot(self) -> Any:
        """Everything stored, comparable with ``==``: to prove that nothing was written."""

    def coordination_snapshot(self) -> list[Any]:
        """Everything stored of locks and the worker registry, comparable with ``==``: to prove that
        nothing of them was written; ``[]`` when the store holds no lock and no worker."""

    def unique_keys(self) -> dict[str, int]:
        """Every unique key the store remembers -> the id of the job it names (a key outlives its job
        until vacuum forgets it)."""

    def cancel_marks(self) -> set[int]:
        """The ids of the jobs marked "cancel requested" (kept apart from their records)."""

    def record_bytes(self, job_id: int) -> bytes | None:
        """The record's bytes, for a store that keeps a job's record as one msgpack value."""

    # Damage, as a bad disk, a bad copy or a stray write would do it.
    def drop_lease(self, job_id: int) -> None:
        """Remove the running job's lease entry, leaving it running."""

    def drop_payload(self, job_id: int) -> None:
        """Remove the job's payload wherever it is kept."""

    def drop_entry(self, job_id: int, where: Where) -> list[str]:
        """Remove what ``where`` names for the job; -> the words a report of it may use."""

    def stray_entry(self, job_id: int, state: State) -> None:
        """Add an entry for ``job_id`` to ``state``'s index, whatever (if anything) its record says."""

    def steal_claim(self, job_id: int) -> bytes:
        """Give the running job another claim token, as if another holder had claimed it; -> that token."""

    def break_record(self, job_id: int, how: str) -> None:
        """Damage the record one of the ways in ``tests/faults/corrupt.py``'s ``RECORD_DAMAGE``."""

    def break_payload(self, job_id: int) -> None:
        """Make the job's payload bytes undecodable, the record left intact."""

    def break_result(self, job_id: int) -> None:
        """Make the finished job's stored result undecodable, the rest of the record intact."""

    def as_before_metadata(self, job_id: int) -> None:
        """Make the job's stored form what a version before job metadata wrote (LMDB: a record of one field
        less; PostgreSQL: a NULL in the column that upgrading a version 1 schema added)."""

    def break_control(self, what: Literal["limits", "breakers", "locks"], key: str) -> None:
        """Store a value for ``key`` (a limit or breaker key, or a lock name) that does not decode, as if
        written past the engine."""


# ------------------------------------------------------------------------------------------------- LMDB

INDEX_OF_STATE: dict[State, str] = {
    State.PENDING: "ready",
    State.SCHEDULED: "sched",
    State.RUNNING: "lease",
    State.DONE: "done_at",
    State.FAILED: "failed",
}
_CLAIMS: dict[Any, Literal["batch", "alone-next"] | None] = {
    None: None,
    layout.CLAIM_BATCH: "batch",
    layout.CLAIM_ALONE_NEXT: "alone-next",
}


def _index_entry_id(db: str, key: bytes) -> int:
    if db == "ready":
        return keys.ready_key_parts(key)[3]
    if db == "failed":
        return keys.id_from_key(key)
    return keys.time_key_parts(key)[1]


def _json(raw: Any) -> Any:
    """Stored metadata (UTF-8 JSON bytes) as a JSON reader sees it; None for none."""
    assert raw is None or type(raw) is bytes, f"metadata stored as {type(raw).__name__}, not bytes"
    return None if raw is None else json.loads(raw)


def _decode(raw: bytes) -> list[Any] | None:
    """A stored job record as a plain msgpack reader sees it; None for what is not one (the counters)."""
    try:
        record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData):
        return None
    if not isinstance(record, list) or len(record) < layout.F_TIMEOUT:
        return None
    return record + [None] * (layout.RECORD_FIELDS - len(record))


class LmdbProbe:
    """The probe of the LMDB store: reads and writes the shards' environments directly."""

    kind = "lmdb"

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    # The one place that knows how the Queue holds its shards.
    def _shards(self) -> list[Any]:
        return list(self.queue._store._shards)

    # The one place that knows where the Queue keeps its locks and workers.
    def _coordination_env(self) -> Any:
        return self.queue._store.locks.env

    def environments(self) -> list[Any]:
        """The LMDB environment of each shard (LMDB only: not part of ``StoreProbe``)."""
        return [shard.env.env for shard in self._shards()]

    def last_txnids(self) -> list[int]:
        """Each shard's last committed write transaction id (LMDB only: not part of ``StoreProbe``)."""
        return [shard.env.last_txnid() for shard in self._shards()]

    def read_txn(self, shard: int) -> Any:
        """A read transaction on ``shard``, its snapshot taken (it holds a reader slot until it ends; LMDB
        only: not part of ``StoreProbe``)."""
        target = self._shards()[shard]
        txn = target.env.env.begin()
        txn.stat(target.env.dbs["jobs"])
        return txn

    def _shard(self, job_id: int) -> Any:
        return self._shards()[shard_of(job_id)]

    @contextmanager
    def _txn(self, job_id: int, *, write: bool = False) -> Iterator[tuple[Any, dict[str, Any]]]:
        shard = self._shard(job_id)
        with shard.env.env.begin(write=write) as txn:
            yield txn, shard.env.dbs

    def _raw(self, job_id: int, db: str) -> bytes | None:
        with self._txn(job_id) as (txn, dbs):
            value = txn.get(keys.id_key(job_id), db=dbs[db])
        return None if value is None else bytes(value)

    # ------------------------------------------------------------------------------------------- reading

    def shard_of(self, job_id: int) -> int:
        return shard_of(job_id)

    def record_bytes(self, job_id: int) -> bytes | None:
        return self._raw(job_id, "jobs")

    def stored(self, job_id: int) -> Stored | None:
        raw = self.record_bytes(job_id)
        if raw is None:
            return None
        r = _decode(raw)
        assert r is not None, f"job {job_id}: the stored record does not decode"
        external = self._raw(job_id, "payloads")
        return Stored(
            state=STATES[r[layout.F_STATE]],
            queue=r[layout.F_QUEUE],
            name=r[layout.F_NAME],
            priority=r[layout.F_PRIORITY],
            retries=r[layout.F_RETRIES],
            max_retries=r[layout.F_MAX_RETRIES],
            attempts=r[layout.F_ATTEMPTS] or 0,
            enqueued_at_us=r[layout.F_ENQUEUED_AT],
            ready_at_us=r[layout.F_READY_AT],
            started_at_us=r[layout.F_STARTED_AT],
            finished_at_us=r[layout.F_FINISHED_AT],
            lease_until_us=r[layout.F_LEASE_UNTIL],
            token=r[layout.F_TOKEN],
            error=r[layout.F_ERROR],
            error_type=r[layout.F_ERROR_TYPE],
            traceback=r[layout.F_TRACEBACK],
            result=r[layout.F_RESULT],
            timeout=r[layout.F_TIMEOUT],
            partition_key=r[layout.F_PARTITION_KEY],
            payload=external if external is not None else r[layout.F_PAYLOAD],
            workers=None if r[layout.F_WORKERS] is None else tuple(r[layout.F_WORKERS]),
            errors=None if r[layout.F_ERRORS] is None else tuple(tuple(e) for e in r[layout.F_ERRORS]),
            claim=_CLAIMS[r[layout.F_CLAIM]],
            metadata=_json(r[layout.F_METADATA]),
        )

    def snapshot(self) -> dict[tuple[int, str], list[tuple[bytes, bytes]]]:
        out = {}
        for shard in self._shards():
            with shard.env.env.begin() as txn:
                for name, db in shard.env.dbs.items():
                    out[shard.index, name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
        return out

    def coordination_snapshot(self) -> list[tuple[bytes, bytes]]:
        """Every key and value of the control store's locks and workers databases."""
        env = self._coordination_env()
        with env.env.begin() as txn:
            return [
                (name.encode() + b":" + bytes(k), bytes(v))
                for name in ("locks", "workers")
                for k, v in txn.cursor(db=env.dbs[name])
            ]

    def cancel_marks(self) -> set[int]:
        """The ids of the jobs marked "cancel requested", from every shard's ``cancels`` database."""
        marked: set[int] = set()
        for shard in self._shards():
            with shard.env.env.begin() as txn:
                cursor = txn.cursor(db=shard.env.dbs["cancels"])
                marked.update(keys.id_from_key(bytes(key)) for key, _ in cursor)
        return marked

    def unique_keys(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for shard in self._shards():
            with shard.env.env.begin() as txn:
                for key, value in txn.cursor(db=shard.env.dbs["unique"]):
                    name = bytes(key).decode()
                    assert name not in out, f"unique key {name!r} in two shards"
                    out[name] = _UNIQUE.unpack_from(bytes(value))[0]
        return out

    def places(self, job_id: int) -> list[str]:
        """(shard, database) of every key that ends with the job's id: its record, its payload and every
        (…, id) index entry."""
        suffix = keys.id_key(job_id)
        return [
            f"shard {shard} {db}"
            for (shard, db), items in self.snapshot().items()
            for key, _ in items
            if key.endswith(suffix)
        ]

    def _index_ids(self, shard: Any, txn: Any, state: State) -> list[int]:
        db = INDEX_OF_STATE[state]
        return [_index_entry_id(db, k) for k in txn.cursor(db=shard.env.dbs[db]).iternext(values=False)]

    def indexes_naming(self, job_id: int) -> list[State]:
        shard = self._shard(job_id)
        with shard.env.env.begin() as txn:
            return [s for s in INDEX_OF_STATE for found in self._index_ids(shard, txn, s) if found == job_id]

    def index_problems(self) -> list[str]:
        problems = []
        for shard in self._shards():
            with shard.env.env.begin() as txn:
                in_state: dict[State, set[int]] = {state: set() for state in INDEX_OF_STATE}
                for key, value in txn.cursor(db=shard.env.dbs["jobs"]):
                    record = _decode(bytes(value))
                    if record is not None:
                        in_state[STATES[record[layout.F_STATE]]].add(keys.id_from_key(bytes(key)))
                indexed = {state: self._index_ids(shard, txn, state) for state in INDEX_OF_STATE}
            for state, ids in indexed.items():
                name = f"shard {shard.index}: {INDEX_OF_STATE[state]} index"
                if len(ids) != len(set(ids)):
                    problems.append(f"{name}: duplicate entries {sorted(ids)}")
                if set(ids) != in_state[state]:
                    problems.append(f"{name} {sorted(ids)} != {state} {sorted(in_state[state])}")
        return problems

    def leases(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for shard in self._shards():
            with shard.env.env.begin() as txn:
                for key in txn.cursor(db=shard.env.dbs["lease"]).iternext(values=False):
                    expiry, job_id = keys.time_key_parts(key)
                    assert job_id not in out, "two lease entries for one job"
                    out[job_id] = expiry
        return out

    # -------------------------------------------------------------------------------------------- damage

    def _rewrite_record(self, job_id: int, change: Callable[[list[Any]], None]) -> None:
        with self._txn(job_id, write=True) as (txn, dbs):
            key = keys.id_key(job_id)
            record = msgpack.unpackb(txn.get(key, db=dbs["jobs"]))
            change(record)
            txn.put(key, msgpack.packb(record, use_bin_type=True), db=dbs["jobs"])

    def rewrite_job_bytes(
        self, job_id: int, change: Callable[[bytes, bytes | None], tuple[bytes, bytes | None]]
    ) -> None:
        """``change(record bytes, external payload bytes or None)`` -> the new bytes of both (None: leave
        the payload), in one write (tests/faults/corrupt.py's damage; LMDB only: not in ``StoreProbe``)."""
        with self._txn(job_id, write=True) as (txn, dbs):
            key = keys.id_key(job_id)
            raw, payload = txn.get(key, db=dbs["jobs"]), txn.get(key, db=dbs["payloads"])
            assert raw is not None, f"job {job_id} is not on disk"
            new_raw, new_payload = change(bytes(raw), None if payload is None else bytes(payload))
            txn.put(key, new_raw, db=dbs["jobs"])
            if new_payload is not None:
                txn.put(key, new_payload, db=dbs["payloads"])

    def rewrite_record_bytes(self, job_id: int, change: Callable[[bytes], bytes]) -> None:
        """Replace the record's bytes by ``change(its bytes)``, as an older version of the engine would have
        written them (LMDB only: not part of ``StoreProbe``)."""
        with self._txn(job_id, write=True) as (txn, dbs):
            key = keys.id_key(job_id)
            raw = txn.get(key, db=dbs["jobs"])
            assert raw is not None, f"job {job_id} has no record"
            txn.put(key, change(bytes(raw)), db=dbs["jobs"])

    def drop_lease(self, job_id: int) -> None:
        stored = self.stored(job_id)
        assert stored is not None and stored.lease_until_us is not None
        with self._txn(job_id, write=True) as (txn, dbs):
            assert txn.delete(keys.time_key(stored.lease_until_us, job_id), db=dbs["lease"])

    def drop_payload(self, job_id: int) -> None:
        with self._txn(job_id, write=True) as (txn, dbs):
            key = keys.id_key(job_id)
            removed = txn.delete(key, db=dbs["payloads"])
            record = msgpack.unpackb(txn.get(key, db=dbs["jobs"]))
            if record[layout.F_PAYLOAD] is not None:
                record[layout.F_PAYLOAD] = None
                txn.put(key, msgpack.packb(record, use_bin_type=True), db=dbs["jobs"])
                removed = True
        assert removed, f"job {job_id} has no payload to drop"

    def drop_entry(self, job_id: int, where: Where) -> list[str]:
        db = {"record": "jobs", "payload": "payloads"}.get(where) if isinstance(where, str) else None
        db = db or INDEX_OF_STATE[State(where)]
        suffix = keys.id_key(job_id)
        with self._txn(job_id, write=True) as (txn, dbs):
            doomed = [k for k in txn.cursor(db=dbs[db]).iternext(values=False) if k.endswith(suffix)]
            assert len(doomed) == 1, doomed
            txn.delete(doomed[0], db=dbs[db])
        return [db, bytes(doomed[0]).hex()]

    def stray_entry(self, job_id: int, state: State) -> None:
        entry = {
            State.PENDING: keys.ready_key(b"default", 0, 1, job_id),
            State.SCHEDULED: keys.time_key(1, job_id),
            State.RUNNING: keys.time_key(1, job_id),
            State.DONE: keys.time_key(1, job_id),
        }.get(state, keys.id_key(job_id))
        with self._txn(job_id, write=True) as (txn, dbs):
            txn.put(entry, b"", db=dbs[INDEX_OF_STATE[state]])

    def steal_claim(self, job_id: int) -> bytes:
        token = os.urandom(16)

        def change(record: list[Any]) -> None:
            assert record[layout.F_STATE] == STATES.index(State.RUNNING) and record[layout.F_TOKEN]
            record[layout.F_TOKEN] = token

        self._rewrite_record(job_id, change)
        return token

    def break_record(self, job_id: int, how: str) -> None:
        corrupt.RECORD_DAMAGE[how](self.queue, job_id)

    def break_payload(self, job_id: int) -> None:
        corrupt.garbage_payload(self.queue, job_id)

    def break_result(self, job_id: int) -> None:
        corrupt.garbage_result(self.queue, job_id)

    def break_control(self, what: Literal["limits", "breakers", "locks"], key: str) -> None:
        env = self._coordination_env()
        with env.env.begin(write=True) as txn:
            txn.put(key.encode(), corrupt.GARBAGE, db=env.dbs[what])

    def as_before_metadata(self, job_id: int) -> None:
        with self._txn(job_id, write=True) as (txn, dbs):
            record = msgpack.unpackb(txn.get(keys.id_key(job_id), db=dbs["jobs"]), raw=False)
            assert len(record) == layout.RECORD_FIELDS
            txn.put(keys.id_key(job_id), msgpack.packb(record[: layout.F_METADATA]), db=dbs["jobs"])


PROBES: dict[str, Callable[[Queue], StoreProbe]] = {"lmdb": LmdbProbe}
"""The probe of each store kind, by the ``store_kind`` fixture's values."""
