"""The store probe is honest: it sees every write and nothing else, and reads back what the engine stored.

A contract test that checks the store through a probe is only as good as the probe; these tests run on every
store kind, so a new store's probe is checked before any test relies on it.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import pytest

from queue_max_django.engine import Queue, QueueCorrupted, Record, State
from queue_max_django.engine.stores.lmdb import keys
from tests.engine.conftest import FakeClock
from tests.engine.probes import StoreProbe

Probe = Callable[[Queue], StoreProbe]


def one_of_each_state(q: Queue) -> dict[State, int]:
    ids = {State.SCHEDULED: q.put("later", delay=60)}
    for state in (State.RUNNING, State.DONE, State.FAILED, State.PENDING):
        ids[state] = q.put(str(state), max_retries=0, priority=3, name=f"task.{state}", queue="q")
        if state is not State.PENDING:
            record = q.get(0)
            assert record.job_id == ids[state]
            if state is State.DONE:
                record.ack({"answer": 42})
            elif state is State.FAILED:
                record.nack(ValueError("boom"))
    return ids


def test_snapshot_changes_after_a_write_and_not_after_a_read(queue: Queue, probe: Probe) -> None:
    p = probe(queue)
    empty = p.snapshot()
    assert p.snapshot() == empty
    job_id = queue.put("x")
    after_put = p.snapshot()
    assert after_put != empty

    queue.job(job_id), queue.jobs(State.PENDING), queue.stats(), queue.verify(), queue.dead_letters()
    assert p.snapshot() == after_put

    record = queue.get(0)
    after_get = p.snapshot()
    assert after_get != after_put
    record.ack()
    assert p.snapshot() != after_get


def test_stored_agrees_with_job_in_every_state(queue: Queue, probe: Probe) -> None:
    p = probe(queue)
    for state, job_id in one_of_each_state(queue).items():
        job, stored = queue.job(job_id), p.stored(job_id)
        assert job is not None and stored is not None
        assert (stored.state, job.state) == (state, state)
        assert (stored.queue, stored.name, stored.priority) == (job.queue, job.name, job.priority)
        counts = (stored.retries, stored.max_retries, stored.attempts)
        assert counts == (job.retries, job.max_retries, job.attempts)
        assert stored.enqueued_at_us == keys.micros(job.enqueued_at)
        assert msgpack.unpackb(stored.payload) == job.payload
        outcome = (stored.error, stored.error_type, stored.traceback)
        assert outcome == (job.error, job.error_type, job.traceback)
        assert (None if stored.result is None else msgpack.unpackb(stored.result)) == job.result
        if state is State.RUNNING:
            assert stored.token is not None and stored.lease_until_us == keys.micros(job.lease_until)
            assert p.leases() == {job_id: stored.lease_until_us}
        if state is State.SCHEDULED:
            assert stored.ready_at_us == keys.micros(job.eta)
        assert p.indexes_naming(job_id) == [state]
        assert p.places(job_id) != []
    assert p.index_problems() == []
    assert p.stored(max(p.leases()) + 256 * 1000) is None


def test_stored_payload_is_found_wherever_it_is_kept(queue: Queue, probe: Probe) -> None:
    for payload in ("small", "x" * 5000):
        job_id = queue.put(payload)
        stored = probe(queue).stored(job_id)
        assert stored is not None and msgpack.unpackb(stored.payload) == payload


def test_damage_helpers_do_what_they_say(queue: Queue, probe: Probe, clock: FakeClock) -> None:
    p = probe(queue)
    running = queue.put("running")
    record: Record = queue.get(0)
    token = p.steal_claim(running)
    assert p.stored(running).token == token != record._token
    p.drop_lease(running)
    assert p.leases() == {} and p.indexes_naming(running) == [] and p.index_problems() != []

    gone = queue.put("x" * 5000)
    p.drop_payload(gone)
    with pytest.raises(QueueCorrupted, match=str(gone)):
        queue.get(0)

    stray = gone + 256 * 1000
    p.stray_entry(stray, State.FAILED)
    assert p.indexes_naming(stray) == [State.FAILED] and p.stored(stray) is None

    doomed = queue.put("doomed")
    assert p.drop_entry(doomed, State.PENDING) and p.indexes_naming(doomed) == []
    assert p.stored(doomed).state is State.PENDING
    assert p.drop_entry(doomed, "record") and p.stored(doomed) is None

    for how in ("garbage-record", "state-unknown"):
        broken = queue.put(how)
        p.break_record(broken, how)
        with pytest.raises(QueueCorrupted, match=str(broken)):
            queue.get(0)
    bad_payload = queue.put("fine record")
    p.break_payload(bad_payload)
    assert queue.job(bad_payload).damage is not None


def test_unique_keys_are_the_keys_put_and_the_jobs_they_name(queue: Queue, probe: Probe) -> None:
    p = probe(queue)
    assert p.unique_keys() == {}
    first = queue.put("a", unique_key="k1")
    queue.put("b")
    second = queue.put("c", unique_key="k2")
    assert queue.put("d", unique_key="k1") == first
    assert p.unique_keys() == {"k1": first, "k2": second}


def test_coordination_snapshot_sees_locks_and_workers_and_no_read(queue: Queue, probe: Probe) -> None:
    p = probe(queue)
    assert p.coordination_snapshot() == []
    assert queue.acquire_lock("leader", "a", 10)
    with_lock = p.coordination_snapshot()
    assert with_lock != []
    queue.lock_holder("leader"), queue.workers(include_dead=True), queue.put("a job is not a lock")
    assert p.coordination_snapshot() == with_lock
    queue.report_worker("w", stale_after=10)
    assert p.coordination_snapshot() != with_lock
