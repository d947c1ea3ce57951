"""One odd row never breaks anything else. On the PostgreSQL store a job is a typed row, but three kinds of
column hold what only this code can read: the msgpack bytes of ``payload``, ``result`` and
``partition_key``, and the JSON of ``metadata`` (jsonb, which must be an object). Written past the engine
(by hand, by another program), each is decoded the way the payload always was: reads list and show the job
with ``Job.damage`` saying what is wrong, ``verify()`` names it, and a claim moves it to the dead letters
(error type ``Corrupted``) and serves the other jobs, instead of a bare msgpack error in every read or a
``ValueError`` that killed the claiming thread.

And on both stores: a dead letter quarantined as corrupted is never requeued (nothing is left to run), as
docs/security.md promises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State
from queue_max_django.engine.job import CORRUPTED, STATE_CODE
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests.engine.conftest import FakeClock
from tests.engine.pgprobe import PgProbe
from tests.engine.probes import StoreProbe
from tests.faults.corrupt import GARBAGE
from tests.worker.conftest import TASKS, Site

MakeQueue = Callable[..., Queue]
Probe = Callable[[Queue], StoreProbe]

# How a column is made odd: (column, SQL value, what damage and verify() say)
ODD: dict[str, tuple[str, Any, str]] = {
    "partition-key-garbage": ("partition_key", GARBAGE, "partition key cannot be decoded"),
    "metadata-an-array": ("metadata", "[1, 2]", "not a JSON object"),
    "metadata-a-string": ("metadata", '"text"', "not a JSON object"),
    "metadata-a-number": ("metadata", "7", "not a JSON object"),
}
ON_POSTGRES = pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)


def make_odd(q: Queue, job_id: int, odd: str) -> None:
    """Write the odd value into the job's row, whichever table it is in, with plain SQL."""
    column, value, _said = ODD[odd]
    cast = "::jsonb" if column == "metadata" else ""
    probe = PgProbe(q)  # its connection lives as long as it does
    for table in ("qm_jobs", "qm_finished"):
        probe.conn.execute(f"UPDATE {table} SET {column} = %s{cast} WHERE id = %s", (value, job_id))


def stored_row(q: Queue, job_id: int) -> dict[str, Any]:
    """The job's row as it is in the database now: its table, state, error type and error."""
    probe = PgProbe(q)
    for table in ("qm_jobs", "qm_finished"):
        row = probe.conn.execute(
            f"SELECT state, error_type, error FROM {table} WHERE id = %s", (job_id,)
        ).fetchone()
        if row is not None:
            return {"table": table, "state": row[0], "error_type": row[1], "error": row[2]}
    raise AssertionError(f"job {job_id} has no row")


def job_in(q: Queue, state: State, **options: Any) -> int:
    """A job with a partition key and metadata, brought to ``state``."""
    job_id = q.put({"n": 1}, partition_key="customer-7", metadata={"step": 1}, priority=5, **options)
    if state in (State.RUNNING, State.DONE, State.FAILED):
        record = q.claim(job_id)
        assert record is not None
        if state is State.DONE:
            record.ack("fine")
        elif state is State.FAILED:
            record.nack("boom", permanent=True)
    return job_id


@ON_POSTGRES
@pytest.mark.parametrize("state", [State.PENDING, State.SCHEDULED, State.RUNNING, State.DONE, State.FAILED],
                         ids=lambda state: state.value)  # fmt: skip
@pytest.mark.parametrize("odd", ODD)
def test_reads_show_an_odd_column_as_damage_and_verify_names_it(
    make_queue: MakeQueue, odd: str, state: State
) -> None:
    q = make_queue()
    bad = job_in(q, state, **({"delay": 60} if state is State.SCHEDULED else {}))
    healthy = job_in(q, state, **({"delay": 60} if state is State.SCHEDULED else {}))
    make_odd(q, bad, odd)
    said = ODD[odd][2]

    job = q.job(bad)
    assert job is not None and job.state is state
    assert job.damage is not None and said in job.damage and str(bad) in job.damage
    if odd.startswith("partition-key"):
        assert job.partition_key == GARBAGE  # the bytes, as for a payload that does not decode
    else:
        assert job.metadata == {}
    listed = {each.job_id: each for each in q.jobs(state, limit=10)}
    assert sorted(listed) == sorted([bad, healthy])
    assert listed[bad].damage == job.damage and listed[healthy].damage is None
    assert q.job(healthy).partition_key == "customer-7"  # type: ignore[union-attr]

    problems = q.verify()
    assert len(problems) == 1 and str(bad) in problems[0] and said in problems[0], problems
    assert stored_row(q, bad)["state"] == STATE_CODE[state]  # a read moves nothing


@ON_POSTGRES
@pytest.mark.parametrize("odd", ODD)
def test_a_claim_quarantines_a_job_with_an_odd_column_and_serves_the_rest(
    make_queue: MakeQueue, odd: str
) -> None:
    """The odd job comes first (priority 5): the claim moves it to the dead letters and raises
    ``QueueCorrupted`` once (it used to raise a bare ``ValueError`` at every claim for odd metadata, which
    killed the worker's thread, until the lease expired); the next claims serve the healthy jobs."""
    q = make_queue()
    bad = job_in(q, State.PENDING)
    good = [q.put({"n": n}) for n in range(3)]
    make_odd(q, bad, odd)

    with pytest.raises(QueueCorrupted, match=str(bad)):
        q.get_many(10, timeout=0)
    row = stored_row(q, bad)
    assert row["table"] == "qm_finished" and row["state"] == 4 and row["error_type"] == CORRUPTED
    assert row["error"].startswith(f"corrupted: job {bad}: ") and ODD[odd][2] in row["error"]

    served = []
    while True:
        try:
            record = q.get(0)
        except QueueEmpty:
            break
        served.append(record.job_id)
        record.ack()
    assert served == good
    assert q.verify() == []  # the quarantined dead letter keeps its odd value on purpose
    stats = q.stats()
    assert (stats["done"], stats["failed"], stats["pending"], stats["running"]) == (3, 1, 0, 0)
    dead = q.job(bad)
    assert dead is not None and dead.corrupted and dead.damage is not None


@ON_POSTGRES
@pytest.mark.parametrize("odd", ODD)
def test_a_claim_by_id_quarantines_a_job_with_an_odd_column(make_queue: MakeQueue, odd: str) -> None:
    q = make_queue()
    bad = job_in(q, State.PENDING)
    make_odd(q, bad, odd)
    assert q.claim(bad) is None
    row = stored_row(q, bad)
    assert row["table"] == "qm_finished" and row["error_type"] == CORRUPTED
    assert q.verify() == []


@pytest.mark.parametrize("how", ["garbage-payload", "garbage-record"])
def test_requeue_refuses_a_dead_letter_quarantined_as_corrupted(
    make_queue: MakeQueue, probe: Probe, how: str
) -> None:
    """``requeue()`` used to make it a waiting job with no task and no payload (a rebuilt record) or the
    bytes that did not decode, and lose its "corrupted" explanation: it returns False and changes nothing."""
    q = make_queue(shards=1)
    bad = q.put({"args": [1], "kwargs": {}}, name="t.task")
    if how == "garbage-payload":
        probe(q).break_payload(bad)
    else:
        probe(q).break_record(bad, how)  # LMDB only: a PostgreSQL row cannot be garbled
    with pytest.raises(QueueCorrupted):
        q.get(0)  # the claim quarantines it
    before = q.job(bad)
    assert before is not None and before.corrupted and before.error is not None
    stats = q.stats()

    assert q.requeue(bad) is False

    after = q.job(bad)
    assert after == before  # still the dead letter, its explanation kept
    assert probe(q).stored(bad).error_type == CORRUPTED  # type: ignore[union-attr]
    assert q.stats() == stats and q.verify() == []
    with pytest.raises(QueueEmpty):
        q.get(0)


def test_requeue_still_retries_an_ordinary_dead_letter(make_queue: MakeQueue) -> None:
    q = make_queue()
    job_id = q.put({"n": 1})
    q.get(0).nack("boom", permanent=True)
    assert q.requeue(job_id) is True
    assert q.job(job_id).state is State.PENDING  # type: ignore[union-attr]


@ON_POSTGRES
@pytest.mark.parametrize("odd", ["metadata-an-array", "partition-key-garbage"])
def test_a_real_worker_quarantines_an_odd_row_once_and_runs_every_other_job(site: Site, odd: str) -> None:
    """``queue_worker --burst``: metadata that is not an object used to kill the claiming thread at every
    claim (a full traceback each time) until the job dead-lettered as ``LeaseExpired``; now the first claim
    moves it to the dead letters as ``Corrupted``, the worker logs it once, and the other 20 jobs run."""
    with site.queue() as q:
        bad = q.put({"args": [99], "kwargs": {}}, name=TASKS + "finish", priority=5, metadata={"a": 1},
                    partition_key="k")  # fmt: skip
        good = [q.put({"args": [n], "kwargs": {}}, name=TASKS + "finish") for n in range(20)]
        make_odd(q, bad, odd)

    done = site.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler")

    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(int(value) for value, _pid in site.marks("finished")) == list(range(20))
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    logged = [line for line in done.stderr.splitlines() if f"job {bad} " in line]
    assert len(logged) == 1 and "Corrupted" in logged[0], done.stderr[-4000:]  # logged once
    with site.queue() as q:
        row = stored_row(q, bad)
        assert row["table"] == "qm_finished" and row["error_type"] == CORRUPTED
        assert ODD[odd][2] in row["error"]
        assert all(q.job(job_id).state is State.DONE for job_id in good)  # type: ignore[union-attr]
        stats = q.stats()
        assert (stats["done"], stats["failed"], stats["pending"], stats["running"]) == (20, 1, 0, 0)
        assert q.verify() == []


def break_worker_report(q: Queue, worker_id: str, raw: bytes) -> None:
    """Overwrite the stored report of ``worker_id`` with ``raw``, past the engine."""
    if isinstance(q._store, PostgresStore):
        probe = PgProbe(q)
        probe.conn.execute("UPDATE qm_workers SET report = %s WHERE worker_id = %s", (raw, worker_id))
        return
    env = q._store.locks.env  # type: ignore[attr-defined]
    with env.env.begin(write=True) as txn:
        assert txn.replace(worker_id.encode(), raw, db=env.dbs["workers"]) is not None


@pytest.mark.parametrize("raw", [GARBAGE, msgpack.packb([1, 2]), msgpack.packb(["x"] * 10)],
                         ids=["garbage", "too-short", "strings"])  # fmt: skip
def test_a_worker_report_that_does_not_decode_is_left_out_pruned_and_replaced(
    make_queue: MakeQueue, clock: FakeClock, raw: bytes
) -> None:
    """The registry of workers (the admin's dashboard, ``queue_health``) read every report: one that did
    not decode made ``workers()`` raise, and the worker whose row it was could not report again."""
    q = make_queue()
    q.report_worker("w-bad", stale_after=60, queues=("default",))
    q.report_worker("w-good", stale_after=60, queues=("default",))
    break_worker_report(q, "w-bad", raw)

    assert [w.worker_id for w in q.workers()] == ["w-good"]
    assert [w.worker_id for w in q.workers(include_dead=True)] == ["w-good"]
    q.report_worker("w-bad", stale_after=60, threads=3)  # its next report replaces the row
    assert sorted(w.worker_id for w in q.workers()) == ["w-bad", "w-good"]
    assert q.workers()[0].threads == 3 and q.workers()[0].started_at == clock()

    break_worker_report(q, "w-bad", raw)
    assert q.prune_workers() == 1  # it tells nothing: dead
    q.report_worker("w-good", stale_after=60)
    assert [w.worker_id for w in q.workers(include_dead=True)] == ["w-good"]
