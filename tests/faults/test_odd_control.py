"""One odd value in the control data never breaks anything else. Rate limits and circuit breakers are
msgpack values (LMDB: the control environment; PostgreSQL: ``qm_limits``/``qm_breakers``), and so is a
named lock's record in the LMDB store (PostgreSQL's ``qm_locks`` is typed: an owner without its times is
the odd row there). Written past the engine, a limit or breaker that does not decode made every claim raise
a bare msgpack error (and ``stats()``, the dashboard, every ``try_acquire``); a lock record made the
periodic scheduler's every step raise.

The policy (docs/security.md): such a limit or breaker is ignored for admission (fail open: jobs flow),
logged once, named by ``verify()`` and ``Queue.flow_damage()``, and setting or removing it replaces it. A lock
record that does not decode is held by nobody known for one ttl from when it is met, then free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgpack
import pytest

from queue_max_django.engine import Queue, QueueEmpty, State, flowstate
from queue_max_django.engine.stores.postgres.store import PostgresStore
from queue_max_django.engine.stores.types import LockHolder
from tests.engine.conftest import FakeClock
from tests.engine.pgprobe import PgProbe
from tests.faults.corrupt import GARBAGE
from tests.worker.conftest import TASKS, Site

MakeQueue = Callable[..., Queue]
KEY = "queue:default"
ON_LMDB = pytest.mark.parametrize("store_kind", ["lmdb"], indirect=True)
ON_POSTGRES = pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)

# Stored values that no engine wrote: not msgpack, msgpack of another shape, the right shape with a bucket
# or state of the wrong size, a rate or policy out of range.
ODD_LIMITS = {
    "garbage": GARBAGE,
    "too-short": msgpack.packb([1, 2]),
    "bad-bucket": msgpack.packb([10, 1.0, 10, b"short"]),
    "negative-rate": msgpack.packb([-1, 1.0, 10, b"\x00" * 16]),
    "empty": b"",
}
ODD_BREAKERS = {
    "garbage": GARBAGE,
    "too-short": msgpack.packb([1]),
    "bad-state": msgpack.packb([3, 60.0, b"\x09" * 21]),
    "zero-threshold": msgpack.packb([0, 60.0, b"\x00" * 21]),
}


@pytest.fixture(autouse=True)
def _fresh_log_memory() -> None:
    """Damage is logged once per key and value in a process: each test starts with none logged yet."""
    flowstate._logged.clear()


def sql(q: Queue, statement: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
    """One statement on the store's database, past the engine (autocommit). -> its rows, if any."""
    probe = PgProbe(q)  # its connection lives as long as it does
    cursor = probe.conn.execute(statement, params)
    return cursor.fetchall() if cursor.description else []


def write_control(q: Queue, table: str, key: str, raw: bytes) -> None:
    """Overwrite the stored value of limit or breaker ``key`` (``table``: "limits" or "breakers") with
    ``raw``, past the engine: plain SQL, or a write transaction of the LMDB control environment."""
    if isinstance(q._store, PostgresStore):
        sql(q, f"UPDATE qm_{table} SET value = %s WHERE key = %s", (raw, key))
        return
    env = q._store.control.env  # type: ignore[attr-defined]
    with env.env.begin(write=True) as txn:
        assert txn.replace(key.encode(), raw, db=env.dbs[table]) is not None


def stored_control(q: Queue, table: str, key: str) -> bytes | None:
    if isinstance(q._store, PostgresStore):
        rows = sql(q, f"SELECT value FROM qm_{table} WHERE key = %s", (key,))
        return bytes(rows[0][0]) if rows else None  # type: ignore[arg-type]
    env = q._store.control.env  # type: ignore[attr-defined]
    with env.env.begin() as txn:
        raw = txn.get(key.encode(), db=env.dbs[table])
        return None if raw is None else bytes(raw)


def claim_all(q: Queue) -> list[int]:
    """Claim and ack every job there is, one claim at a time. -> their ids, sorted (shards are not FIFO
    among themselves)."""
    served = []
    while True:
        try:
            record = q.get(timeout=0)
        except QueueEmpty:
            return sorted(served)
        served.append(record.job_id)
        record.ack()


def damage_logged(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if key in r.getMessage() and "does not decode" in r.getMessage()
    ]


@pytest.mark.parametrize("odd", ODD_LIMITS)
def test_a_rate_limit_that_does_not_decode_is_ignored_named_and_replaced(
    make_queue: MakeQueue, odd: str, caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue()
    q.set_rate_limit(KEY, "1/h")  # one token an hour: without the damage, only the first job would run
    q.set_rate_limit("queue:other", "1/h")
    jobs = [q.put({"n": n}) for n in range(5)]
    raw = ODD_LIMITS[odd]
    write_control(q, "limits", KEY, raw)

    with caplog.at_level(logging.ERROR, logger="queue_max_django.engine"):
        assert claim_all(q) == sorted(jobs)  # the limit is ignored: every job runs
        assert q.try_acquire(KEY) is True and q.remaining(KEY) is None and q.retry_after(KEY) == 0.0
        assert q.reset_rate_limit(KEY) is False  # its rate is unknown: nothing to fill
        assert set(q.rate_limits()) == {"queue:other"}
        assert "queue:other" in q.stats()["rate_limits"]
        problems = q.verify()
    assert len(problems) == 1 and f"rate limit {KEY!r}" in problems[0] and "does not decode" in problems[0]
    assert set(q.flow_damage()["rate_limits"]) == {KEY} and q.flow_damage()["circuit_breakers"] == {}
    assert len(damage_logged(caplog, KEY)) == 1, caplog.text  # once per key, however many claims
    assert stored_control(q, "limits", KEY) == raw  # nothing was written over it
    assert all(q.job(job_id).state is State.DONE for job_id in jobs)  # type: ignore[union-attr]

    q.set_rate_limit(KEY, "1/h")  # setting it again (as the Django layer does at start-up) replaces it
    assert q.verify() == [] and q.flow_damage() == {"rate_limits": {}, "circuit_breakers": {}}
    assert q.remaining(KEY) == 1.0
    for n in range(3):
        q.put({"n": n})
    assert len(claim_all(q)) == 1  # and it limits again: one token

    write_control(q, "limits", KEY, raw)
    assert q.remove_rate_limit(KEY) is True  # removing it replaces it too
    assert q.verify() == [] and len(claim_all(q)) == 2


@pytest.mark.parametrize("odd", ODD_BREAKERS)
def test_a_circuit_breaker_that_does_not_decode_is_ignored_named_and_replaced(
    make_queue: MakeQueue, clock: FakeClock, odd: str, caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue()
    q.set_circuit_breaker(KEY, threshold=1, recovery_timeout=600)
    first = q.put({"n": 0})
    q.get(timeout=0).nack("boom", permanent=True)  # opens it: without the damage nothing more would run
    assert q.circuit_breakers()[KEY]["state"] == "open"
    raw = ODD_BREAKERS[odd]
    write_control(q, "breakers", KEY, raw)
    jobs = [q.put({"n": n}) for n in range(1, 4)]

    with caplog.at_level(logging.ERROR, logger="queue_max_django.engine"):
        q.get(timeout=0).nack("boom again")  # a failure counted in no breaker, and no error
        assert claim_all(q) == sorted(jobs)  # the retry and the other two
        assert q.reset_circuit_breaker(KEY) is False  # its policy is unknown
        assert q.circuit_breakers() == {} and "circuit_breakers" not in q.stats()
        problems = q.verify()
    assert len(problems) == 1 and f"circuit breaker {KEY!r}" in problems[0], problems
    assert set(q.flow_damage()["circuit_breakers"]) == {KEY}
    assert len(damage_logged(caplog, KEY)) == 1, caplog.text
    assert stored_control(q, "breakers", KEY) == raw
    assert q.job(first).state is State.FAILED  # type: ignore[union-attr]

    q.set_circuit_breaker(KEY, threshold=1, recovery_timeout=600)  # replaces it: closed
    assert q.verify() == [] and q.circuit_breakers()[KEY]["state"] == "closed"
    failing = q.put({"n": 9})
    q.get(timeout=0).nack("boom", permanent=True)
    assert q.job(failing).state is State.FAILED  # type: ignore[union-attr]
    held = q.put({"n": 10})
    assert claim_all(q) == []  # it breaks again
    assert q.job(held).state is State.PENDING  # type: ignore[union-attr]


@ON_LMDB  # a PostgreSQL key is text: always valid UTF-8
def test_an_lmdb_limit_key_that_is_not_utf8_is_named_and_ignored(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.set_rate_limit(KEY, "1/h")
    env = q._store.control.env  # type: ignore[attr-defined]
    with env.env.begin(write=True) as txn:
        txn.put(b"queue:\xff", stored_control(q, "limits", KEY), db=env.dbs["limits"])
    assert set(q.rate_limits()) == {KEY}
    problems = q.verify()
    assert len(problems) == 1 and repr("queue:\\xff") in problems[0], problems  # named with escapes


# ---------------------------------------------------------------------------------------- named locks

LOCK = "periodic-scheduler"
TTL = 10.0


def break_lock(q: Queue, name: str) -> None:
    """Make the record of lock ``name`` undecodable, past the engine: garbage bytes in LMDB, an owner without
    its expiry in PostgreSQL (whose columns are typed)."""
    if isinstance(q._store, PostgresStore):
        sql(q, "UPDATE qm_locks SET expires_us = NULL WHERE name = %s", (name,))
        return
    env = q._store.locks.env  # type: ignore[attr-defined]
    with env.env.begin(write=True) as txn:
        assert txn.replace(name.encode(), GARBAGE, db=env.dbs["locks"]) is not None


def test_a_lock_record_that_does_not_decode_is_held_by_nobody_for_one_ttl_then_free(
    make_queue: MakeQueue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock is safety: its holder may be alive, so the lock is not free at once. The first taker to meet
    the record replaces it with a lease of nobody known for its ttl; the old holder cannot renew (it stops
    acting as the holder); after the ttl the lock is free for whoever comes."""
    q = make_queue()
    assert q.acquire_lock(LOCK, "worker-a", TTL)
    assert q.acquire_lock("other", "worker-a", TTL)
    break_lock(q, LOCK)

    assert q.lock_holder(LOCK) is None and q.last_lock_holder(LOCK) is None  # no error: nobody known
    assert q.release_lock(LOCK, "worker-a") is False
    problems = q.verify()
    assert len(problems) == 1 and f"lock {LOCK!r}" in problems[0], problems

    met_at = clock()
    with caplog.at_level(logging.ERROR, logger="queue_max_django.engine"):
        assert q.acquire_lock(LOCK, "worker-b", TTL) is False
        clock.advance(1)
        assert q.acquire_lock(LOCK, "worker-a", TTL) is False  # the old holder cannot renew either
        assert q.acquire_lock(LOCK, "worker-b", TTL) is False
    assert len([r for r in caplog.records if LOCK in r.getMessage()]) == 1, caplog.text
    assert q.verify() == []  # replaced by the stand-in lease
    assert q.lock_holder(LOCK) is None
    assert q.last_lock_holder(LOCK) == LockHolder("", met_at + TTL, met_at)  # the scheduler resumes from here
    assert q.release_lock(LOCK, "worker-b") is False

    clock.advance(TTL)  # one ttl after it was met: free
    assert q.acquire_lock(LOCK, "worker-b", TTL) is True
    assert q.lock_holder(LOCK) == LockHolder("worker-b", clock() + TTL, clock())
    assert q.acquire_lock(LOCK, "worker-a", TTL) is False
    assert q.acquire_lock("other", "worker-a", TTL) is True  # the other lock never noticed


@pytest.mark.parametrize("raw", [msgpack.packb(["w", "soon", 1.0]), msgpack.packb([7, 1e12, 1.0]),
                                 msgpack.packb(["w", float("inf"), 1.0]), msgpack.packb(["w"])],
                         ids=["text-expiry", "int-owner", "infinite", "too-short"])  # fmt: skip
@ON_LMDB  # qm_locks is typed: its odd row is an owner without its times
def test_an_lmdb_lock_record_of_another_shape_does_not_decode_either(
    make_queue: MakeQueue, clock: FakeClock, raw: bytes
) -> None:
    q = make_queue()
    assert q.acquire_lock(LOCK, "worker-a", TTL)
    env = q._store.locks.env  # type: ignore[attr-defined]
    with env.env.begin(write=True) as txn:
        txn.put(LOCK.encode(), raw, db=env.dbs["locks"])
    assert len(q.verify()) == 1 and q.lock_holder(LOCK) is None
    assert q.acquire_lock(LOCK, "worker-b", TTL) is False
    clock.advance(TTL)
    assert q.acquire_lock(LOCK, "worker-b", TTL) is True


@ON_POSTGRES  # the released lease's own columns are PostgreSQL's
def test_a_postgres_released_lease_without_its_times_is_skipped(make_queue: MakeQueue) -> None:
    q = make_queue()
    assert q.acquire_lock(LOCK, "worker-a", TTL) and q.release_lock(LOCK, "worker-a")
    sql(q, "UPDATE qm_locks SET last_since_us = NULL WHERE name = %s", (LOCK,))
    assert q.last_lock_holder(LOCK) is None and q.lock_holder(LOCK) is None
    assert len(q.verify()) == 1
    assert q.acquire_lock(LOCK, "worker-b", TTL) is True  # the lease itself is free: released


# ---------------------------------------------------------------------------------------- a real worker


def test_a_real_worker_runs_every_job_under_a_limit_and_a_breaker_that_do_not_decode(site: Site) -> None:
    """``queue_worker --burst`` with a queue's limit and a task's breaker that do not decode: every claim
    used to raise (the worker thread logged a traceback at each claim and ran nothing)."""
    with site.queue() as q:
        q.set_rate_limit(KEY, "1/h")
        q.set_circuit_breaker(f"name:{TASKS}finish", threshold=1, recovery_timeout=600)
        jobs = [q.put({"args": [n], "kwargs": {}}, name=TASKS + "finish") for n in range(10)]
        write_control(q, "limits", KEY, GARBAGE)
        write_control(q, "breakers", f"name:{TASKS}finish", GARBAGE)

    done = site.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler")

    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(int(value) for value, _pid in site.marks("finished")) == list(range(10))
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    with site.queue() as q:
        assert all(q.job(job_id).state is State.DONE for job_id in jobs)  # type: ignore[union-attr]
        assert len(q.verify()) == 2
