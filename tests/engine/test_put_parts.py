"""``Queue.put_parts``: a batch spread over the store in parts, each part one all-or-nothing transaction,
checked whole before any part is written (``.map`` and ``queue_enqueue`` use it: they count no shards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_max_django.engine import InvalidJob, PayloadNotSerializable, State
from queue_max_django.engine.job import shard_of
from tests.engine.conftest import FakeClock, open_queue
from tests.engine.probes import LmdbProbe

pytestmark = pytest.mark.lmdb  # parts of a put_many are spread over shards


@pytest.mark.inv_5
def test_one_part_per_shard_by_default_each_on_its_own_shard(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock, shards=6) as q:
        ids = q.put_parts(list(range(60)), queue="bulk")
        assert len(ids) == 60
        parts = [ids[start : start + 10] for start in range(0, 60, 10)]
        shards = [{shard_of(job_id) for job_id in part} for part in parts]
        assert all(len(one) == 1 for one in shards) and len(set.union(*shards)) == 6
        assert [q.job(job_id).payload for job_id in ids] == list(range(60))  # type: ignore[union-attr]
        assert q.stats()["pending"] == 60 and q.verify() == []


def test_parts_of_a_given_size_take_the_shards_in_turn(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock, shards=2) as q:
        ids = q.put_parts(list(range(25)), part_size=10)
        by_part = [{shard_of(job_id) for job_id in ids[start : start + 10]} for start in (0, 10, 20)]
        assert [len(part) for part in by_part] == [1, 1, 1]
        assert by_part[0] != by_part[1] and by_part[0] == by_part[2]
        again = q.put_parts(["x"], part_size=10)  # the rotation goes on from there
        assert shard_of(again[0]) == by_part[1].pop()


@pytest.mark.inv_7
def test_a_bad_payload_anywhere_writes_no_part(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock, shards=3) as q:
        q.put("before")
        before = LmdbProbe(q).snapshot()
        payloads: list[object] = list(range(40))
        payloads[33] = {(1, 2): "tuple key"}
        with pytest.raises(PayloadNotSerializable, match=r"payloads\[33\]"):
            q.put_parts(payloads)
        with pytest.raises(InvalidJob):
            q.put_parts([1, 2], priority=1000)
        assert LmdbProbe(q).snapshot() == before


def test_a_partition_key_keeps_every_part_on_its_shard(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock, shards=4) as q:
        ids = q.put_parts(list(range(12)), part_size=3, partition_key="customer-7")
        assert len({shard_of(job_id) for job_id in ids}) == 1
        assert [job.payload for job in q.jobs(State.PENDING, limit=20)] == list(range(12))


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "3"])
def test_part_size_is_checked(store_path: Path, clock: FakeClock, size: object) -> None:
    with open_queue(store_path, clock, shards=2) as q:
        with pytest.raises(InvalidJob, match="part_size"):
            q.put_parts([1], part_size=size)  # type: ignore[arg-type]
        assert q.put_parts([]) == [] and q.stats()["total"] == 0
