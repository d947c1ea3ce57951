"""The in-memory store in the engine's tests: ``MemoryProbe`` (the ``StoreProbe`` of tests/engine/probes.py,
reading the store's ``Space`` past the engine) and how a test's memory store is opened, found, copied and
removed (tests/engine/locations.py's registries; tests/engine/conftest.py registers them).

A memory store lives in one process: a test that starts child processes on its store, or that damages
what only a file or a row can hold (a half-written record, a lost lease entry), skips with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from typing import Any, Literal

import pytest

from queue_max_django.engine import AsyncQueue, Queue, State
from queue_max_django.engine.stores.memory import store as memory
from queue_max_django.engine.stores.memory.space import CLAIM_ALONE_NEXT, CLAIM_BATCH, Row, Space
from tests.engine.probes import Stored, Where
from tests.faults import corrupt

SCHEME = "memory://"
ONE_PROCESS = "a memory store lives in one process: a child process cannot open it"
_LMDB_SHAPE = ("shards", "map_size", "map_size_max", "writemap")
_CLAIMS: dict[Any, Any] = {None: None, CLAIM_BATCH: "batch", CLAIM_ALONE_NEXT: "alone-next"}


def new_location() -> str:
    return SCHEME + "test-" + uuid.uuid4().hex


def _options(options: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in options.items() if name not in _LMDB_SHAPE}


def open_queue(where: str, options: dict[str, Any]) -> Queue:
    return Queue(where, **_options(options))


def open_async(where: str, options: dict[str, Any]) -> AsyncQueue:
    return AsyncQueue(where, **_options(options))


def exists(where: str) -> bool:
    """Whether anything was written to the store (a refused Queue(...) writes nothing)."""
    name = where.removeprefix(SCHEME)
    if not memory.exists(name):
        return False
    space = memory.space_named(name)
    return bool(space.rows or space.unique or space.limits or space.breakers or space.locks or space.workers)


def sibling(where: str, name: str) -> str:
    return new_location()


def remove(where: str) -> None:
    memory.forget(where.removeprefix(SCHEME))


class MemoryProbe:
    kind = "memory"

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.space: Space = queue._store.space  # type: ignore[attr-defined]

    def _row(self, job_id: int) -> Row | None:
        return self.space.rows.get(job_id)

    # ------------------------------------------------------------------------------------------- reading

    def shard_of(self, job_id: int) -> int:
        return 0

    def stored(self, job_id: int) -> Stored | None:
        r = self._row(job_id)
        if r is None:
            return None
        return Stored(
            state=r.state, queue=r.queue, name=r.name, priority=r.priority, retries=r.retries,
            max_retries=r.max_retries, attempts=r.attempts, enqueued_at_us=r.enqueued_us,
            ready_at_us=r.ready_us if r.state in (State.PENDING, State.SCHEDULED) else None,
            started_at_us=r.started_us, finished_at_us=r.finished_us, lease_until_us=r.lease_us,
            token=r.token, error=r.error, error_type=r.error_type, traceback=r.traceback, result=r.result,
            timeout=r.timeout, partition_key=r.partition_key, payload=r.payload,
            workers=tuple(r.worker_ids) or None, errors=tuple(r.errors) or None, claim=_CLAIMS[r.claim],
            metadata=None if r.metadata is None else json.loads(r.metadata),
        )  # fmt: skip

    def places(self, job_id: int) -> list[str]:
        places = [] if self._row(job_id) is None else ["rows"]
        places += [f"unique {key!r}" for key, (found, _) in self.space.unique.items() if found == job_id]
        return places

    def indexes_naming(self, job_id: int) -> list[State]:
        space = self.space
        named = [
            State.PENDING for entries in space.ready.values() for *_, found in entries if found == job_id
        ]
        named += [State.SCHEDULED for _at, found in space.scheduled if found == job_id]
        named += [State.RUNNING for _at, found in space.leases if found == job_id]
        named += [State.DONE for _at, found in space.done if found == job_id]
        row = self._row(job_id)
        return named + ([State.FAILED] if row is not None and row.state is State.FAILED else [])

    def index_problems(self) -> list[str]:
        from queue_max_django.engine.stores.memory import reads

        with self.space.lock:
            return [p for p in reads.verify(self.space) if "index" in p or "counts" in p]

    def leases(self) -> dict[int, int]:
        return {job_id: at for at, job_id in self.space.leases}

    def snapshot(self) -> Any:
        space = self.space
        return (
            {job_id: dataclasses.astuple(row) for job_id, row in space.rows.items()},
            dict(space.unique), dict(space.cancels), dict(space.limits), dict(space.breakers),
            dict(space.locks), {key: dict(value) for key, value in space.workers.items()},
            dict(space.enqueued), dict(space.left), space.sequence, dict(space.samples),
        )  # fmt: skip

    def coordination_snapshot(self) -> list[Any]:
        return [
            *sorted(self.space.locks.items()),
            *sorted((k, sorted(v.items())) for k, v in self.space.workers.items()),
        ]

    def cancel_marks(self) -> set[int]:
        return set(self.space.cancels)

    def unique_keys(self) -> dict[str, int]:
        return {key.decode(): entry[0] for key, entry in self.space.unique.items()}

    def record_bytes(self, job_id: int) -> bytes | None:
        pytest.skip("the memory store keeps a job as a Python object, not as one msgpack value")

    # ------------------------------------------------------------------------------------------- damage

    def drop_lease(self, job_id: int) -> None:
        pytest.skip(
            "the memory store's index of leases is written only with its rows: nothing drops an entry"
        )

    def drop_payload(self, job_id: int) -> None:
        pytest.skip("a memory store's row always has its payload")

    def drop_entry(self, job_id: int, where: Where) -> list[str]:
        pytest.skip("the memory store's indexes are written only with its rows: nothing drops an entry")

    def stray_entry(self, job_id: int, state: State) -> None:
        pytest.skip("the memory store's indexes are written only with its rows: nothing adds a stray entry")

    def steal_claim(self, job_id: int) -> bytes:
        token = os.urandom(16)
        row = self._row(job_id)
        assert row is not None and row.state is State.RUNNING
        row.token = token
        return token

    def break_record(self, job_id: int, how: str) -> None:
        pytest.skip("a memory store's row is a Python object: it cannot be half-written or garbled")

    def break_payload(self, job_id: int) -> None:
        row = self._row(job_id)
        assert row is not None
        row.payload = corrupt.GARBAGE

    def break_result(self, job_id: int) -> None:
        row = self._row(job_id)
        assert row is not None
        row.result = corrupt.GARBAGE

    def break_control(self, what: Literal["limits", "breakers", "locks"], key: str) -> None:
        if what == "locks":
            pytest.skip("a memory store's lock is a Python tuple, never bytes: it cannot fail to decode")
        values: dict[str, bytes] = self.space.limits if what == "limits" else self.space.breakers
        with self.space.lock:
            values[key] = corrupt.GARBAGE  # as flowstate reads them: packed bytes, here not its own
            self.space.flow_version += 1

    def as_before_metadata(self, job_id: int) -> None:
        row = self._row(job_id)
        assert row is not None
        row.metadata = None
