"""Fixtures of the engine tests. No Django here: the engine must work without it. ``store_kind`` is
the whole suite's (tests/stores.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import Queue
from tests.engine import locations, memprobe
from tests.engine.locations import StoreLocation
from tests.engine.pgprobe import PgProbe
from tests.engine.probes import PROBES, LmdbProbe, StoreProbe
from tests.engine.procs import Children
from tests.stores import STORE_KINDS

PROBES["postgres"] = PgProbe
PROBES["memory"] = memprobe.MemoryProbe
locations.OPENERS["memory"] = memprobe.open_queue
locations.ASYNC_OPENERS["memory"] = memprobe.open_async
locations.EXISTS["memory"] = memprobe.exists
locations.SIBLINGS["memory"] = memprobe.sibling
locations.REMOVERS["memory"] = memprobe.remove


class FakeClock:
    """An injected clock: tests move time forward instead of sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


def open_queue(path: Path, clock: Any = None, **options: Any) -> Queue:
    """A queue with no background threads (tests call recover()/vacuum() themselves), retries at once,
    on ``clock`` if given; ``options`` override any of that."""
    defaults: dict[str, Any] = {"do_recover": False, "do_vacuum": False, "retry_backoff": 0}
    if clock is not None:
        defaults["clock"] = clock
    return Queue(path, **(defaults | options))


def dump_store(q: Queue) -> dict[tuple[int, str], list[tuple[bytes, bytes]]]:
    """Every key and value of every database of every shard: to prove that nothing was written."""
    return LmdbProbe(q).snapshot()


@pytest.fixture
def location(store_kind: str, store_path: Path, request: pytest.FixtureRequest) -> StoreLocation:
    """This test's store as a value a child process can be handed (``procs.py``): each child opens its own
    Queue on it with ``location.open_queue(**options)`` (no background threads, the wall clock). LMDB: a
    directory of the test's; PostgreSQL: the test's empty database (``pg_url``)."""
    assert store_kind in STORE_KINDS, store_kind
    if store_kind == "postgres":
        return StoreLocation(store_kind, str(request.getfixturevalue("pg_url")))
    if store_kind == "memory":
        where = memprobe.new_location()
        request.addfinalizer(lambda: memprobe.remove(where))
        return StoreLocation(store_kind, where)
    return StoreLocation(store_kind, str(store_path))


@pytest.fixture
def make_queue(location: StoreLocation, clock: FakeClock) -> Iterator[Callable[..., Queue]]:
    """``make_queue(**options)``: a Queue on this test's store (every call opens the same one, as another
    process would), on the shared fake clock, with no background threads and retries at once (as
    ``open_queue``); ``options`` override any of that (``clock=None``: the wall clock). Each is closed
    after the test."""
    opened: list[Queue] = []

    def make(**options: Any) -> Queue:
        q = location.open_queue(**({"clock": clock, "retry_backoff": 0} | options))
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


@pytest.fixture
def probe(store_kind: str) -> Callable[[Queue], StoreProbe]:
    """``probe(q)``: the ``StoreProbe`` of ``q``'s store, to read or damage what it holds past the engine."""
    return PROBES[store_kind]


@pytest.fixture
def children(request: pytest.FixtureRequest) -> Iterator[Children]:
    """Start child processes with ``children.start(target, *args)``; any still alive are SIGKILLed after.
    A test on the memory store skips: no child process can open it."""
    if "store_kind" in request.fixturenames and request.getfixturevalue("store_kind") == "memory":
        pytest.skip(memprobe.ONE_PROCESS)
    started = Children()
    yield started
    started.kill_all()


@pytest.fixture
def queue(make_queue: Callable[..., Queue]) -> Queue:
    """A queue on a fake clock with no background threads (tests call recover()/vacuum() themselves), on
    the store of ``store_kind``."""
    return make_queue()
