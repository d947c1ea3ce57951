"""Fixtures of the engine tests. No Django here: the engine must work without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_max_django.engine import Queue


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


@pytest.fixture
def queue(store_path: Path, clock: FakeClock) -> Iterator[Queue]:
    """A queue on a fake clock with no background threads (tests call recover()/vacuum() themselves)."""
    q = Queue(store_path, clock=clock, do_recover=False, do_vacuum=False, retry_backoff=0)
    yield q
    q.close()
