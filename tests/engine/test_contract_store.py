"""Contract tests of the store as a whole: vacuum, counters, shutdown, shared environments, the store's
metadata and verify().

EQueue RFC-PS-02/03, RFC-ST-*, RFC-SH-*, RFC-INV-01/02/06/07, and DESIGN.md's rules on shared environments,
store metadata and verify().
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import (
    Queue,
    QueueClosed,
    State,
    StoreMismatch,
)
from tests.engine.conftest import FakeClock, open_queue
from tests.engine.probes import LmdbProbe, StoreProbe, Where

Probe = Callable[[Queue], StoreProbe]

LIFECYCLE = ("pending", "scheduled", "running", "done", "failed")


def lifecycle_sum(stats: dict[str, Any]) -> int:
    return sum(stats[name] for name in LIFECYCLE)


def workload(q: Queue, clock: FakeClock) -> Iterator[str]:
    """A mixed run through every operation; yields a label after each step."""
    for i in range(8):
        q.put(i, max_retries=1)
    yield "put"
    q.put_many(range(5), name="batch")
    yield "put_many"
    q.put("later", delay=30)
    q.put("big" * 1000)
    yield "put scheduled and large"
    held = [q.get(0) for _ in range(7)]
    yield "get"
    held[0].ack({"r": 1})
    held[1].ack()
    yield "ack"
    held[2].nack("retry")
    yield "nack -> pending"
    held[3].nack("dead", permanent=True)
    yield "nack -> failed"
    held[4].release()
    yield "release"
    held[5].nack("later", delay=5)
    yield "nack -> scheduled"
    clock.advance(31)
    yield "advance"
    q.recover()
    yield "recover"
    q.recover()
    yield "recover again"
    q.requeue(held[3].job_id)
    yield "requeue"
    q.cancel(q.jobs(State.PENDING)[0].job_id)
    q.cancel(q.jobs(State.PENDING)[0].job_id + 256 * 10**9)  # no such job
    yield "cancel"
    for record in [q.get(0) for _ in range(4)]:
        record.ack()
    yield "ack more"
    q.vacuum(older_than=0)
    q.vacuum(older_than=0)
    yield "vacuum"
    q.get(0).nack("fatal", permanent=True)
    yield "fail one"
    q.purge(State.FAILED)
    q.purge(State.FAILED)
    yield "purge failed"
    q.promote()
    yield "promote"
    q.purge(State.SCHEDULED)
    yield "purge scheduled"


# --------------------------------------------------------------------------------------------- vacuum


@pytest.mark.contract
@pytest.mark.rfc_ps_02
def test_vacuum_removes_done_records_only(queue: Queue) -> None:
    """RFC-PS-02: vacuum deletes done jobs; failed, pending, scheduled and running ones stay."""
    done = [queue.put(f"done {i}", partition_key="d") for i in range(3)]
    for _ in done:
        queue.get(0).ack()
    failed = [queue.put(f"failed {i}", max_retries=0, partition_key="f") for i in range(2)]
    for _ in failed:
        queue.get(0).nack("bad")
    running = queue.put("running")
    record = queue.get(0)
    pending = queue.put("pending")
    scheduled = queue.put("scheduled", delay=100)

    assert queue.vacuum(older_than=0) == 3

    assert all(queue.job(j) is None for j in done)
    assert all(queue.job(j).state is State.FAILED for j in failed)
    assert queue.job(running).state is State.RUNNING
    assert queue.job(pending).state is State.PENDING
    assert queue.job(scheduled).state is State.SCHEDULED
    assert queue.stats()["failed"] == 2 and queue.stats()["done"] == 0
    record.ack()
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_ps_03
def test_vacuum_decrements_done_counter(queue: Queue, clock: FakeClock) -> None:
    """RFC-PS-03: stats()["done"] drops by exactly the number vacuum removed; older_than picks by finish."""
    for i in range(5):
        queue.put(i)
    old = [queue.get(0) for _ in range(2)]
    for record in old:
        record.ack()
    clock.advance(100)
    for _ in range(3):
        queue.get(0).ack()
    assert queue.stats()["done"] == 5

    assert queue.vacuum(older_than=50) == 2
    assert queue.stats()["done"] == 3
    assert all(queue.job(r.job_id) is None for r in old)
    assert queue.vacuum(older_than=50) == 0
    assert queue.stats()["done"] == 3
    assert queue.vacuum(older_than=0) == 3
    assert queue.stats()["done"] == 0 and queue.stats()["total"] == 5


@pytest.mark.contract
@pytest.mark.rfc_ps_03
def test_vacuum_default_uses_result_ttl(clock: FakeClock, make_queue: Callable[..., Queue]) -> None:
    """RFC-PS-03: vacuum() with no argument removes the jobs done at least result_ttl ago."""
    with make_queue(result_ttl=60) as q:
        job_id = q.put("x")
        q.get(0).ack()
        clock.advance(59)
        assert q.vacuum() == 0 and q.stats()["done"] == 1
        clock.advance(1)
        assert q.vacuum() == 1 and q.stats()["done"] == 0
        assert q.job(job_id) is None


@pytest.mark.contract
@pytest.mark.rfc_inv_06
@pytest.mark.parametrize("size", [10, 5000], ids=["small", "large"])
def test_vacuum_leaves_no_trace_of_done_jobs(queue: Queue, size: int, probe: Probe) -> None:
    """RFC-INV-06: after vacuum no key of any database names a vacuumed job (record, payload, lists,
    indexes); a failed job keeps its keys."""
    done = [queue.put("d" * size, partition_key="p") for _ in range(3)]
    for _ in done:
        queue.get(0).ack(result="r" * size)
    failed = queue.put("f" * size, max_retries=0, partition_key="p")
    queue.get(0).nack("kept")
    assert all(probe(queue).places(j) for j in done)

    assert queue.vacuum(older_than=0) == 3

    for job_id in done:
        assert probe(queue).places(job_id) == []
    assert probe(queue).places(failed) != []
    assert queue.verify() == []


# ---------------------------------------------------------------------------------------------- stats


@pytest.mark.contract
@pytest.mark.rfc_st_01
def test_stats_exposes_all_documented_keys(queue: Queue) -> None:
    """RFC-ST-01: stats() has pending, scheduled, running, done, failed and total, as ints, from the start."""
    stats = queue.stats()
    assert set(LIFECYCLE) | {"total"} <= set(stats)
    assert all(stats[name] == 0 for name in (*LIFECYCLE, "total"))
    queue.put("x")
    queue.put("y", delay=5)
    stats = queue.stats()
    assert all(type(stats[name]) is int for name in (*LIFECYCLE, "total"))
    assert (stats["pending"], stats["scheduled"], stats["total"]) == (1, 1, 2)


@pytest.mark.contract
@pytest.mark.rfc_st_02
def test_counters_never_negative(queue: Queue, clock: FakeClock) -> None:
    """RFC-ST-02: through every operation (including repeated vacuum/purge/recover/cancel), no count < 0."""
    for step in workload(queue, clock):
        stats = queue.stats()
        assert all(stats[name] >= 0 for name in (*LIFECYCLE, "total")), (step, stats)
    for _ in range(2):
        queue.vacuum(older_than=0)
        queue.purge(State.DONE)
        queue.purge(State.PENDING)
        queue.recover()
        stats = queue.stats()
        assert all(stats[name] >= 0 for name in (*LIFECYCLE, "total")), stats
    assert lifecycle_sum(queue.stats()) == queue.stats()["running"]


@pytest.mark.contract
@pytest.mark.rfc_st_03
def test_lifecycle_sum_never_exceeds_total(queue: Queue, clock: FakeClock) -> None:
    """RFC-ST-03: pending + scheduled + running + done + failed <= total after every step."""
    for step in workload(queue, clock):
        stats = queue.stats()
        assert lifecycle_sum(stats) <= stats["total"], (step, stats)
        assert queue.verify() == [], step
    assert queue.stats()["total"] == 15


@pytest.mark.contract
@pytest.mark.rfc_st_03
def test_lifecycle_invariant_holds_after_vacuum_and_reopen(make_queue: Callable[..., Queue]) -> None:
    """RFC-ST-03: after vacuum and a reopen the counts still add up and total is unchanged."""
    with make_queue() as q:
        for i in range(10):
            q.put(i)
        for _ in range(6):
            q.get(0).ack()
        q.get(0).nack("x", permanent=True)
        q.vacuum(older_than=0)
        before = q.stats()
    assert lifecycle_sum(before) == 4 and before["total"] == 10
    with make_queue() as q:
        after = q.stats()
        assert after == before
        assert lifecycle_sum(after) <= after["total"]
        assert q.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_inv_01
def test_total_counts_every_successful_put_across_restarts(make_queue: Callable[..., Queue]) -> None:
    """RFC-INV-01: total == successful put()s + put_many() items ever, across reopens; refused puts and
    deletions do not change it."""
    with make_queue() as q:
        for i in range(5):
            q.put(i)
        q.put_many(["a", "b", "c"])
        q.put_many([])
        with pytest.raises(ValueError):
            q.put("x", priority=1000)
        with pytest.raises(TypeError):
            q.put_many(["ok", object()])
        assert q.stats()["total"] == 8
    with make_queue() as q, make_queue() as twin:
        assert q.stats()["total"] == 8
        q.put("from q")
        twin.put("from twin")
        q.cancel(q.jobs(State.PENDING)[0].job_id)
        q.get(0).ack()
        q.vacuum(older_than=0)
        q.purge(State.PENDING)
        assert q.stats()["total"] == twin.stats()["total"] == 10
    with make_queue() as q:
        assert q.stats()["total"] == 10
        assert q.verify() == []


@pytest.mark.contract
@pytest.mark.rfc_inv_02
def test_lifecycle_sum_equals_total_until_something_is_deleted(queue: Queue, clock: FakeClock) -> None:
    """RFC-INV-02: while nothing was vacuumed, purged or cancelled, the states add up to total exactly."""
    for i in range(6):
        queue.put(i, max_retries=0)
    queue.put("later", delay=10)
    records = [queue.get(0) for _ in range(4)]
    records[0].ack()
    records[1].nack("x")
    records[2].release()
    clock.advance(11)
    queue.promote()
    stats = queue.stats()
    assert lifecycle_sum(stats) == stats["total"] == 7
    queue.vacuum(older_than=0)
    stats = queue.stats()
    assert lifecycle_sum(stats) == 6 and stats["total"] == 7


# ------------------------------------------------------------------------------------------- shutdown


@pytest.mark.contract
@pytest.mark.rfc_sh_01
def test_close_is_idempotent(make_queue: Callable[..., Queue]) -> None:
    """RFC-SH-01: close() twice (and the context manager's close after it) is safe."""
    with make_queue(do_recover=True, do_vacuum=True) as q:
        q.put("x")
        q.close()
        q.close()
        assert q.closed
    with make_queue() as q:
        assert q.stats()["pending"] == 1


def _after_close_operations(q: Queue, record: Any) -> dict[str, Callable[[], Any]]:
    return {
        "put": lambda: q.put("x"),
        "put_many": lambda: q.put_many(["x"]),
        "get": lambda: q.get(0),
        "get blocking": lambda: q.get(timeout=5),
        "processing": lambda: q.processing(timeout=0).__enter__(),
        "stats": q.stats,
        "job": lambda: q.job(record.job_id),
        "jobs": lambda: q.jobs(State.PENDING),
        "dead_letters": q.dead_letters,
        "requeue": lambda: q.requeue(record.job_id),
        "cancel": lambda: q.cancel(record.job_id),
        "purge": lambda: q.purge(State.DONE),
        "recover": q.recover,
        "vacuum": q.vacuum,
        "verify": q.verify,
        "wait_until_empty": lambda: q.wait_until_empty(timeout=1),
        "ack": record.ack,
        "nack": lambda: record.nack("x"),
        "release": record.release,
        "touch": record.touch,
    }


@pytest.mark.contract
@pytest.mark.rfc_sh_02
def test_operations_after_close_raise_queue_closed(make_queue: Callable[..., Queue]) -> None:
    """RFC-SH-02: every operation of a closed Queue, and of its records, raises QueueClosed."""
    q = make_queue()
    q.put("a")
    q.put("b")
    record = q.get(0)
    q.close()
    for name, operation in _after_close_operations(q, record).items():
        with pytest.raises(QueueClosed):
            operation()
            pytest.fail(f"{name} did not raise")
    with make_queue() as again:  # nothing was changed by the refused calls
        stats = again.stats()
        assert (stats["pending"], stats["running"], stats["total"]) == (1, 1, 2)


@pytest.mark.contract
@pytest.mark.rfc_sh_02
def test_close_wakes_a_blocked_get(make_queue: Callable[..., Queue]) -> None:
    """RFC-SH-02: a get() blocked in another thread returns QueueClosed soon after close()."""
    q = make_queue()
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            q.get(timeout=10)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(0.1)
    started = time.monotonic()
    q.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 0.5  # woken by close(), not by the 1 s idle re-check
    assert len(outcome) == 1 and isinstance(outcome[0], QueueClosed)


BACKGROUND: dict[str, Any] = {"do_recover": True, "do_vacuum": True, "retry_backoff": 1.0}
"""A Queue's own defaults: with its background threads."""


@pytest.mark.contract
@pytest.mark.rfc_inv_07
def test_repeated_close_never_raises(make_queue: Callable[..., Queue]) -> None:
    """RFC-INV-07: close() many times, on queues with background threads, in any order, never raises."""
    first = make_queue(**BACKGROUND, recover_interval=0.01, vacuum_interval=0.01, sync_interval=0.01)
    second = make_queue(**BACKGROUND, recover_interval=0.01)
    first.put("x")
    time.sleep(0.05)  # let the background threads run a round or two
    for _ in range(3):
        second.close()
        first.close()
    with first, second:
        pass
    assert first.closed and second.closed
    with make_queue() as q:
        assert q.stats()["pending"] == 1


# ------------------------------------------------------------------------------------------ shared env


@pytest.mark.contract
@pytest.mark.rule_shared_env
@pytest.mark.lmdb  # LMDB environments
def test_two_queues_on_one_path_share_environments(make_queue: Callable[..., Queue]) -> None:
    """rule_shared_env: two Queues on one path in one process use the same LMDB environment per shard and
    see each other's writes at once."""
    with make_queue() as q1, make_queue() as q2:
        assert q1.shard_count == q2.shard_count
        for env1, env2 in zip(LmdbProbe(q1).environments(), LmdbProbe(q2).environments(), strict=True):
            assert env1 is env2
        job_id = q1.put("from q1")
        record = q2.get(0)
        assert record.job_id == job_id
        record.ack("done by q2")
        assert q1.job(job_id).result == "done by q2"
        assert q1.stats() == q2.stats()


@pytest.mark.contract
@pytest.mark.rule_shared_env
@pytest.mark.parametrize("close_first", ["q1", "q2"])
def test_closing_one_queue_leaves_the_other_working(
    close_first: str, make_queue: Callable[..., Queue]
) -> None:
    """rule_shared_env: closing one of two Queues on a path (twice, even) does not break the other."""
    queues = {"q1": make_queue(), "q2": make_queue()}
    closed = queues.pop(close_first)
    (survivor,) = queues.values()
    try:
        held = survivor.put("held", partition_key="p")
        record = survivor.get(0)
        closed.close()
        closed.close()

        job_id = survivor.put("after close", partition_key="p")
        got = survivor.get(0)
        assert got.job_id == job_id
        got.ack()
        record.ack()
        assert survivor.job(held).state is State.DONE
        assert survivor.stats()["done"] == 2
        assert survivor.verify() == []
        with pytest.raises(QueueClosed):
            closed.put("x")
    finally:
        survivor.close()
    with make_queue() as reopened:
        assert reopened.stats()["done"] == 2


# ------------------------------------------------------------------------------------------ store meta


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.lmdb  # shards and store.json
def test_reopen_with_other_shard_count_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """rule_store_meta: another shards= raises StoreMismatch saying what to do; the store is untouched."""
    path = tmp_path / "store"
    with open_queue(path, clock, shards=4) as q:
        job_id = q.put("x")
    with pytest.raises(StoreMismatch) as caught:
        open_queue(path, clock, shards=6)
    message = str(caught.value)
    assert "4" in message and "6" in message
    assert "shards=None" in message
    with open_queue(path, clock, shards=None) as q:
        assert q.shard_count == 4
        assert q.job(job_id).payload == "x"
    with open_queue(path, clock, shards=4) as q:
        assert q.stats()["pending"] == 1


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.lmdb  # shards and store.json
def test_new_store_defaults_to_six_shards(tmp_path: Path, clock: FakeClock) -> None:
    """rule_store_meta: shards=None on a new path creates 6 shards; later opens read that count."""
    path = tmp_path / "store"
    with open_queue(path, clock) as q:
        assert q.shard_count == 6 and q.stats()["shards"] == 6
    assert json.loads((path / "store.json").read_text())["shards"] == 6
    with open_queue(path, clock, shards=None) as q:
        assert q.shard_count == 6


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.lmdb  # shards and store.json
def test_store_json_with_another_layout_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """rule_store_meta: a store.json of another layout version raises StoreMismatch naming the layout."""
    path = tmp_path / "store"
    with open_queue(path, clock, shards=2) as q:
        q.put("x")
    meta_file = path / "store.json"
    meta = json.loads(meta_file.read_text())
    meta["layout"] = meta["layout"] + 1
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(StoreMismatch, match="layout"):
        open_queue(path, clock)
    with pytest.raises(StoreMismatch, match="layout"):
        open_queue(path, clock, shards=2)


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.parametrize("content", ["not json at all", "{}", '{"layout": 1}', "[1, 2]"])
@pytest.mark.lmdb  # shards and store.json
def test_unreadable_store_json_is_refused(tmp_path: Path, clock: FakeClock, content: str) -> None:
    """rule_store_meta: a store.json that does not describe a store raises StoreMismatch, not a crash."""
    path = tmp_path / "store"
    with open_queue(path, clock):
        pass
    (path / "store.json").write_text(content)
    with pytest.raises(StoreMismatch, match=r"store\.json"):
        open_queue(path, clock)


# --------------------------------------------------------------------------------------------- verify


@pytest.mark.contract
@pytest.mark.rule_verify
def test_verify_is_clean_after_a_mixed_workload(queue: Queue, clock: FakeClock) -> None:
    """rule_verify: verify() finds nothing wrong at any point of a run through every operation."""
    for step in workload(queue, clock):
        assert queue.verify() == [], step


def _job_in_state(q: Queue, state: State, payload: Any = "x") -> int:
    """A fresh job put into ``state`` (in its own shard so that other jobs do not get in the way)."""
    job_id = q.put(payload, partition_key="target", delay=60 if state is State.SCHEDULED else None)
    if state in (State.RUNNING, State.DONE, State.FAILED):
        record = q.get(0)
        assert record.job_id == job_id
        if state is State.DONE:
            record.ack()
        elif state is State.FAILED:
            record.nack("bad", permanent=True)
    assert q.job(job_id).state is state
    return job_id


# (what to damage, the state the job must be in for that to exist)
DAMAGE: list[tuple[Where, State]] = [
    (State.PENDING, State.PENDING),
    (State.SCHEDULED, State.SCHEDULED),
    (State.RUNNING, State.RUNNING),
    (State.DONE, State.DONE),
    (State.FAILED, State.FAILED),
    ("record", State.PENDING),
    ("payload", State.PENDING),
]


@pytest.mark.contract
@pytest.mark.rule_verify
@pytest.mark.parametrize(("where", "state"), DAMAGE, ids=[str(where) for where, _ in DAMAGE])
def test_verify_reports_a_deleted_entry(queue: Queue, probe: Probe, where: Where, state: State) -> None:
    """rule_verify: deleting by hand what the store holds for a job (its state's index entry, its record,
    its payload) makes verify() say so."""
    job_id = _job_in_state(queue, state, payload="p" * 5000)  # large: it has a payload of its own
    words = probe(queue).drop_entry(job_id, where)

    problems = queue.verify()

    assert problems != []
    assert any(str(job_id) in p or any(word in p for word in words) for p in problems), problems


@pytest.mark.contract
@pytest.mark.rule_verify
@pytest.mark.parametrize("state", list(State))
def test_verify_reports_a_stray_entry(queue: Queue, probe: Probe, state: State) -> None:
    """rule_verify: an index entry for a job that does not exist is reported."""
    job_id = queue.put("x")
    ghost = job_id + 256 * 1000  # same shard, never put
    probe(queue).stray_entry(ghost, state)

    assert queue.verify() != []


@pytest.mark.contract
@pytest.mark.rule_verify
def test_verify_reports_a_job_in_two_states(queue: Queue, probe: Probe) -> None:
    """rule_verify: a job indexed as both pending and failed is reported."""
    job_id = queue.put("x")
    probe(queue).stray_entry(job_id, State.FAILED)
    assert any(str(job_id) in p for p in queue.verify())
