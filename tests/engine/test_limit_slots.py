"""Concurrency limits' slots (issue 31) through the ``Queue``, on every store kind: a running limited job
that leaves the running state by being quarantined (its record found undecodable at its completion or at
its lease's recovery) gives its slot back, so the next job of its key starts. (A store whose records cannot
be garbled skips: ``StoreProbe.break_record``.)"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.types import Claimed
from queue_max_django.engine.tokens import new_token
from tests.store_contract.conftest import LEASE, T0
from tests.stores import KINDS

from .conftest import FakeClock
from .probes import StoreProbe

LIMIT = (("task:t", 1),)


def running(queue: Queue) -> int:
    return queue.concurrency_limits().get("task:t", {}).get("running", 0)


@pytest.mark.parametrize("ended_by", ["ack", "recovery"])
def test_a_quarantined_running_job_gives_its_slot_back(
    queue: Queue, probe: Callable[[Queue], StoreProbe], clock: FakeClock, ended_by: str
) -> None:
    first = queue.put("first", concurrency=LIMIT)
    second = queue.put("second", concurrency=LIMIT)
    record = queue.get(timeout=0)
    assert record.job_id == first
    assert running(queue) == 1
    probe(queue).break_record(first, "garbage-record")
    if ended_by == "ack":
        with pytest.raises(QueueCorrupted):
            record.ack()
    else:
        clock.advance(queue.lease_time + 1)
        queue.recover()
    broken = queue.job(first)
    assert broken is not None and broken.state is State.FAILED and broken.error_type == "Corrupted"
    assert running(queue) == 0
    nxt = queue.get(timeout=0)
    assert nxt.job_id == second
    nxt.ack()


def test_a_batch_of_acks_with_a_broken_record_gives_every_slot_back_once(
    queue: Queue, probe: Callable[[Queue], StoreProbe]
) -> None:
    """``ack_many`` of limited jobs, one of which is quarantined on the way: the slots of the others and
    of the broken one come back, none twice (the next jobs start up to the limit, not over it)."""
    limit = (("task:t", 3),)
    first = [queue.put(f"first {n}", concurrency=limit) for n in range(3)]
    later = [queue.put(f"later {n}", concurrency=limit) for n in range(4)]
    records = queue.get_many(3, timeout=0)
    assert sorted(r.job_id for r in records) == sorted(first)
    probe(queue).break_record(records[1].job_id, "garbage-record")
    queue.ack_many([(record, None) for record in records])
    assert running(queue) == 0
    taken = queue.get_many(10, timeout=0)
    with pytest.raises(QueueEmpty):
        queue.get_many(10, timeout=0)  # the limit is full again: the fourth waits
    assert len(taken) == 3 and running(queue) == 3
    assert {r.job_id for r in taken} <= set(later)


def test_a_stray_entry_at_a_groups_head_is_dropped_and_the_group_goes_on(
    queue: Queue, probe: Callable[[Queue], StoreProbe], store_kind: str
) -> None:
    """LMDB: a waiting entry of a limit's group whose job is no longer pending (an entry left by damage) is
    dropped by the limited claim, which takes the group's next job (it stopped there, for every claim)."""
    if store_kind != "lmdb":
        pytest.skip("an index entry apart from its job is LMDB's: the other stores keep no such entries")
    from queue_max_django.engine.concurrency import group_of
    from queue_max_django.engine.stores.lmdb import keys

    done = queue.put("done", name="t", concurrency=LIMIT)
    queue.get(timeout=0).ack()
    waiting = queue.put("waiting", name="t", concurrency=LIMIT)
    stray = keys.ready_key(keys.group_head(group_of("default", LIMIT)), 100, 1, done)  # before it
    with probe(queue)._txn(done, write=True) as (txn, dbs):  # type: ignore[attr-defined]
        txn.put(stray, b"t", db=dbs["ready"])
    record = queue.get(timeout=0)
    assert record.job_id == waiting
    record.ack()
    job = queue.job(done)
    assert job is not None and job.state is State.DONE


def test_a_broken_waiting_job_met_by_a_batch_claim_does_not_charge_the_batch_twice(
    queue: Queue, probe: Callable[[Queue], StoreProbe], clock: FakeClock
) -> None:
    """A limited claim that takes a job and then meets a waiting job of the group whose record does not
    decode (quarantined in the claim's transaction, the running counts recounted from the running records,
    the job just taken among them) charges the job it took once: the stored count is the jobs running, and
    after they end (acked or recovered) it is 0, so the key's next jobs start up to its limit again."""
    limit = (("task:t", 3),)
    earlier = queue.put("earlier", concurrency=limit)
    first = queue.get(timeout=0)  # a slot in use before the batch: the claim's quarantine recounts
    assert first.job_id == earlier
    taken, broken = queue.put("taken", concurrency=limit), queue.put("broken", concurrency=limit)
    later = [queue.put(f"later {n}", concurrency=limit) for n in range(3)]
    probe(queue).break_record(broken, "garbage-record")
    batch = queue.get_many(3, timeout=0)
    assert batch[0].job_id == taken
    held = queue.job(broken)
    assert held is not None and held.state is State.FAILED and held.error_type == "Corrupted"
    assert running(queue) == 1 + len(batch)
    first.ack()
    clock.advance(queue.lease_time + 1)
    queue.recover()  # the batch's leases expired: back to waiting, their slots with them
    assert running(queue) == 0
    again = [queue.get(timeout=0) for _ in range(3)]  # recovered: each claimed alone next
    assert running(queue) == 3
    with pytest.raises(QueueEmpty):
        queue.get(timeout=0)  # the limit is full: the last one waits
    assert {r.job_id for r in again} <= {taken, *later}


def test_a_broken_waiting_limited_job_leaves_its_queue_counted_right(
    queue: Queue, probe: Callable[[Queue], StoreProbe]
) -> None:
    """A limited job waiting (LMDB: under its group's head in the ready index, not its queue's) whose
    record does not decode is quarantined by the claim that meets it: its queue's pending count loses it,
    and the counts read back (no count under the group's head, whose bytes are not text)."""
    broken = queue.put("broken", queue="media", concurrency=LIMIT)
    fine = queue.put("fine", queue="media", concurrency=LIMIT)
    assert queue.queue_counts()["media"]["pending"] == 2
    probe(queue).break_record(broken, "garbage-record")
    record = queue.get(timeout=0)
    assert record.job_id == fine
    job = queue.job(broken)
    assert job is not None and job.state is State.FAILED and job.error_type == "Corrupted"
    counts = queue.queue_counts()
    assert counts.get("media", {}).get("pending", 0) == 0, counts
    assert set(counts) <= {"media", "default"}, counts
    record.ack()
    assert running(queue) == 0


# ------------------------------------------------------------------------- the turns, claim after claim


def _lput(store: Store, now: float, payloads: list[str], limits: Any) -> list[int]:
    from tests.store_contract.test_concurrency import lput

    return lput(store, now, *payloads, limits=limits)


def _claim(store: Store, now: float, limit: int) -> list[Claimed]:
    return store.concurrency.claim(0, now, None, LEASE, new_token(), "w1", None, limit).claimed


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    opened = KINDS[store_kind].open_store(request, FakeClock(T0))
    yield opened
    opened.close(flush=False)


def test_batch_claims_share_the_turns_fairly(store: Store) -> None:
    """Groups with many jobs each, claimed in batches that do not go round them evenly (4 jobs, 3 groups): a
    group served twice by a claim goes behind the ones served once, so every group gets as many jobs over
    claims (the groups go to the back in the order each was last served: first-served order gave the first
    group twice as many, claim after claim)."""
    for key in "ABC":
        _lput(store, T0, [f"{key}{n}" for n in range(12)], [(f"task:t:{key}", 100)])
    taken = [c.payload for _ in range(3) for c in _claim(store, T0 + 1, 4)]
    assert sorted(Counter(str(p)[0] for p in taken).values()) == [4, 4, 4], taken


@pytest.mark.parametrize("groups", [7, 300])
def test_the_turns_follow_the_reference_store_claim_after_claim(
    store: Store, store_kind: str, groups: int
) -> None:
    """A random run of puts to a few groups (some jobs under two limits), batch claims of random sizes and
    acknowledgements, on this store and on the in-memory reference store side by side: the same jobs are
    claimed in the same order. On LMDB the turns kept in its ``turns`` database are also checked after each
    step: one place per group that has waiting jobs and none for any other, and the running counts stored
    equal to those of the running jobs. With 300 groups, more than a claim reads of the turns."""
    if store_kind == "postgres":
        pytest.skip("PostgreSQL's limited claim keeps turns of its own design (claims one job at a time)")
    reference = KINDS["memory"].open_store(None, FakeClock(T0))  # type: ignore[arg-type]
    rng = random.Random(31)
    running: list[tuple[Claimed, Claimed]] = []
    number = 0
    now = T0
    names = [f"K{index}" for index in range(groups)]
    try:
        for name in names[7:]:  # beyond a few: one job each to begin with
            for side in (store, reference):
                _lput(side, now, [f"{name}-first"], [(f"task:t:{name}", 2)])
        for _step in range(300):
            now += 1
            action = rng.random()
            if action < 0.35:
                key = rng.choice(names)
                limits: list[tuple[str, int]] = [(f"task:t:{key}", rng.randint(1, 4))]
                if rng.random() < 0.3:
                    limits.insert(0, ("task:t", 6))
                payloads = [f"{key}{number + i}" for i in range(rng.randint(1, 5))]
                number += len(payloads)
                _lput(store, now, payloads, limits)
                _lput(reference, now, payloads, limits)
            elif action < 0.75:
                size = rng.randint(1, 8)
                mine, theirs = _claim(store, now, size), _claim(reference, now, size)
                assert [c.payload for c in mine] == [c.payload for c in theirs]
                running += zip(mine, theirs, strict=True)
            elif running:
                rng.shuffle(running)
                cut = rng.randint(1, len(running))
                ending, running = running[:cut], running[cut:]
                for side, which in ((store, 0), (reference, 1)):
                    done = [(pair[which].job_id, pair[which].token, None) for pair in ending]
                    side.complete_many(now, done, False)
            assert store.concurrency.running() == reference.concurrency.running()
            assert store.concurrency.waiting() == reference.concurrency.waiting()
            if store_kind == "lmdb":
                _check_lmdb_turns(store)
    finally:
        reference.close(flush=False)


def _check_lmdb_turns(store: Store) -> None:
    """Each shard's ``turns`` database against its jobs: a group has a place (both entries) exactly while
    jobs of it wait in the ready index, and the running counts are those of the running limited jobs."""
    from queue_max_django.engine.stores.lmdb import keys, turns
    from queue_max_django.engine.stores.lmdb.access import load_record
    from queue_max_django.engine.stores.lmdb.layout import F_LIMITS, F_STATE, RUNNING

    def check(txn: Any, shard: Any) -> None:
        entries = [(bytes(key), bytes(value)) for key, value in txn.cursor(db=shard.turns)]
        groups = {key[1:].decode(): value for key, value in entries if key.startswith(turns.GROUP_PREFIX)}
        placed = {key[9:].decode(): key[1:9] for key, _value in entries if key.startswith(turns.TURN_PREFIX)}
        assert placed == groups
        waiting = set()
        for key in txn.cursor(db=shard.ready).iternext(values=False):
            if bytes(key).startswith(keys.LIMITED):
                waiting.add(bytes(key)[1 : bytes(key).index(keys.QUEUE_SEP)].decode())
        assert set(groups) == waiting
        counted: Counter[str] = Counter()
        for key in txn.cursor(db=shard.lease).iternext(values=False):
            record = load_record(shard, txn, keys.time_key_parts(bytes(key))[1])
            if record is not None and record[F_STATE] == RUNNING and record[F_LIMITS] is not None:
                counted.update(limit_key for limit_key, _n in record[F_LIMITS][1])
        assert turns.running(shard, txn) == dict(counted)

    for shard in store._shards:  # type: ignore[attr-defined]
        shard.env.read(lambda txn, shard=shard: check(txn, shard))
