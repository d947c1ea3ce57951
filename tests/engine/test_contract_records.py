"""Contract tests of what a job is and how it is served: ids, priorities, FIFO, delays, named queues,
results, batches and the stored bytes.

EQueue RFC-PS-01, DESIGN.md invariants 5 and 6, and the rules on job ids, priority, FIFO, delay/eta,
named queues and results.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import (
    InvalidJob,
    PayloadNotSerializable,
    PayloadTooLarge,
    Queue,
    QueueEmpty,
    State,
    UnknownQueue,
)
from queue_max_django.engine.job import job_id_for, shard_of
from queue_max_django.engine.stores.lmdb.access import COUNTERS, COUNTERS_KEY, put_counters
from tests.engine.conftest import FakeClock
from tests.engine.probes import LmdbProbe, StoreProbe

Probe = Callable[[Queue], StoreProbe]


def _no_ext(code: int, data: bytes) -> Any:
    raise AssertionError(f"msgpack extension type {code} in the store")


def partition_keys_for_distinct_shards(tmp_path: Path, count: int, shards: int = 6) -> list[str]:
    """Partition keys that route to ``count`` different shards (found on a scratch store of the same shape,
    since routing by key is deterministic)."""
    found: dict[int, str] = {}
    with Queue(tmp_path / "routing-probe", shards=shards, do_recover=False, do_vacuum=False) as scratch:
        for i in range(1000):
            key = f"k{i}"
            found.setdefault(shard_of(scratch.put(None, partition_key=key)), key)
            if len(found) == count:
                break
    assert len(found) == count
    return list(found.values())


# --------------------------------------------------------------------------------------------- job ids


@pytest.mark.contract
@pytest.mark.rule_job_id
@pytest.mark.lmdb  # the shard in the id is LMDB's
def test_job_ids_are_positive_unique_and_name_their_shard(queue: Queue, probe: Probe) -> None:
    """rule_job_id: positive ints, unique across shards; shard_of(id) is the shard that stores the job."""
    ids = [queue.put(i) for i in range(60)]
    ids += queue.put_many(range(20))
    ids += queue.put_many(range(20), partition_key="p")
    assert all(type(job_id) is int and job_id > 0 for job_id in ids)
    assert len(set(ids)) == len(ids)
    assert len({shard_of(job_id) for job_id in ids}) == queue.shard_count

    for job_id in ids:
        home = shard_of(job_id)
        assert 0 <= home < queue.shard_count
        assert queue.job(job_id).shard == home
        records = [place for place in probe(queue).places(job_id) if place.endswith(" jobs")]
        assert records == [f"shard {home} jobs"]  # the record is in its home shard, and in no other


@pytest.mark.contract
@pytest.mark.rule_job_id
def test_job_id_is_stable_through_the_jobs_life(queue: Queue, clock: FakeClock) -> None:
    """rule_job_id: the id a put returned names the job through claims, retries, release, failure,
    requeue and completion."""
    job_id = queue.put("x", max_retries=1)
    assert queue.get(0).job_id == job_id
    clock.advance(31)
    queue.recover()
    record = queue.get(0)
    assert record.job_id == job_id
    record.release()
    queue.get(0).nack("bad")
    assert queue.job(job_id).state is State.FAILED
    assert queue.requeue(job_id)
    record = queue.get(0)
    assert record.job_id == job_id
    record.ack()
    assert queue.job(job_id).job_id == job_id
    assert queue.stats()["total"] == 1


@pytest.mark.contract
@pytest.mark.rule_job_id
def test_job_ids_stay_unique_across_reopen_and_a_clock_stepping_back(
    clock: FakeClock, probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """rule_job_id: ids never repeat in a shard, even when the clock goes back between two opens."""
    with make_queue() as q:
        first = [q.put(i, partition_key="p") for i in range(5)]
    clock.advance(-3600)
    with make_queue() as q:
        second = [q.put(i, partition_key="p") for i in range(5)]
        assert len(set(first + second)) == 10
        assert first + second == sorted(first + second)
        assert {probe(q).shard_of(j) for j in first + second} == {probe(q).shard_of(first[0])}
        assert q.verify() == []


@pytest.mark.contract
@pytest.mark.rule_job_id
def test_job_of_unknown_id_is_none(queue: Queue) -> None:
    """rule_job_id: job() of an id that never existed, or is not an id at all, is None."""
    job_id = queue.put("x")
    assert queue.job(job_id + 256) is None  # same shard, next sequence
    assert queue.job(job_id_for(1, 200)) is None  # a shard this store does not have
    for bogus in (0, -1, True):
        assert queue.job(bogus) is None


# -------------------------------------------------------------------------------------------- priority


@pytest.mark.contract
@pytest.mark.rule_priority
@pytest.mark.lmdb  # several shards
def test_get_serves_strictly_by_priority_across_shards(queue: Queue, tmp_path: Path) -> None:
    """rule_priority: jobs of different priorities in different shards come out highest first."""
    partitions = partition_keys_for_distinct_shards(tmp_path, 6)
    priorities = [0, -100, 50, 7, 100, -5, 3, 10, 99, -99]
    ids = {queue.put(p, priority=p, partition_key=partitions[i % 6]): p for i, p in enumerate(priorities)}
    assert len({shard_of(j) for j in ids}) == 6

    served = [queue.get(0) for _ in priorities]

    assert [r.priority for r in served] == sorted(priorities, reverse=True)
    assert all(r.payload == ids[r.job_id] for r in served)
    with pytest.raises(QueueEmpty):
        queue.get(0)


@pytest.mark.contract
@pytest.mark.rule_priority
@pytest.mark.lmdb  # several shards
def test_get_sees_a_higher_priority_job_put_after_the_last_get(queue: Queue, tmp_path: Path) -> None:
    """rule_priority: a consumer that already took a job must not pass over a higher-priority job put
    into another shard since (nor miss it and report the queue empty)."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    queue.put("low 1", priority=0, partition_key=home)
    queue.put("low 2", priority=0, partition_key=home)
    assert queue.get(0).payload == "low 1"
    queue.put("urgent", priority=50, partition_key=other)

    assert queue.get(0).payload == "urgent"
    assert queue.get(0).payload == "low 2"


@pytest.mark.contract
@pytest.mark.rule_priority
@pytest.mark.lmdb  # several shards
def test_get_once_finds_a_job_put_into_another_shard_since_the_last_get(queue: Queue) -> None:
    """rule_priority: get(0) never reports the queue empty while a job waits, whatever shard it is in."""
    first = queue.put("first")
    assert queue.get(0).job_id == first
    second = queue.put("second")  # the rotation puts it into the next shard
    assert shard_of(second) != shard_of(first)

    assert queue.get(0).job_id == second


@pytest.mark.contract
@pytest.mark.rule_priority
def test_get_never_passes_over_a_higher_priority_under_mixed_traffic(queue: Queue) -> None:
    """rule_priority: with puts, gets, nacks and releases interleaved (random, seeded), every get takes a
    job of the highest priority waiting at that moment."""
    rng = random.Random(1)
    waiting: dict[int, int] = {}  # job id -> priority
    for _round in range(40):
        for _ in range(rng.randint(0, 4)):
            priority = rng.randint(-100, 100)
            key = rng.choice([None, "a", "b", "c", 1, 2])
            waiting[queue.put(None, priority=priority, partition_key=key)] = priority
        for _ in range(rng.randint(0, 3)):
            if not waiting:
                with pytest.raises(QueueEmpty):
                    queue.get(0)
                break
            record = queue.get(0)
            assert record.priority == max(waiting.values()), (record.priority, sorted(waiting.values()))
            del waiting[record.job_id]
            outcome = rng.random()
            if outcome < 0.2:
                record.release()
                waiting[record.job_id] = record.priority
            elif outcome < 0.3:
                record.nack("retry", delay=0)
                waiting[record.job_id] = record.priority
            else:
                record.ack()
    assert queue.stats()["pending"] == len(waiting)
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_priority
@pytest.mark.parametrize("priority", [-100, 100])
def test_priority_bounds_are_accepted(queue: Queue, priority: int) -> None:
    """rule_priority: -100 and 100 are valid priorities and stored as given."""
    job_id = queue.put("x", priority=priority)
    assert queue.job(job_id).priority == priority
    assert queue.get(0).priority == priority


# ------------------------------------------------------------------------------------------------ FIFO


@pytest.mark.contract
@pytest.mark.rule_fifo
def test_equal_priorities_are_fifo_within_a_shard(queue: Queue, clock: FakeClock, probe: Probe) -> None:
    """rule_fifo: jobs of one priority in one shard come out in put order (clock still or moving)."""
    ids = []
    for i in range(30):
        ids.append(queue.put(i, partition_key="one shard", priority=5))
        if i % 3 == 0:
            clock.advance(0.5)
    ids += queue.put_many(range(30, 40), partition_key="one shard", priority=5)
    assert len({probe(queue).shard_of(j) for j in ids}) == 1

    assert [queue.get(0).job_id for _ in ids] == ids


@pytest.mark.contract
@pytest.mark.rule_fifo
def test_fifo_survives_the_clock_stepping_back(queue: Queue, clock: FakeClock) -> None:
    """rule_fifo: a wall clock stepped back (NTP) between two puts must not let the second job overtake."""
    first = queue.put("first", partition_key="p")
    clock.advance(-10)
    second = queue.put("second", partition_key="p")
    assert first < second

    assert queue.get(0).job_id == first
    assert queue.get(0).job_id == second


@pytest.mark.contract
@pytest.mark.rule_fifo
def test_a_retry_does_not_overtake_a_job_put_earlier_in_the_same_microsecond(queue: Queue) -> None:
    """rule_fifo: a job put is ready at its own microsecond, however many puts shared it, as a retry at
    that microsecond is (ties broken by id): the third put of a microsecond, retried in it, comes after the
    second (the LMDB store once readied each put at its sequence, one µs past the previous, so the retry
    came first; found by test_stateful)."""
    first, second = queue.put_many(["first", "second"], partition_key="p", queue="alpha")
    third = queue.put("third", partition_key="p", queue="beta")
    record = queue.get(0, queues=["beta"])
    assert record.job_id == third
    record.nack("again", delay=0)

    assert [queue.get(0).job_id for _ in range(3)] == [first, second, third]


@pytest.mark.contract
@pytest.mark.rule_fifo
def test_fifo_survives_the_clock_stepping_back_after_a_burst(queue: Queue, clock: FakeClock) -> None:
    """rule_fifo: jobs put after the clock stepped back queue behind a batch put before it, in put order."""
    batch = queue.put_many(range(5), partition_key="p")
    clock.advance(-10)
    later = [queue.put(i, partition_key="p") for i in range(2)] + queue.put_many(range(2), partition_key="p")

    assert [queue.get(0).job_id for _ in range(9)] == batch + later


@pytest.mark.contract
@pytest.mark.rule_fifo
@pytest.mark.lmdb  # the counters' layout is the LMDB store's
def test_a_shard_whose_counters_predate_the_ready_floor_keeps_fifo(queue: Queue, clock: FakeClock) -> None:
    """rule_fifo: counters written before the ready floor (sequence and total only) read as a floor at the
    sequence, the ready time puts had then: a job put after the clock stepped back still queues behind."""
    first = queue.put("first", partition_key="p")
    shard = LmdbProbe(queue)._shard(first)
    with shard.env.env.begin(write=True) as txn:
        sequence, total, _floor = put_counters(txn.get(COUNTERS_KEY, db=shard.jobs))
        txn.put(COUNTERS_KEY, COUNTERS.pack(sequence, total), db=shard.jobs)  # as an older version left it
    clock.advance(-10)
    second = queue.put("second", partition_key="p")

    assert [queue.get(0).job_id for _ in range(2)] == [first, second]
    assert queue.verify() == [] and queue.stats()["total"] == 2


# ----------------------------------------------------------------------------------------- delay / eta


@pytest.mark.contract
@pytest.mark.rule_delay
def test_delay_keeps_job_scheduled_until_the_clock_passes_it(queue: Queue, clock: FakeClock) -> None:
    """rule_delay: delay=10 -> scheduled, eta = now + 10, not served before, counted as scheduled until it
    is promoted (even once due), served after."""
    start = clock.now
    job_id = queue.put("later", delay=10)
    job = queue.job(job_id)
    assert job.state is State.SCHEDULED and job.eta == pytest.approx(start + 10)
    assert (queue.stats()["scheduled"], queue.stats()["pending"]) == (1, 0)
    assert [j.job_id for j in queue.jobs(State.SCHEDULED)] == [job_id]

    with pytest.raises(QueueEmpty):
        queue.get(0)
    clock.advance(9.99)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    clock.advance(0.02)
    assert queue.stats()["scheduled"] == 1  # due but not yet promoted: still scheduled
    assert queue.job(job_id).state is State.SCHEDULED

    record = queue.get(0)
    assert record.job_id == job_id
    job = queue.job(job_id)
    assert job.state is State.RUNNING and job.eta is None
    assert queue.stats()["scheduled"] == 0
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_delay
@pytest.mark.parametrize(
    "make_eta",
    [
        lambda now: now + 60,
        lambda now: dt.datetime.fromtimestamp(now + 60, tz=dt.UTC),
        lambda now: dt.datetime.fromtimestamp(now + 60, tz=dt.timezone(dt.timedelta(hours=-7))),
    ],
    ids=["timestamp", "aware-utc", "aware-offset"],
)
def test_eta_schedules_until_then(queue: Queue, clock: FakeClock, make_eta: Any) -> None:
    """rule_delay: eta as a unix timestamp or an aware datetime (any zone) schedules until that instant."""
    start = clock.now
    job_id = queue.put("at", eta=make_eta(start))
    assert queue.job(job_id).state is State.SCHEDULED
    assert queue.job(job_id).eta == pytest.approx(start + 60)
    clock.advance(59.9)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    clock.advance(0.2)
    assert queue.get(0).job_id == job_id


@pytest.mark.contract
@pytest.mark.rule_delay
def test_eta_in_the_past_or_zero_delay_is_pending_now(queue: Queue, clock: FakeClock) -> None:
    """rule_delay: an eta already passed, or delay=0, means pending at once."""
    past = queue.put("past", eta=clock.now - 5)
    now = queue.put("now", delay=0)
    assert queue.job(past).state is State.PENDING and queue.job(past).eta is None
    assert queue.job(now).state is State.PENDING
    assert queue.stats()["scheduled"] == 0
    assert {queue.get(0).job_id, queue.get(0).job_id} == {past, now}


@pytest.mark.contract
@pytest.mark.rule_delay
def test_promoted_jobs_keep_priority_order(queue: Queue, clock: FakeClock) -> None:
    """rule_delay: once due, a scheduled job competes by priority with the pending ones."""
    queue.put("normal")
    urgent = queue.put("urgent later", priority=90, delay=5)
    clock.advance(5)
    assert queue.get(0).job_id == urgent


# ---------------------------------------------------------------------------------------- named queues


@pytest.mark.contract
@pytest.mark.rule_named_queues
def test_get_with_queues_serves_only_those(queue: Queue) -> None:
    """rule_named_queues: get(queues=[...]) takes only jobs of the named queues, by priority among them."""
    a = queue.put("a", queue="a", priority=1)
    b = queue.put("b", queue="b", priority=0)
    queue.put("c", queue="c", priority=100)
    queue.put("d", queue="default", priority=100)

    assert queue.get(0, queues=["b"]).job_id == b
    with pytest.raises(QueueEmpty):
        queue.get(0, queues=["b"])
    with pytest.raises(QueueEmpty):
        queue.get(0, queues=["nothing-here"])
    assert queue.get(0, queues=["a", "b"]).job_id == a
    record = queue.get(0, queues=["c", "default"])
    assert record.queue in {"c", "default"} and record.priority == 100
    assert queue.stats()["pending"] == 1


@pytest.mark.contract
@pytest.mark.rule_named_queues
def test_queue_restricted_to_names_refuses_others(make_queue: Callable[..., Queue]) -> None:
    """rule_named_queues: Queue(queues=[...]) rejects other names at put (UnknownQueue, nothing written)
    and at get, and its plain get() never takes jobs of other queues that others put there."""
    with make_queue() as anyone, make_queue(queues=["mail", "sms"]) as q:
        other = anyone.put("not ours", queue="reports", priority=100)
        with pytest.raises(UnknownQueue, match="reports"):
            q.put("x", queue="reports")
        with pytest.raises(UnknownQueue):
            q.put("x")  # the default queue is not one of its names
        with pytest.raises(UnknownQueue):
            q.put_many(["x", "y"], queue="push")
        with pytest.raises(UnknownQueue):
            q.get(0, queues=["reports"])
        assert q.stats()["total"] == 1

        mail = q.put("hello", queue="mail")
        assert q.get(0).job_id == mail
        with pytest.raises(QueueEmpty):
            q.get(0)
        assert anyone.job(other).state is State.PENDING
        assert anyone.get(0).job_id == other


# --------------------------------------------------------------------------------------------- results


@pytest.mark.contract
@pytest.mark.rule_results
def test_ack_result_is_readable_until_vacuum(queue: Queue, clock: FakeClock) -> None:
    """rule_results: ack(result=) is kept with the job; vacuum() drops it after result_ttl (1 day)."""
    job_id = queue.put("x")
    queue.get(0).ack(result={"rows": 3, "ids": [1, 2, 3], "blob": b"\x00"})
    assert queue.job(job_id).result == {"rows": 3, "ids": [1, 2, 3], "blob": b"\x00"}

    clock.advance(86400 - 1)
    assert queue.vacuum() == 0
    assert queue.job(job_id).result == {"rows": 3, "ids": [1, 2, 3], "blob": b"\x00"}
    clock.advance(2)
    assert queue.vacuum() == 1
    assert queue.job(job_id) is None


@pytest.mark.contract
@pytest.mark.rule_results
@pytest.mark.parametrize("result", [0, "", [], False, {}, 0.0])
def test_falsy_results_are_kept(queue: Queue, result: Any) -> None:
    """rule_results: a falsy result is a result, not "no result"."""
    job_id = queue.put("x")
    queue.get(0).ack(result=result)
    stored_result = queue.job(job_id).result
    assert stored_result == result and type(stored_result) is type(result)


@pytest.mark.contract
@pytest.mark.rule_results
def test_ack_without_result_stores_none(queue: Queue) -> None:
    """rule_results: ack() without a result leaves result None."""
    job_id = queue.put("x")
    queue.get(0).ack()
    assert queue.job(job_id).result is None and queue.job(job_id).state is State.DONE


# --------------------------------------------------------------------------------------------- RFC-PS


@pytest.mark.contract
@pytest.mark.rfc_ps_01
@pytest.mark.parametrize("size", [10, 5000], ids=["small", "large"])
def test_ack_keeps_payload_and_state_stored(queue: Queue, size: int, probe: Probe) -> None:
    """RFC-PS-01: after ack the record says done and the payload bytes are still on disk."""
    payload = {"body": "x" * size}
    job_id = queue.put(payload)
    queue.get(0).ack()

    stored = probe(queue).stored(job_id)
    assert stored is not None and stored.state is State.DONE
    assert msgpack.unpackb(stored.payload) == payload
    assert probe(queue).indexes_naming(job_id) == [State.DONE]
    assert probe(queue).index_problems() == []  # and the done index holds this job only
    assert queue.job(job_id).payload == payload
    assert queue.jobs(State.DONE)[0].payload == payload


# ---------------------------------------------------------------------------------------------- inv_5


@pytest.mark.contract
@pytest.mark.inv_5
@pytest.mark.parametrize(
    ("bad", "error"),
    [(object(), PayloadNotSerializable), ("x" * 5000, PayloadTooLarge), ({1, 2}, PayloadNotSerializable)],
    ids=["object", "too-large", "set"],
)
def test_put_many_with_one_bad_payload_writes_nothing(
    bad: Any, error: type[Exception], probe: Probe, make_queue: Callable[..., Queue]
) -> None:
    """inv_5: one bad payload among good ones -> the error, and not one byte of any job on disk."""
    with make_queue(max_payload_bytes=1024) as q:
        q.put("before")
        before = probe(q).snapshot()
        with pytest.raises(error):
            q.put_many(["ok 1", "ok 2", bad, "ok 3"])
        assert probe(q).snapshot() == before
        assert q.stats()["total"] == 1 and q.stats()["pending"] == 1
        assert q.verify() == []


@pytest.mark.contract
@pytest.mark.inv_5
def test_put_many_writes_all_into_one_shard_in_order(queue: Queue, probe: Probe) -> None:
    """inv_5: put_many puts every job, with the same options, into one shard; they run in list order."""
    payloads = [{"n": i} for i in range(25)]
    ids = queue.put_many(payloads, priority=3, name="batch.item", queue="bulk", max_retries=1)
    assert len(ids) == 25 and len(set(ids)) == 25
    assert len({probe(queue).shard_of(job_id) for job_id in ids}) == 1
    for job_id, payload in zip(ids, payloads, strict=True):
        job = queue.job(job_id)
        assert (job.payload, job.priority, job.name, job.queue, job.max_retries) == (
            payload, 3, "batch.item", "bulk", 1
        )  # fmt: skip
    assert queue.stats()["total"] == 25 and queue.stats()["pending"] == 25
    assert [queue.get(0).job_id for _ in ids] == ids


@pytest.mark.contract
@pytest.mark.inv_5
def test_put_many_of_nothing_writes_nothing(queue: Queue) -> None:
    """inv_5: an empty batch (list or exhausted generator) returns [] and writes nothing."""
    assert queue.put_many([]) == []
    assert queue.put_many(x for x in ()) == []
    assert queue.stats()["total"] == 0


@pytest.mark.contract
@pytest.mark.inv_5
def test_put_many_takes_a_generator(queue: Queue) -> None:
    """inv_5: a generator is consumed once and all of it is stored."""
    ids = queue.put_many(i * i for i in range(10))
    assert [queue.job(j).payload for j in ids] == [i * i for i in range(10)]


# ---------------------------------------------------------------------------------------------- inv_6


RICH_PAYLOAD = {
    "bytes": b"\x00\xff\x80binary",
    "nested": [1, [2, [3, {"deep": None}]], {"k": [True, False]}],
    "unicode": "żółć ✓ 日本",
    "ints": [0, -1, 2**63 - 1, -(2**63), 2**64 - 1],
    "floats": [0.5, -1e300, float("inf")],
    7: "int key",
    "empty": [{}, [], "", b""],
}


@pytest.mark.contract
@pytest.mark.inv_6
@pytest.mark.parametrize("pad", [0, 4000], ids=["small", "large"])
def test_msgpack_payload_round_trips(queue: Queue, pad: int) -> None:
    """inv_6: bytes, nested containers, unicode, big ints, int keys come back equal (tuples as lists)."""
    payload = dict(RICH_PAYLOAD, pad="p" * pad, tuple=(1, 2))
    expected = dict(payload, tuple=[1, 2])
    job_id = queue.put(payload)
    assert queue.job(job_id).payload == expected
    record = queue.get(0)
    assert record.payload == expected
    assert isinstance(record.payload["bytes"], bytes)


@pytest.mark.contract
@pytest.mark.inv_6
@pytest.mark.parametrize("pad", [0, 4000], ids=["small", "large"])
def test_stored_payload_is_plain_msgpack(queue: Queue, probe: Probe, pad: int) -> None:
    """inv_6: the payload as stored decodes with a plain msgpack reader, no extension types, no pickle; its
    bytes are exactly msgpack's encoding of the payload, and stay so as the job's state changes."""
    payload = dict(RICH_PAYLOAD, pad="p" * pad)
    job_id = queue.put(payload, name="some.task")
    raw_payload = probe(queue).stored(job_id).payload
    assert msgpack.unpackb(raw_payload, ext_hook=_no_ext, strict_map_key=False) == payload
    assert raw_payload == msgpack.packb(payload, use_bin_type=True)
    queue.get(0).ack(result={"ok": b"\x01"})
    assert probe(queue).stored(job_id).payload == raw_payload
    result = probe(queue).stored(job_id).result
    assert msgpack.unpackb(result, ext_hook=_no_ext) == {"ok": b"\x01"}


@pytest.mark.contract
@pytest.mark.inv_6
@pytest.mark.lmdb  # the record is one msgpack value in LMDB
@pytest.mark.parametrize("pad", [0, 4000], ids=["small", "large"])
def test_stored_record_is_plain_msgpack(queue: Queue, probe: Probe, pad: int) -> None:
    """inv_6: the record on disk decodes with a plain msgpack reader (one value, nothing after it, no
    extension types), before and after the state changes."""

    def stored_record() -> list[Any]:
        raw = probe(queue).record_bytes(job_id)
        assert raw is not None
        record = msgpack.unpackb(raw, ext_hook=_no_ext)  # one plain msgpack value, nothing after it
        assert isinstance(record, list)
        return record

    job_id = queue.put(dict(RICH_PAYLOAD, pad="p" * pad), name="some.task")
    assert "some.task" in stored_record()
    queue.get(0).ack(result={"ok": b"\x01"})
    stored_record()  # still plain msgpack after the state changes


@dataclasses.dataclass
class Invoice:
    """A perfectly picklable class: still not msgpack data."""

    number: int


class Reducible:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("pwned",))


@pytest.mark.contract
@pytest.mark.inv_6
@pytest.mark.parametrize(
    "payload",
    [
        object(),
        Invoice(1),
        Reducible(),
        Invoice,
        print,
        lambda: None,
        {1, 2},
        dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        decimal.Decimal("1.5"),
        {"nested": [1, {"deep": Invoice(2)}]},
        2**64,
        -(2**63) - 1,
    ],
    ids=lambda p: type(p).__name__,
)
def test_payload_that_is_not_msgpack_data_is_refused(queue: Queue, probe: Probe, payload: Any) -> None:
    """inv_6: objects, classes, functions, sets, datetimes, decimals and out-of-range ints are refused with
    PayloadNotSerializable; nothing is stored."""
    before = probe(queue).snapshot()
    with pytest.raises(PayloadNotSerializable, match="payload"):
        queue.put(payload)
    with pytest.raises(PayloadNotSerializable):
        queue.put_many(["good", payload])
    assert probe(queue).snapshot() == before
    assert queue.stats()["total"] == 0
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.inv_6
def test_result_that_is_not_msgpack_data_is_refused(queue: Queue) -> None:
    """inv_6: ack(result=<object>) raises PayloadNotSerializable and the job stays running, ackable."""
    job_id = queue.put("x")
    record = queue.get(0)
    with pytest.raises(PayloadNotSerializable, match="result"):
        record.ack(result=Invoice(3))
    assert queue.job(job_id).state is State.RUNNING
    record.ack(result={"number": 3})
    assert queue.job(job_id).result == {"number": 3}


@pytest.mark.contract
@pytest.mark.inv_6
def test_payload_of_another_queues_type_name_is_just_data(queue: Queue) -> None:
    """inv_6: a payload that names a callable is a string like any other; nothing is imported or run."""
    job_id = queue.put({"callable": "os.system", "args": ["echo pwned"]}, name="os.system")
    assert queue.get(0).payload == {"callable": "os.system", "args": ["echo pwned"]}
    assert queue.job(job_id).name == "os.system"


@pytest.mark.contract
@pytest.mark.inv_6
def test_put_validates_before_writing_even_with_good_options(queue: Queue) -> None:
    """inv_6: a payload refused by msgpack leaves no trace, and the next good put gets going normally."""
    with pytest.raises(PayloadNotSerializable):
        queue.put(Invoice(1), priority=5, delay=10, name="x")
    job_id = queue.put("fine")
    assert queue.stats()["total"] == 1
    assert queue.get(0).job_id == job_id
    with pytest.raises(InvalidJob):
        queue.put("x", priority=500)
