"""Contract tests of job metadata (issue 20) on every store: ``put(metadata=)`` is stored with the job and
read back as written, through every state; bad metadata writes nothing; ``Record.save_metadata`` changes the
running job's metadata only while that record holds it; a record stored before metadata existed reads
``{}``. What is stored is read past the engine, by the store's probe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import (
    METADATA_MAX_BYTES,
    InvalidMetadata,
    Queue,
    QueueCorrupted,
    State,
)
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]
META = {"trace": "abc", "tags": ["a", "b"], "n": 1, "nested": {"x": None, "ok": True}, "_backend": 2}


@pytest.mark.contract
@pytest.mark.rule_metadata
def test_put_stores_metadata_as_given_and_none_without(queue: Queue, probe: Probe) -> None:
    with_meta = queue.put({"n": 1}, metadata={**META, "tuple": (1, 2)})
    without = queue.put({"n": 2})
    empty = queue.put({"n": 3}, metadata={})
    stored = probe(queue).stored(with_meta)
    assert stored is not None and stored.metadata == {**META, "tuple": [1, 2]}
    for job_id in (without, empty):
        stored = probe(queue).stored(job_id)
        assert stored is not None and stored.metadata is None  # nothing stored for no metadata
    job = queue.job(with_meta)
    assert job is not None and job.metadata == {**META, "tuple": [1, 2]}
    assert queue.job(without).metadata == {}  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_metadata
def test_batches_and_delayed_puts_store_metadata(queue: Queue, probe: Probe) -> None:
    ids = queue.put_many([1, 2, 3], metadata={"batch": 7})
    ids += queue.put_parts([4, 5], metadata={"batch": 8})
    ids.append(queue.put(6, delay=60, metadata={"batch": 9}))
    found = [probe(queue).stored(job_id) for job_id in ids]
    assert [s.metadata for s in found if s is not None] == [{"batch": 7}] * 3 + [{"batch": 8}] * 2 + [
        {"batch": 9}
    ]
    # A put with the same options but no metadata after one with it: the spec cache keeps them apart.
    plain = queue.put_many([7])
    assert probe(queue).stored(plain[0]).metadata is None  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_metadata
@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([("a", 1)], "metadata must be a dict"),
        ({1: "a"}, "metadata keys must be strings"),
        ({"a": object()}, "metadata must be JSON-serializable"),
        ({"a": float("nan")}, "metadata must be JSON-serializable"),
        ({"a": "\x00"}, "NUL"),
        ({"a": "x" * METADATA_MAX_BYTES}, "over the limit of 65,536 bytes"),
    ],
)
def test_bad_metadata_writes_nothing(queue: Queue, probe: Probe, metadata: Any, message: str) -> None:
    queue.put(0)
    before = probe(queue).snapshot()
    for put in (
        lambda: queue.put(1, metadata=metadata),
        lambda: queue.put_many([1, 2], metadata=metadata),
        lambda: queue.put_parts([1, 2], metadata=metadata),
    ):
        with pytest.raises(InvalidMetadata, match=message):
            put()
    assert probe(queue).snapshot() == before


@pytest.mark.contract
@pytest.mark.rule_metadata_save
def test_the_holder_saves_metadata_and_it_stays_through_every_outcome(
    make_queue: Callable[..., Queue], probe: Probe
) -> None:
    queue = make_queue(max_retries=1)
    other = make_queue()  # another process's view of the same store
    job_id = queue.put("x", metadata={"_trace": "t1", "of": 100})
    record = queue.get(0)
    assert record.metadata == {"_trace": "t1", "of": 100}
    record.save_metadata({"_trace": "t1", "of": 100, "done": 40})
    assert record.metadata == {"_trace": "t1", "of": 100, "done": 40}
    stored = probe(queue).stored(job_id)
    assert stored is not None and stored.state is State.RUNNING
    assert stored.metadata == {"_trace": "t1", "of": 100, "done": 40}
    assert other.job(job_id).metadata == {"_trace": "t1", "of": 100, "done": 40}  # type: ignore[union-attr]
    record.nack("boom")  # a retry keeps it
    assert probe(queue).stored(job_id).metadata["done"] == 40  # type: ignore[union-attr]
    record = queue.get(0)
    assert record.metadata["done"] == 40
    record.save_metadata({"done": 41})
    record.nack("boom again")  # a dead letter keeps it
    stored = probe(queue).stored(job_id)
    assert stored is not None and stored.state is State.FAILED and stored.metadata == {"done": 41}
    assert queue.requeue(job_id)  # and a requeue
    record = queue.get(0)
    assert record.metadata == {"done": 41}
    record.save_metadata({})  # empty: nothing stored
    assert probe(queue).stored(job_id).metadata is None  # type: ignore[union-attr]
    record.save_metadata({"done": 100})
    record.ack("result")  # done keeps it
    stored = probe(queue).stored(job_id)
    assert stored is not None and stored.state is State.DONE and stored.metadata == {"done": 100}
    assert other.job(job_id).metadata == {"done": 100}  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_metadata_save
def test_a_record_that_lost_its_job_cannot_save_metadata(
    queue: Queue, probe: Probe, clock: FakeClock
) -> None:
    job_id = queue.put("x", metadata={"v": 1})
    stale = queue.get(0)
    clock.advance(queue.lease_time + 1)
    assert queue.recover() == 1
    holder = queue.get(0)  # claimed again: the stale record's token no longer holds it
    with pytest.raises(QueueCorrupted, match="held by another claim"):
        stale.save_metadata({"v": 2})
    assert probe(queue).stored(job_id).metadata == {"v": 1}  # type: ignore[union-attr]
    assert stale.metadata == {"v": 1}
    holder.save_metadata({"v": 3})
    holder.ack()
    with pytest.raises(QueueCorrupted, match="not running"):
        holder.save_metadata({"v": 4})
    with pytest.raises(InvalidMetadata):  # checked before the store is asked
        holder.save_metadata({"v": object()})
    assert probe(queue).stored(job_id).metadata == {"v": 3}  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_metadata_save
def test_a_stolen_claim_refuses_the_save(queue: Queue, probe: Probe) -> None:
    job_id = queue.put("x")
    record = queue.get(0)
    probe(queue).steal_claim(job_id)
    with pytest.raises(QueueCorrupted):
        record.save_metadata({"v": 2})
    assert probe(queue).stored(job_id).metadata is None  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_metadata
def test_a_job_stored_before_metadata_reads_as_none_and_can_get_some(queue: Queue, probe: Probe) -> None:
    ids = {queue.put(n, metadata={"old": True}) for n in range(2)}
    record = queue.get(0)
    record.ack()
    done = record.job_id
    (waiting,) = ids - {done}
    for job_id in (done, waiting):
        probe(queue).as_before_metadata(job_id)
        assert queue.job(job_id).metadata == {}  # type: ignore[union-attr]
    record = queue.get(0)
    assert record.job_id == waiting and record.metadata == {}
    record.save_metadata({"new": 1})
    record.ack()
    assert queue.job(waiting).metadata == {"new": 1}  # type: ignore[union-attr]
    assert queue.verify() == []


def test_create_upgrades_a_version_1_postgresql_database(pg_url: str) -> None:
    """Schema version 2 added the metadata column: ``schema.create`` (what ``migrate`` runs) brings a
    version 1 database up, its jobs kept and read as having no metadata; until then the store refuses to
    open."""
    from queue_max_django.engine import SchemaError
    from queue_max_django.engine.stores.postgres import schema
    from tests import pgserver
    from tests.engine.locations import StoreLocation

    location = StoreLocation("postgres", pg_url)
    with location.open_queue() as queue:
        job_id = queue.put("old")
    with pgserver.connect(pg_url) as conn:  # as a version 1 database is
        conn.execute("ALTER TABLE qm_jobs DROP COLUMN metadata")
        conn.execute("ALTER TABLE qm_finished DROP COLUMN metadata")
        conn.execute("UPDATE qm_meta SET value = '1' WHERE key = 'schema_version'")
        wanted = f"schema version 1; this version of queue_max_django needs version {schema.SCHEMA_VERSION}"
        with pytest.raises(SchemaError, match=wanted):
            location.open_queue()
        schema.create(conn)
        assert schema.version(conn) == schema.SCHEMA_VERSION
    with location.open_queue() as queue:
        assert queue.job(job_id).metadata == {}  # type: ignore[union-attr]
        record = queue.get(0)
        record.save_metadata({"upgraded": True})
        record.ack()
        assert queue.job(job_id).metadata == {"upgraded": True}  # type: ignore[union-attr]


@pytest.mark.contract
@pytest.mark.rule_async
def test_async_put_and_save_metadata(location: StoreLocation, clock: FakeClock) -> None:
    async def main() -> None:
        async with location.open_async(clock=clock) as aq:
            job_id = await aq.put("x", metadata={"of": 2})
            record = await aq.get(0)
            assert record.metadata == {"of": 2}
            await record.save_metadata({"of": 2, "done": 1})
            assert (await aq.job(job_id)).metadata == {"of": 2, "done": 1}
            await record.ack()

    asyncio.run(main())


@pytest.mark.lmdb
def test_stored_metadata_that_does_not_decode_is_damage_not_an_error(queue: Queue, probe: Probe) -> None:
    """LMDB keeps metadata as bytes: bytes that are not the JSON of an object read as ``{}``, and the
    snapshot's ``damage`` says why; the job is still claimed, run and completed (its metadata can be saved
    again)."""
    from queue_max_django.engine.stores.lmdb import keys, layout

    job_id = queue.put("x", metadata={"a": 1})
    lmdb_probe: Any = probe(queue)
    with lmdb_probe._txn(job_id, write=True) as (txn, dbs):
        record = layout.unpack_record(txn.get(keys.id_key(job_id), db=dbs["jobs"]), job_id)
        record[layout.F_METADATA] = b"\xff not json"
        txn.put(keys.id_key(job_id), layout.pack_record(record), db=dbs["jobs"])
    job = queue.job(job_id)
    assert job is not None and job.metadata == {} and "metadata does not decode" in (job.damage or "")
    record = queue.get(0)
    assert record.metadata == {}
    record.save_metadata({"fixed": True})
    record.ack()
    assert queue.job(job_id).metadata == {"fixed": True}  # type: ignore[union-attr]
