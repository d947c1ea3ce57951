"""Unique jobs through the engine's ``Queue`` (issue 31): ``put_unique``/``put_many_unique`` and the
``unique_key``/``unique_until``/``on_duplicate`` options of ``put``/``put_many``, on every store kind: what
each put did, keys routed to their shard, bad input refused before anything is written, and real processes
racing puts of one key (exactly one job stored)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import DuplicateJob, InvalidJob, Queue, State
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import StoreProbe
from tests.engine.procs import CHILD_TIMEOUT, Children, finish, send

Probe = Callable[[Queue], StoreProbe]
MakeQueue = Callable[..., Queue]


def test_put_unique_says_what_it_did(make_queue: MakeQueue, clock: FakeClock) -> None:
    with make_queue() as q:
        first = q.put_unique("a", unique_key="k", unique_until="started")
        again = q.put_unique("b", unique_key="k", unique_until="started")
        replaced = q.put_unique("c", unique_key="k", unique_until="started", on_duplicate="replace", delay=30)
        assert (first.outcome, again.outcome, replaced.outcome) == ("stored", "skipped", "replaced")
        assert first.job_id == again.job_id == replaced.job_id and again.deduplicated
        job = q.job(first.job_id)
        assert job is not None and job.payload == "c" and job.state is State.SCHEDULED
        assert job.unique is not None and (job.unique.key, job.unique.until) == ("k", "started")
        with pytest.raises(DuplicateJob, match=f"job {first.job_id} holds the unique key 'k'"):
            q.put("d", unique_key="k", unique_until="started", on_duplicate="raise")
        assert q.stats()["total"] == 1 and q.unique_counts() == {"skipped": 1, "replaced": 1}
        assert q.verify() == []


def test_a_task_saving_its_metadata_keeps_the_note_of_its_key(make_queue: MakeQueue) -> None:
    with make_queue() as q:
        job_id = q.put("a", unique_key="k", unique_until="finished", metadata={"step": 0})
        record = q.get(timeout=0)
        record.save_metadata({"step": 7})  # the task saves its progress, knowing nothing of the note
        job = q.job(job_id)
        assert job is not None and job.metadata is not None and job.metadata["step"] == 7
        assert job.unique is not None and (job.unique.key, job.unique.until) == ("k", "finished")
        assert q.put("b", unique_key="k", unique_until="finished") == job_id  # still held while it runs


def test_put_many_with_keys_decides_each_item_on_its_key_s_shard(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe
) -> None:
    with make_queue() as q:
        keys = [f"account:{n % 5}" for n in range(12)]
        done = q.put_many_unique(list(range(12)), unique_keys=keys, unique_until="finished", queue="sync")
        assert [put.deduplicated for put in done] == [False] * 5 + [True] * 7
        assert [put.job_id for put in done[5:]] == [done[n % 5].job_id for n in range(5, 12)]
        assert q.stats()["total"] == 5
        stored = probe(q).unique_keys()
        assert sorted(stored) == sorted(set(keys))
        for index, put in enumerate(done[:5]):  # each job is on its key's shard, where a single put looks
            assert q.put(0, unique_key=f"account:{index}", unique_until="finished") == put.job_id
        ids = q.put_many(["x", "y"], unique_keys=["account:0", "new"], unique_until="finished")
        assert ids[0] == done[0].job_id and ids[1] not in {put.job_id for put in done}


def test_raise_in_a_batch_stores_nothing_of_it(make_queue: MakeQueue, clock: FakeClock, probe: Probe) -> None:
    with make_queue(shards=1) as q:
        first = q.put("a", unique_key="taken", unique_until="started")
        before = probe(q).snapshot()
        with pytest.raises(DuplicateJob):
            q.put_many(
                ["b", "c"], unique_keys=["free", "taken"], unique_until="started", on_duplicate="raise"
            )
        with pytest.raises(InvalidJob, match="items 0 and 1 have the same unique key"):
            q.put_many(["b", "c"], unique_keys=["same", "same"], unique_until="started", on_duplicate="raise")
        assert written(probe(q).snapshot()) == written(before)
        assert q.stats()["total"] == 1 and first > 0


@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_until": "forever"}, "unique_until must be"),
        ({"unique_until": 0}, "unique_until must be"),
        ({"unique_until": -1.5}, "unique_until must be"),
        ({"unique_until": float("nan")}, "unique_until must be"),
        ({"unique_until": True}, "unique_until must be"),
        ({"unique_until": 3 * 86_400.0}, "longer than the store keeps"),
        ({"on_duplicate": "ignore"}, "on_duplicate must be"),
        ({"unique_key": "x" * 201}, "unique_key must be"),
        ({"unique_key": "k", "partition_key": "p"}, "not both"),
    ],
)
def test_bad_unique_options_raise_before_writing(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe, options: dict[str, Any], message: str
) -> None:
    with make_queue() as q:
        before = probe(q).snapshot()
        with pytest.raises(InvalidJob, match=message):
            q.put("x", **{"unique_key": "k", "unique_until": "started", **options})
        with pytest.raises(InvalidJob, match=message):
            given = {"unique_until": "started", **options}
            key = given.pop("unique_key", "k")
            q.put_many(["x"], unique_keys=[key], **given)
        assert probe(q).snapshot() == before


def written(snapshot: Any) -> Any:
    """A store's snapshot but PostgreSQL's id sequence, which a rolled-back put advances too."""
    if not isinstance(snapshot, dict):
        return snapshot
    return {name: value for name, value in snapshot.items() if name != "qm_job_ids"}


def put_same_key(location: StoreLocation, go_path: str, count: int) -> None:
    """Child: say ready, wait for the go file, put ``count`` jobs with one key held while they wait."""
    with location.open_queue() as q:
        send("ready")
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not os.path.exists(go_path) and time.monotonic() < deadline:
            time.sleep(0.001)
        done = [
            q.put_unique({"pid": os.getpid(), "n": n}, unique_key="sync:1", unique_until="started")
            for n in range(count)
        ]
        send([(put.job_id, put.outcome) for put in done])


@pytest.mark.slow
def test_four_processes_racing_on_one_key_store_exactly_one_job(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """4 processes x 25 puts of one key (``unique_until="started"``) at the same instant: one job stored,
    99 duplicates skipped, every put given that job's id, and the store counts them."""
    with location.open_queue() as q:
        go = tmp_path / "go"
        racers = [children.start(put_same_key, location, str(go), 25) for _ in range(4)]
        children.together(go, racers)
        results = [outcome for child in racers for outcome in child.recv()]
        for child in racers:
            finish(child)
        assert len({job_id for job_id, _ in results}) == 1
        assert sorted(outcome for _, outcome in results).count("stored") == 1
        assert q.stats()["total"] == 1 and q.unique_counts() == {"skipped": 99, "replaced": 0}
        assert q.verify() == []
