"""``Queue(store)``: a Queue works on a store object as on a directory; the options that only say how to
open an LMDB store are refused with one, before anything is written, and a clock belongs to the store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from queue_max_django.engine import ConfigurationError, Queue, State
from queue_max_django.engine.stores.lmdb.store import DEFAULT_MAP_SIZE, LmdbStore
from tests.engine.conftest import FakeClock

pytestmark = pytest.mark.lmdb  # the store object is built here with LmdbStore.open


def lmdb_store(path: Path, clock: FakeClock | None = None) -> LmdbStore:
    return LmdbStore.open(path, shards=2, map_size=DEFAULT_MAP_SIZE, map_size_max=None, sync=False,
                          writemap=False, clock=clock or time.time, rotation=0)  # fmt: skip


def test_a_queue_on_a_store_object_uses_it_and_its_clock(tmp_path: Path, clock: FakeClock) -> None:
    store = lmdb_store(tmp_path / "store", clock)
    q = Queue(store, do_recover=False, do_vacuum=False)
    try:
        job_id = q.put({"n": 1})
        assert q.shard_count == 2
        assert q.path == store.path

        record = q.get(timeout=0)
        assert record.enqueued_at == clock.now  # the store's clock is the Queue's
        record.ack("done")

        stored = q.job(job_id)
        assert stored is not None and stored.state is State.DONE and stored.result == "done"
    finally:
        q.close()
    with Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as again:  # it is on disk
        job = again.job(job_id)
        assert job is not None and job.state is State.DONE


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("shards", 3),
        ("map_size", DEFAULT_MAP_SIZE * 2),
        ("map_size_max", DEFAULT_MAP_SIZE * 4),
        ("writemap", True),
    ],
)
def test_lmdb_only_options_are_refused_with_a_store_object(
    tmp_path: Path, option: str, value: object
) -> None:
    store = lmdb_store(tmp_path / "store")
    with Queue(store, do_recover=False, do_vacuum=False) as q:
        job_id = q.put("kept")
    store = lmdb_store(tmp_path / "store")
    try:
        with pytest.raises(ConfigurationError, match=rf"{option}.*already open: leave them out"):
            Queue(store, **{option: value})  # type: ignore[arg-type]
    finally:
        store.close(flush=False)
    with Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as q:  # as it was: 2 shards, the job
        assert q.shard_count == 2
        job = q.job(job_id)
        assert job is not None and job.state is State.PENDING and job.payload == "kept"


def test_a_clock_is_given_to_the_store_not_to_a_queue_on_it(tmp_path: Path, clock: FakeClock) -> None:
    store = lmdb_store(tmp_path / "store")
    try:
        with pytest.raises(ConfigurationError, match="has its own clock: give clock= to the store"):
            Queue(store, clock=clock)
    finally:
        store.close(flush=False)


def test_the_store_s_own_clock_may_be_named_again(tmp_path: Path, clock: FakeClock) -> None:
    store = lmdb_store(tmp_path / "store", clock)
    with Queue(store, clock=clock, do_recover=False, do_vacuum=False) as q:
        q.put(1)
        assert q.get(timeout=0).enqueued_at == clock.now
