"""Fixtures of the engine tests. No Django here: the engine must work without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import Queue
from tests.engine.procs import Children


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
    out = {}
    for shard in q._shards:
        with shard.env.env.begin() as txn:
            for name, db in shard.env.dbs.items():
                out[shard.index, name] = list(txn.cursor(db=db))
    return out


@pytest.fixture
def children() -> Iterator[Children]:
    """Start child processes with ``children.start(target, *args)``; any still alive are SIGKILLed after."""
    started = Children()
    yield started
    started.kill_all()


@pytest.fixture
def queue(store_path: Path, clock: FakeClock) -> Iterator[Queue]:
    """A queue on a fake clock with no background threads (tests call recover()/vacuum() themselves)."""
    q = open_queue(store_path, clock)
    yield q
    q.close()
