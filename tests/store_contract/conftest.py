"""The store contract suite: the statements of ``engine/stores/base.py``, each tagged ``[sc_...]`` there and
carried here as a marker by the tests that prove it, run against the ``Store`` itself (not through a
``Queue``) for every kind of ``tests/stores.py``'s ``KINDS``: one ``store`` fixture opens an empty store of
each kind (river's ``riverdrivertest``: one exercise that every driver calls). A test that needs what a
store may leave out asks its capability flag, never its kind."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from queue_max_django.engine import codec
from queue_max_django.engine.job import Job
from queue_max_django.engine.jobspec import JobSpec
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.uniqueness import UniqueRule
from queue_max_django.engine.stores.types import Claimed, NewJobs
from queue_max_django.engine.tokens import new_token
from tests.engine.conftest import FakeClock
from tests.engine.pgprobe import PgProbe
from tests.engine.probes import PROBES, StoreProbe
from tests.stores import KINDS

PROBES.setdefault("postgres", PgProbe)
LEASE = 30.0
T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    """An empty store of ``store_kind`` on the fake ``clock`` (the flow and lock operations read it)."""
    opened = KINDS[store_kind].open_store(request, clock)
    yield opened
    opened.close(flush=False)


def probe(store: Store) -> StoreProbe:
    """The ``StoreProbe`` of ``store``: reads and damages what it holds past the engine."""
    kind = "postgres" if store.kind == "postgresql" else store.kind
    return PROBES[kind](SimpleNamespace(_store=store))  # type: ignore[arg-type]


def spec(
    queue: str = "default",
    *,
    name: str | None = None,
    priority: int = 0,
    ready_at: float | None = None,
    max_retries: int = 3,
    timeout: float | None = None,
    partition_key: Any = None,
    metadata: bytes | None = None,
) -> JobSpec:
    return JobSpec(queue, name, priority, ready_at, max_retries, timeout, partition_key, metadata)


def pack(value: Any) -> bytes:
    return codec.pack_value(value, what="payload", limit=1 << 20)


def put(store: Store, now: float, *payloads: Any, shard: int = 0, unique: UniqueRule | None = None,
        **options: Any) -> list[int]:  # fmt: skip
    """Enqueue ``payloads`` (one batch) with ``spec(**options)`` to ``shard``. -> their ids."""
    batch = NewJobs([pack(p) for p in payloads or ("job",)], spec(**options), unique)
    return store.enqueue(now, shard, [batch], False)


def claim(store: Store, now: float, *, limit: int = 1, shard: int = 0, queues: tuple[str, ...] | None = None,
          worker: str | None = "w1", min_priority: int | None = None) -> list[Claimed]:  # fmt: skip
    """Claim up to ``limit`` jobs of ``shard`` under a new token. -> what was claimed."""
    return store.claim(shard, now, queues, LEASE, new_token(), min_priority, worker, limit).claimed


def job(store: Store, now: float, job_id: int) -> Job:
    found = store.job(now, job_id)
    assert found is not None, job_id
    return found
