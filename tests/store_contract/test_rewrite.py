"""Rewriting a job's sealed fields in place: ``Store.transfer.rewrite`` (``[sc_transfer_rewrite]``,
``engine/stores/contract/transfer.py``), which ``manage.py queue_rekey`` uses to seal jobs again under a new
key. Only a job that still holds what was read is rewritten; everything else about it stays."""

from __future__ import annotations

import dataclasses
import json

import pytest

from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.transfer import MovedJob, SealedFields
from queue_max_django.engine.tokens import new_token
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import claim, pack, put
from tests.store_contract.test_transfer import by_shard, everything


def _new(old: SealedFields, tag: str) -> SealedFields:
    return SealedFields(
        pack(f"{tag}-payload" + "y" * (6000 if tag == "big" else 0)),
        None if old.result is None else pack(f"{tag}-result"),
        None if old.error is None else f"{tag}-error",
        None if old.traceback is None else f"{tag}-tb",
        tuple((kind, f"{tag}-e{i}") for i, (kind, _m) in enumerate(old.errors)),
        json.dumps({**_tags(old), "_sealed": tag}).encode(),  # its tags kept, as queue_rekey keeps them
    )


def _jobs(store: Store, clock: FakeClock) -> dict[str, int]:
    now = clock()
    ids = {
        "pending": put(store, now, "p", metadata=b'{"_tags":["t"],"k":1}')[0],
        "scheduled": put(store, now, "s", ready_at=now + 600)[0],
        "big": put(store, now, "x" * 5000)[0],
    }
    done, failed = put(store, now, "d")[0], put(store, now, "f")[0]
    for job_id in (done, failed):
        got = store.claim_job(now, job_id, 30.0, token := new_token(), "w1", False)
        assert got is not None
        if job_id == done:
            store.complete(now, job_id, token, pack({"ok": True}), False)
        else:
            store.fail(now, job_id, token, ("boom", "ValueError", "tb"), None, False)
    ids.update(done=done, failed=failed)
    return ids


@pytest.mark.sc_transfer_rewrite
def test_rewrite_replaces_the_sealed_fields_and_nothing_else(store: Store, clock: FakeClock) -> None:
    ids = _jobs(store, clock)
    before = {moved.job_id: moved for moved in everything(store)}
    counts = store.counts()
    for shard, jobs in by_shard(store, list(before.values())).items():
        changes = [(m.job_id, SealedFields.of(m), _new(SealedFields.of(m), _name(ids, m))) for m in jobs]
        assert sorted(store.transfer.rewrite(shard, changes)) == sorted(m.job_id for m in jobs)
    after = {moved.job_id: moved for moved in everything(store)}
    for job_id, old in before.items():
        new = after[job_id]
        assert _as_json(SealedFields.of(new)) == _as_json(_new(SealedFields.of(old), _name(ids, old)))
        assert _rest(new) == _rest(old)
    assert store.counts() == counts
    job = store.job(clock(), ids["failed"])
    assert job is not None and (job.error, job.traceback, job.errors) == (
        "failed-error",
        "failed-tb",
        (("ValueError", "failed-e0"),),
    )
    big = store.job(clock(), ids["big"])
    assert big is not None and big.payload == "big-payload" + "y" * 6000
    assert [
        j.job_id
        for j in store.tagged_jobs(clock(), ("t",), state=None, queue=None, name=None, after=None, limit=10)
    ] == [ids["pending"]]


@pytest.mark.sc_transfer_rewrite
def test_rewrite_skips_a_job_that_changed_or_runs(store: Store, clock: FakeClock) -> None:
    now = clock()
    first, second = put(store, now, "a")[0], put(store, now, "b")[0]
    moved = {m.job_id: m for m in everything(store)}
    [claimed] = claim(store, now)
    assert claimed.job_id == first
    changes = [(job_id, SealedFields.of(m), _new(SealedFields.of(m), "n")) for job_id, m in moved.items()]
    stale = dataclasses.replace(SealedFields.of(moved[second]), payload=pack("not what is stored"))
    changes[1] = (second, stale, _new(stale, "n"))
    assert store.transfer.rewrite(0, changes) == []
    job = store.job(now, second)
    assert job is not None and job.payload == "b" and job.state is State.PENDING
    running = store.job(now, first)
    assert running is not None and running.payload == "a" and running.state is State.RUNNING
    assert store.transfer.rewrite(0, [(404, stale, stale)]) == []


def _tags(fields: SealedFields) -> dict[str, object]:
    found = json.loads(fields.metadata or b"{}")
    return {"_tags": found["_tags"]} if "_tags" in found else {}


def _as_json(fields: SealedFields) -> SealedFields:
    """``fields`` with its metadata as a dict (a store may keep JSON text its own way: PostgreSQL's jsonb)."""
    return dataclasses.replace(fields, metadata=json.loads(fields.metadata or b"null"))


def _name(ids: dict[str, int], moved: MovedJob) -> str:
    return next(name for name, job_id in ids.items() if job_id == moved.job_id)


def _rest(moved: MovedJob) -> tuple[object, ...]:
    sealed = {"payload", "result", "error", "traceback", "errors", "metadata"}
    return tuple(getattr(moved, f.name) for f in dataclasses.fields(moved) if f.name not in sealed)
