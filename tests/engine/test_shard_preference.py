"""Where a consumer claims among shards of equal priority: each consumer thread keeps to its own shard for
a run of claims, and one whose claim had to wait for the shard's write lock (another thread or process was
writing there) moves to another shard, so concurrent consumers stop queueing on one lock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from queue_max_django.engine.job import shard_of
from queue_max_django.engine.stores.lmdb import env as lmdb_env
from tests.engine.conftest import open_queue

pytestmark = pytest.mark.lmdb  # consumers parting over LMDB shards


def test_a_consumer_keeps_to_one_shard_for_a_run_of_claims(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing else writes here; a begin() that a loaded machine preempted for longer than the store's 20 µs
    # would read as a wait and move the consumer (CI ran two suites on two cores and saw it): such noise is
    # not what this test is about, so only a begin() slower than a second counts as waiting.
    monkeypatch.setattr(lmdb_env, "WRITE_WAIT_NOTICED", 1.0)
    with open_queue(store_path) as q:
        for i in range(60):
            q.put(i)
        shards = [shard_of(q.get(0).job_id) for _ in range(8)]
    assert len(set(shards)) == 1


def test_a_claim_that_waited_for_the_write_lock_moves_the_consumer_to_another_shard(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The claim below waits ~0.2 s for the writer; a begin() preempted on a loaded machine is far shorter.
    monkeypatch.setattr(lmdb_env, "WRITE_WAIT_NOTICED", 0.02)
    with open_queue(store_path) as q:
        for i in range(60):
            q.put(i)
        home = shard_of(q.get(0).job_id)
        env = q._store._shards[home].env
        holding, release = threading.Event(), threading.Event()

        def hold(_txn: object) -> None:
            holding.set()
            assert release.wait(10)

        writer = threading.Thread(target=env.write, args=(hold,))
        writer.start()
        assert holding.wait(10)
        threading.Timer(0.2, release.set).start()
        waited = q.get(0)  # its shard is still `home`: this claim waits for the writer
        writer.join(10)
        after = [shard_of(q.get(0).job_id) for _ in range(3)]

    assert shard_of(waited.job_id) == home
    assert env.waited_writes >= 1
    assert after[0] != home and len(set(after)) == 1
