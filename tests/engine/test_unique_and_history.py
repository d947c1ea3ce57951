"""Unique puts, per-queue counts, and the history a job keeps of its attempts.

The rules proved here: a put with a ``unique_key`` already used returns the first job's id and writes nothing,
across threads, processes and ``sync=True`` group commits, until ``vacuum()`` forgets the key after
``result_ttl`` (a day at least); ``queue_counts()`` matches what was put and claimed; ``Job.worker_ids``
records the claiming Queue's ``worker_id`` per attempt and ``Job.errors`` each failed attempt's error, the
last 10 of each; records written before those fields existed (20 fields) still decode and gain them as they
change.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import (
    JOB_ENQUEUED,
    InvalidJob,
    Queue,
    QueueEmpty,
    State,
)
from queue_max_django.engine.stores.lmdb import layout
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import LmdbProbe, StoreProbe
from tests.engine.procs import CHILD_TIMEOUT, Children, finish, send

Probe = Callable[[Queue], StoreProbe]
MakeQueue = Callable[..., Queue]

DAY = 86_400.0  # how long a unique key lives at least (shard.UNIQUE_KEY_MIN_TTL)

# ------------------------------------------------------------------------------------------ unique puts


def test_a_second_put_with_the_same_unique_key_writes_nothing(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe
) -> None:
    """A put whose unique key was used returns the first job's id; the store is byte for byte unchanged
    (stats total too), and no JOB_ENQUEUED is emitted for it (before the fix it was, for a job never put)."""
    with make_queue() as q:
        enqueued: list[int] = []
        q.events.on(JOB_ENQUEUED, lambda **fields: enqueued.append(fields["job_id"]))
        first = q.put({"n": 1}, unique_key="tick:12:00")
        before = probe(q).snapshot()
        clock.advance(10)
        again = q.put({"n": 2}, unique_key="tick:12:00", priority=9, queue="other", delay=5)
        assert again == first
        assert probe(q).snapshot() == before
        assert q.stats()["total"] == 1 and q.stats()["pending"] == 1
        assert enqueued == [first]
        job = q.job(first)
        assert job is not None and job.payload == {"n": 1} and job.queue == "default"
        other = q.put({"n": 3}, unique_key="tick:12:01")
        assert other != first and q.stats()["total"] == 2
        assert enqueued == [first, other]
        assert q.verify() == []


def test_a_unique_key_holds_whatever_became_of_its_job(make_queue: MakeQueue, clock: FakeClock) -> None:
    """The key stays used while its job runs, after it is done, and after it failed: the id returned is
    still the first job's."""
    with make_queue(max_retries=0) as q:
        first = q.put("a", unique_key="k")
        record = q.get(timeout=0)
        assert q.put("b", unique_key="k") == first
        record.nack("boom")
        assert q.put("c", unique_key="k") == first
        assert q.stats()["total"] == 1
        job = q.job(first)
        assert job is not None and job.state is State.FAILED


def test_unique_keys_are_forgotten_by_vacuum_after_result_ttl(
    make_queue: MakeQueue, clock: FakeClock
) -> None:
    """vacuum() keeps a key younger than result_ttl (here more than the day a key lives at least) and
    forgets it once it is that old: the next put with it makes a new job. The key's age counts from the put
    that used it, not from later duplicates."""
    ttl = 2 * DAY
    with make_queue(result_ttl=ttl) as q:
        first = q.put("a", unique_key="k")
        clock.advance(0.6 * ttl)
        assert q.put("b", unique_key="k") == first
        q.vacuum()
        assert q.put("c", unique_key="k") == first
        clock.advance(0.4 * ttl)
        q.vacuum()
        second = q.put("d", unique_key="k")
        assert second != first
        assert q.stats()["total"] == 2
        clock.advance(0.5 * ttl)
        q.vacuum()
        assert q.put("e", unique_key="k") == second
    with make_queue(result_ttl=ttl) as q:  # on disk: the key is still known
        assert q.put("f", unique_key="k") == second


@pytest.mark.parametrize("result_ttl", [0, 100])
def test_unique_keys_live_a_day_at_least_whatever_result_ttl(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe, result_ttl: float
) -> None:
    """A key outlives a short result_ttl: its job done and vacuumed, the key still holds until a day after
    its put (the periodic scheduler's ticks rely on it, whatever RESULT_TTL)."""
    with make_queue(result_ttl=result_ttl) as q:
        first = q.put("a", unique_key="k")
        record = q.claim(first)
        assert record is not None
        record.ack()
        clock.advance(DAY - 1)
        q.vacuum()
        assert q.job(first) is None  # the job is gone with its result
        assert q.put("b", unique_key="k") == first  # the key is not
        assert q.stats()["total"] == 1
        clock.advance(1)
        q.vacuum()
        assert probe(q).unique_keys() == {}
        assert q.put("c", unique_key="k") != first


def test_vacuum_forgets_many_keys(make_queue: MakeQueue, clock: FakeClock, probe: Probe) -> None:
    """More keys than one vacuum step (1000) in one shard are all forgotten."""
    with make_queue(shards=1, result_ttl=10) as q:
        for n in range(2500):
            q.put(n, unique_key=f"k{n}")
        assert len(probe(q).unique_keys()) == 2500
        clock.advance(DAY)
        q.vacuum()
        assert probe(q).unique_keys() == {}
        assert q.put("again", unique_key="k0") > 0
        assert q.stats()["total"] == 2501


@pytest.mark.inv_7
@pytest.mark.parametrize(
    "bad",
    ["", "x" * 201, 7, b"bytes", ["k"], "\U0001f600" * 200, "\ud800"],
)
def test_a_bad_unique_key_raises_before_writing(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe, bad: Any
) -> None:
    """inv_7: a unique key that is not a str of 1 to 200 characters fitting a store key raises InvalidJob
    and writes nothing (before the fix, 200 emoji failed in LMDB with MDB_BAD_VALSIZE, a lone surrogate
    with UnicodeEncodeError)."""
    with make_queue() as q:
        before = probe(q).snapshot()
        with pytest.raises(InvalidJob):
            q.put("x", unique_key=bad)
        assert probe(q).snapshot() == before


@pytest.mark.inv_7
def test_unique_key_and_partition_key_together_are_refused(
    make_queue: MakeQueue, clock: FakeClock, probe: Probe
) -> None:
    """inv_7: the unique key routes its job to the shard where it is checked; a partition key would route it
    elsewhere, and the same key given with two partition keys made two jobs in two shards (the bug this
    proves fixed). Both at once raise InvalidJob and write nothing."""
    with make_queue() as q:
        before = probe(q).snapshot()
        with pytest.raises(InvalidJob, match="not both"):
            q.put("x", unique_key="k", partition_key="p1")
        assert probe(q).snapshot() == before
        first = q.put("x", unique_key="k")
        with pytest.raises(InvalidJob):
            q.put("x", unique_key="k", partition_key="zz9")
        assert q.stats()["total"] == 1
        assert probe(q).shard_of(first) == probe(q).shard_of(q.put("y", partition_key="k")), "the key routes"


def test_unique_put_with_sync(make_queue: MakeQueue, clock: FakeClock) -> None:
    """rule_durable: with sync=True (group commit) a repeated unique key writes nothing either, also when
    many threads put the same key at once (their puts may share one transaction)."""
    with make_queue(sync=True) as q:
        first = q.put("a", unique_key="solo")
        assert q.put("b", unique_key="solo") == first
        results: list[int] = []
        start = threading.Barrier(8)

        def put() -> None:
            start.wait()
            results.append(q.put("c", unique_key="shared"))

        threads = [threading.Thread(target=put) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(results)) == 1
        assert q.stats()["total"] == 2
        assert q.verify() == []
    with make_queue() as q:
        assert q.put("d", unique_key="shared") == results[0]


def put_unique(location: StoreLocation, go_path: str, key: str, count: int) -> None:
    """Child: say ready, wait for the go file, put ``count`` jobs with the same unique key; send the ids."""
    with location.open_queue() as q:
        send("ready")
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not os.path.exists(go_path) and time.monotonic() < deadline:
            time.sleep(0.001)
        send([q.put({"pid": os.getpid(), "n": n}, unique_key=key) for n in range(count)])


@pytest.mark.slow
def test_processes_racing_on_a_unique_key_make_one_job(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """Three processes putting the same unique key at the same instant get the same id: one job, one put
    counted in total."""
    with location.open_queue() as q:
        go = tmp_path / "go"
        racers = [children.start(put_unique, location, str(go), "once", 20) for _ in range(3)]
        children.together(go, racers)
        ids = [child.recv() for child in racers]
        for child in racers:
            finish(child)
        assert len({job_id for batch in ids for job_id in batch}) == 1
        assert q.stats()["total"] == 1
        job = q.job(ids[0][0])
        assert job is not None and job.payload["n"] == 0
        assert q.verify() == []


# ------------------------------------------------------------------------------------------ queue_counts


@pytest.mark.lmdb  # several shards, each given its jobs
def test_queue_counts_match_what_was_put_and_claimed(make_queue: MakeQueue, clock: FakeClock) -> None:
    """queue_counts() gives pending, scheduled and running per queue over all shards, sorted by name;
    finished jobs are not in it, and a queue with nothing waiting or running is absent."""
    with make_queue(shards=3, max_retries=0) as q:
        assert q.queue_counts() == {}
        for shard in range(3):
            q.put_many_to_shard(shard, ["m"] * 4, queue="mail")
            q.put_many_to_shard(shard, ["r"] * 2, queue="reports", delay=60)
        q.put_many(["b"] * 5, queue="billing", priority=3)
        q.put("gone", queue="zz-finished")
        assert list(q.queue_counts()) == ["billing", "mail", "reports", "zz-finished"]
        finished = q.get(timeout=0, queues=["zz-finished"])
        finished.ack()
        mail = q.get_many(5, timeout=0, queues=["mail"])
        mail += q.get_many(5, timeout=0, queues=["mail"])
        q.get(timeout=0, queues=["billing"]).nack("x")  # -> failed: no longer counted
        assert q.queue_counts() == {
            "billing": {"pending": 4, "scheduled": 0, "running": 0},
            "mail": {"pending": 12 - len(mail), "scheduled": 0, "running": len(mail)},
            "reports": {"pending": 0, "scheduled": 6, "running": 0},
        }
        clock.advance(61)  # due but not promoted yet: still scheduled
        assert q.queue_counts()["reports"] == {"pending": 0, "scheduled": 6, "running": 0}
        q.promote()
        assert q.queue_counts()["reports"] == {"pending": 6, "scheduled": 0, "running": 0}
        counts = q.queue_counts()
        stats = q.stats()
        for state in ("pending", "scheduled", "running"):
            assert sum(c[state] for c in counts.values()) == stats[state]


def test_queue_counts_with_odd_queue_names(make_queue: MakeQueue, clock: FakeClock) -> None:
    """Queue names of any length and script come back exactly (the name is cut from the index key)."""
    names = ["a", "é" * 100, "q" * 100, "名前", "with space"]
    with make_queue() as q:
        for n, name in enumerate(names):
            q.put_many([n] * (n + 1), queue=name, priority=(n * 37) % 201 - 100)
        assert q.queue_counts() == {
            name: {"pending": n + 1, "scheduled": 0, "running": 0}
            for n, name in sorted(enumerate(names), key=lambda x: x[1])
        }


# ------------------------------------------------------------------------------------------ history


def test_worker_ids_record_who_claimed_each_attempt(make_queue: MakeQueue, clock: FakeClock) -> None:
    """Job.worker_ids holds the claiming Queue's worker_id per attempt, whichever way it claimed: get(),
    get_many(), claim(job_id), or a claim under flow control. A Queue without a worker_id adds nothing."""
    with make_queue(shards=1, worker_id="alpha", max_retries=10) as alpha:
        beta = make_queue(worker_id="beta", max_retries=10)
        anonymous = make_queue()
        try:
            job_id = alpha.put("x")
            alpha.get(timeout=0).nack("1")
            beta.get_many(3, timeout=0)[0].nack("2")
            anonymous.get(timeout=0).nack("3")
            record = alpha.claim(job_id)
            assert record is not None
            record.nack("4")
            beta.set_rate_limit("*", "10/s")
            beta.get(timeout=0).ack()
            job = alpha.job(job_id)
            assert job is not None and job.worker_ids == ("alpha", "beta", "alpha", "beta")
            assert job.attempts == 5
        finally:
            beta.close()
            anonymous.close()


def test_worker_ids_keep_the_last_ten(make_queue: MakeQueue, clock: FakeClock) -> None:
    """worker_ids keeps the last 10 claims; the worker_id can be changed on a live Queue."""
    with make_queue(max_retries=20) as q:
        job_id = q.put("x")
        for n in range(13):
            q.worker_id = f"w{n}"
            q.get(timeout=0).nack("again")
        job = q.job(job_id)
        assert job is not None
        assert job.worker_ids == tuple(f"w{n}" for n in range(3, 13))


def test_errors_record_each_failed_attempt(make_queue: MakeQueue, clock: FakeClock) -> None:
    """rule_lease_attempt, rule_dead_letters: Job.errors holds (error type, error) of every failed attempt,
    oldest first: an exception, a string, no error, and a lost lease; the last is also error, error_type."""
    with make_queue(max_retries=3, lease_time=5) as q:
        job_id = q.put("x")
        q.get(timeout=0).nack(ValueError("bad value"))
        q.get(timeout=0).nack("plain text")
        q.get(timeout=0).nack()
        q.get(timeout=0)
        clock.advance(6)
        assert q.recover() == 1
        job = q.job(job_id)
        assert job is not None and job.state is State.FAILED
        assert job.errors[:3] == (
            ("ValueError", "bad value"),
            (None, "plain text"),
            (None, "nack() called without an error"),
        )
        assert job.errors[3][0] == "LeaseExpired" and str(job.errors[3][1]).startswith("lease expired")
        assert (job.error_type, job.error) == job.errors[-1]
        assert len(job.errors) == job.retries == 4


def test_errors_keep_the_last_ten(make_queue: MakeQueue, clock: FakeClock) -> None:
    """errors keeps the last 10 failed attempts; a successful attempt adds none."""
    with make_queue(max_retries=20) as q:
        job_id = q.put("x")
        for n in range(14):
            q.get(timeout=0).nack(RuntimeError(f"attempt {n}"))
        q.get(timeout=0).ack()
        job = q.job(job_id)
        assert job is not None and job.state is State.DONE
        assert job.errors == tuple(("RuntimeError", f"attempt {n}") for n in range(4, 14))


def _as_old_record(raw: bytes) -> bytes:
    """What the version before worker_ids/errors wrote: the same array, 20 fields long."""
    record = msgpack.unpackb(raw, raw=False)
    assert len(record) == layout.RECORD_FIELDS == 25
    return bytes(msgpack.packb(record[:20], use_bin_type=True))


@pytest.mark.lmdb  # the records an earlier version wrote into LMDB
def test_records_without_the_history_fields_still_decode(make_queue: MakeQueue, clock: FakeClock) -> None:
    """Records of 20 fields, written straight into LMDB as the previous version did, read as jobs with
    empty worker_ids and errors; claimed, failed and finished, they gain both; the store stays consistent."""
    with make_queue(shards=1, worker_id="old-worker", max_retries=2) as q:
        waiting, failed = q.put_many(["waiting", "failed"])
        q.get_many(2, timeout=0)[1].nack(permanent=True)  # the first stays running, the second fails
        # rewrite every record as 20 fields, past the engine; the next Queue to open the store reads them
        old = LmdbProbe(q)
        for job_id in (waiting, failed):
            old.rewrite_record_bytes(job_id, _as_old_record)
        raw = old.record_bytes(waiting)
        assert raw is not None and len(msgpack.unpackb(raw)) == 20
    with make_queue(shards=1, worker_id="new-worker", lease_time=5) as q:
        for job_id in (waiting, failed):
            job = q.job(job_id)
            assert job is not None and (job.worker_ids, job.errors) == ((), ())
        dead = q.job(failed)
        assert dead is not None and dead.state is State.FAILED and dead.error_type is None
        assert q.verify() == []
        # the old running job's lease expires: recovery adds its first error; a new claim adds a worker id
        clock.advance(31)
        assert q.recover() == 1
        record = q.get(timeout=0)
        assert record.job_id == waiting
        record.ack("done")
        job = q.job(waiting)
        assert job is not None and job.state is State.DONE
        assert job.worker_ids == ("new-worker",)
        assert [kind for kind, _text in job.errors] == ["LeaseExpired"]
        assert q.requeue(failed)
        record = q.get(timeout=0)
        record.nack(KeyError("k"))
        job = q.job(failed)
        assert job is not None and job.errors == (("KeyError", "'k'"),)
        assert job.worker_ids == ("new-worker",)
        assert q.verify() == []
        with pytest.raises(QueueEmpty):
            q.get(timeout=0, queues=["nothing-here"])
