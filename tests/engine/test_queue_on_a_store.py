"""``Queue(store)``: a Queue works on a store object as on a directory; the options that only say how to
open an LMDB store are refused with one, before anything is written, and a clock belongs to the store."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import ConfigurationError, Queue, State
from queue_max_django.engine.consuming import MAX_IDLE_WAIT
from queue_max_django.engine.stores.lmdb.store import DEFAULT_MAP_SIZE, LmdbStore
from queue_max_django.engine.stores.memory import store as memory_store
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


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("redis://localhost:6379/0", "not a redis:// URL"),
        ("postgresql+psycopg://u@db/jobs", r"not a postgresql\+psycopg:// URL"),
        ("host=db.internal dbname=jobs password=s3cret", "libpq key=value connection string"),
        ("  dbname=jobs", "libpq key=value connection string"),
    ],
)
def test_another_kind_of_database_name_is_refused_not_made_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, says: str
) -> None:
    monkeypatch.chdir(tmp_path)  # where a relative directory of that name would be made
    with pytest.raises(ConfigurationError, match=says) as raised:
        Queue(where)
    assert "s3cret" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_whose_name_has_an_equals_sign_later_is_still_a_directory(tmp_path: Path) -> None:
    with Queue(tmp_path / "jobs=2026", do_recover=False, do_vacuum=False) as q:
        q.put(1)
    assert (tmp_path / "jobs=2026" / "store.json").exists()


def test_a_memory_url_opens_the_named_in_memory_store_every_queue_of_that_name_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    monkeypatch.chdir(tmp_path)
    name = f"memory://shared-{uuid.uuid4().hex}"
    with (
        Queue(name, clock=clock, do_recover=False, do_vacuum=False) as producer,
        Queue(name, clock=clock, do_recover=False, do_vacuum=False) as consumer,
        Queue("memory://", clock=clock, do_recover=False, do_vacuum=False) as private,
    ):
        job_id = producer.put("shared")
        assert (producer.path, producer.shard_count) == (name, 1)
        record = consumer.get(timeout=0)
        assert (record.job_id, record.payload) == (job_id, "shared")
        record.ack("done")
        assert private.stats()["total"] == 0  # ``memory://``: a store of its own
        private.put("alone")
        assert producer.stats()["total"] == 1
        job = producer.job(job_id)
        assert job is not None and job.state is State.DONE and job.result == "done"
    with Queue(name, do_recover=False, do_vacuum=False) as reopened:  # the store outlives its queues
        assert reopened.stats()["done"] == 1
    assert list(tmp_path.iterdir()) == []  # nothing written to disk
    assert memory_store.forget(name.removeprefix("memory://"))


@pytest.mark.parametrize(("option", "value"), [("shards", 2), ("map_size", 2**21), ("writemap", True)])
def test_a_memory_url_refuses_the_options_of_an_lmdb_store(option: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"{option}.*memory store 'memory://x': leave them out"):
        Queue("memory://x", **{option: value})


def test_a_get_waiting_on_a_memory_store_wakes_at_a_put_through_another_queue_of_its_name() -> None:
    """The hints are the named store's: a put through one Queue wakes a get() waiting in another at once
    (long before its idle re-check), and closing a third Queue of the name wakes nobody else's wait."""
    name = f"memory://wake-{uuid.uuid4().hex}"
    options: dict[str, Any] = {"do_recover": False, "do_vacuum": False}
    with Queue(name, **options) as consumer, Queue(name, **options) as producer:
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(consumer.get(timeout=5.0)))
        waiter.start()
        time.sleep(0.05)  # the get() is waiting
        Queue(name, **options).close()
        time.sleep(0.05)
        assert waiter.is_alive() and not got, "closing another queue of the name ended this wait"
        put_at = time.monotonic()
        producer.put("wake up")
        waiter.join(timeout=2.0)
        woke_after = time.monotonic() - put_at
    assert [record.payload for record in got] == ["wake up"]
    assert woke_after < MAX_IDLE_WAIT / 2, f"woke {woke_after:.3f} s after the put"
    assert memory_store.forget(name.removeprefix("memory://"))
