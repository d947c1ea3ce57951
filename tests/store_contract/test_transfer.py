"""Moving jobs: ``Store.transfer`` (``TransferOps``, ``engine/stores/contract/transfer.py``). A store exports
its jobs, removes them, and takes them back in: every job reads as it did, and the counts are as they were
(plus the puts the inserts count)."""

from __future__ import annotations

import pytest

from queue_max_django.engine.errors import InvalidJob
from queue_max_django.engine.job import SHARD_BITS, State, shard_of
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.transfer import MovedJob, TransferConflict, UniqueEntry
from queue_max_django.engine.stores.contract.uniqueness import HOLD_STARTED, ON_DUPLICATE_SKIP, UniqueRule
from queue_max_django.engine.stores.types import NewJobs
from queue_max_django.engine.tokens import new_token
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import claim, job, pack, put, spec


def everything(store: Store) -> list[MovedJob]:
    out: list[MovedJob] = []
    for shard in range(store.shards):
        after = None
        while batch := store.transfer.export(shard, after, 3):
            out.extend(batch)
            after = batch[-1].job_id
    return out


def by_shard(store: Store, jobs: list[MovedJob]) -> dict[int, list[MovedJob]]:
    out: dict[int, list[MovedJob]] = {}
    for moved in jobs:
        out.setdefault(shard_of(moved.job_id) if store.shards > 1 else 0, []).append(moved)
    return out


def a_store_of_every_state(store: Store, clock: FakeClock) -> dict[str, int]:
    now = clock()
    ids: dict[str, int] = {}
    ids["pending"] = put(store, now, "p", priority=5, metadata=b'{"k": 1}', partition_key="pk")[0]
    ids["scheduled"] = put(store, now, "s", ready_at=now + 600)[0]
    ids["limited"] = store.enqueue(now, 0, [_limited(now)], False)[0]
    ids["big"] = put(store, now, "x" * 5000, shard=store.shards - 1)[0]
    done, failed, retried, cancelled = (put(store, now, n, max_retries=1)[0] for n in "dfrc")
    running = put(store, now, "running")[0]
    for job_id in (done, failed, retried, cancelled, running):
        got = store.claim_job(now, job_id, 30.0, token := new_token(), "w1", False)
        assert got is not None
        if job_id == done:
            store.complete(now, job_id, token, pack({"ok": True}), False)
        elif job_id == failed:
            store.fail(now, job_id, token, ("boom", "ValueError", "tb"), None, False)
        elif job_id == retried:
            store.fail(now, job_id, token, ("once", "KeyError", None), now + 60, False)
        elif job_id == cancelled:
            store.cancel(now, job_id, "ops")
            store.fail(now, job_id, token, ("cancelled", "queue_max_django.engine.cancels.Cancelled", None),
                       None, False)  # fmt: skip
    ids.update(done=done, failed=failed, retried=retried, cancelled=cancelled, running=running)
    return ids


def _limited(now: float) -> NewJobs:
    limited = spec("limited")
    limited.concurrency = (("tenant:1", 2),)
    return NewJobs([pack("l")], limited)


@pytest.mark.sc_transfer_export
@pytest.mark.sc_transfer_insert
@pytest.mark.sc_transfer_remove
def test_every_job_but_the_running_one_goes_out_and_comes_back_as_it_was(
    store: Store, clock: FakeClock
) -> None:
    ids = a_store_of_every_state(store, clock)
    now = clock()
    before = {job_id: job(store, now, job_id) for job_id in ids.values()}
    counts, totals = store.counts(), store.enqueued_totals()
    moved = everything(store)
    assert [m.job_id for m in moved] == sorted(m.job_id for m in moved) or store.shards > 1
    assert {m.job_id for m in moved} == set(ids.values()) - {ids["running"]}
    assert {m.state for m in moved} == {State.PENDING, State.SCHEDULED, State.DONE, State.FAILED}
    for shard, jobs in by_shard(store, moved).items():
        assert store.transfer.remove(shard, [m.job_id for m in jobs]) == len(jobs)
    assert store.counts()["pending"] == store.counts()["failed"] == 0
    assert all(store.job(now, m.job_id) is None for m in moved)
    for jobs in by_shard(store, moved).values():
        assert sorted(store.transfer.insert(jobs)) == sorted(m.job_id for m in jobs)
    after = {job_id: job(store, now, job_id) for job_id in ids.values()}
    assert after == before
    assert store.cancel_requested(ids["cancelled"])
    grown = dict(counts, total=counts["total"] + len(moved))
    assert store.counts() == grown
    assert sum(store.enqueued_totals().values()) == sum(totals.values()) + len(moved)
    assert store.verify() == []
    # They work as jobs: the pending ones are claimed in their order, the limited one in its turn.
    claimed = [c.job_id for c in claim(store, now, limit=10, shard=0)]
    assert claimed[0] == ids["pending"]
    assert store.concurrency is not None


@pytest.mark.sc_transfer_insert
@pytest.mark.sc_transfer_marks
def test_a_rerun_skips_the_marked_ids_and_an_id_of_the_store_s_own_is_refused(
    store: Store, clock: FakeClock
) -> None:
    now = clock()
    first, second = put(store, now, "a", "b")
    moved = store.transfer.export(0, None, 10)
    store.transfer.remove(0, [first])
    assert store.transfer.insert([m for m in moved if m.job_id == first]) == [first]
    assert store.transfer.marks() == 1
    assert store.transfer.insert([m for m in moved if m.job_id == first]) == []  # a rerun: marked
    with pytest.raises(TransferConflict):
        store.transfer.insert(moved)  # ``second`` is the store's own job
    assert store.counts()["pending"] == 2 and store.transfer.marks() == 1
    # Even once the moved job has run and gone, its id is not written again while the mark is there.
    got = store.claim_job(now, first, 30.0, token := new_token(), None, False)
    assert got is not None
    store.complete(now, first, token, None, False)
    assert store.delete(now, first, None)
    assert store.transfer.insert([m for m in moved if m.job_id == first]) == []
    assert store.transfer.forget_marks() == 1
    assert store.transfer.marks() == 0 and store.transfer.forget_marks() == 0
    assert second


@pytest.mark.sc_transfer_ids
def test_an_inserted_job_keeps_its_id_and_later_puts_get_larger_ones(store: Store, clock: FakeClock) -> None:
    now = clock()
    [own] = put(store, now, "a")
    [template] = store.transfer.export(0, None, 1)
    store.transfer.remove(0, [own])
    far = ((own >> SHARD_BITS) + 10_000_000) << SHARD_BITS  # a sequence ten seconds ahead, shard 0
    template.job_id = far
    assert store.transfer.insert([template]) == [far]
    assert job(store, now, far).payload == "a"
    [later] = put(store, now, "b")
    assert later > far
    if store.shards == 1:  # a store of one shard holds an id whose low byte names another store's shard
        template.job_id = (own >> SHARD_BITS) << SHARD_BITS | 5
        assert store.transfer.insert([template]) == [template.job_id]
        claimed = store.claim_job(now, template.job_id, 30.0, new_token(), None, False)
        assert claimed is not None and claimed.payload == "a"
    else:
        template.job_id = far + 1000 * (1 << SHARD_BITS) + store.shards  # a shard it does not have
        with pytest.raises(InvalidJob):
            store.transfer.insert([template])
    assert store.verify() == []


@pytest.mark.sc_transfer_export
@pytest.mark.sc_transfer_insert
def test_a_unique_key_moves_with_the_job_that_holds_it(store: Store, clock: FakeClock) -> None:
    now = clock()
    note = b'{"_unique": {"key": "order-7", "until": "started", "on_duplicate": "skip"}}'
    rule = UniqueRule(b"order-7", HOLD_STARTED, 0, ON_DUPLICATE_SKIP)
    [holder] = put(store, now, "a", unique=rule, metadata=note)
    [moved] = store.transfer.export(0, None, 10)
    entries = dict(store.transfer.unique_entries(0))
    assert entries == {holder: UniqueEntry(b"order-7", int(now * 1_000_000), HOLD_STARTED, 0)}
    moved.unique = entries[holder]
    store.transfer.remove(0, [holder])
    store.vacuum(now, now, 0.0)  # the entry held nothing once its job was gone: forgotten
    assert put(store, now, "b", unique=rule, metadata=note) != [holder]  # the key was free
    second = store.transfer.export(0, None, 10)[0]
    store.transfer.remove(0, [second.job_id])
    store.vacuum(now, now, 0.0)
    assert store.transfer.insert([moved]) == [holder]
    batch = NewJobs([pack("c")], spec(metadata=note), rule)
    assert (
        store.enqueue(now, 0, [batch], False) == [holder] and batch.unique_hit
    )  # a duplicate of the moved job
