"""One bad record never stops the queue, whatever state its job was in and whatever the damage: each path
that walks records (promotion, claims, recovery, vacuum, purge, listings, counts, job(), delete, requeue)
moves the job it cannot read to the dead letters (error type "Corrupted", its bytes on disk kept as the
job's result), logs it once, and goes on with every other job; reads never raise on it; the dead letter it
becomes can be deleted by id and purged; afterwards ``verify()`` finds the store consistent, on disk.

The store has two shards: the bad job is in the first, healthy jobs in the same state in both (the bugs
this guards against stopped the walk of the bad job's shard and of every shard after it). The tests of a
bad record are marked ``lmdb``: they put into LMDB shards and hold the quarantine to the LMDB store's
rule that the record's bytes become the dead letter's result (the store-neutral quarantine contract is
tests/faults/test_corruption.py's). The worker's claims and background maintenance run on any store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State
from queue_max_django.engine.errors import StoreError
from queue_max_django.engine.job import SHARD_BITS
from queue_max_django.worker import claims, process
from queue_max_django.worker.options import WorkerOptions
from tests.engine.conftest import FakeClock, open_queue
from tests.engine.locations import StoreLocation
from tests.engine.probes import LmdbProbe
from tests.faults.corrupt import RECORD_DAMAGE
from tests.worker.conftest import TASKS, Site

Damage = Callable[[Queue, int], None]
LEASE = 30.0
DELAY = 60.0
HEALTHY_PER_SHARD = 3
STATES = [State.SCHEDULED, State.RUNNING, State.DONE, State.FAILED, State.PENDING]


def put_on(q: Queue, shard: int, number: int, **options: object) -> int:
    return q.put_many_to_shard(shard, [{"n": number}], **options)[0]


def broken_store(path: Path, clock: FakeClock, state: State, damage: Damage) -> tuple[int, list[int], bytes]:
    """A two-shard store with one damaged job in ``state`` (in shard 0, met first: priority 5) and
    ``HEALTHY_PER_SHARD`` healthy jobs in the same state in each shard. A scheduled job is due, a running
    one's lease has expired, a done one is past its result_ttl. -> (the bad job, the healthy ones, the
    bad record's bytes on disk)."""
    with open_queue(path, clock, shards=2, lease_time=LEASE, max_retries=3) as q:
        options: dict[str, object] = {"delay": DELAY} if state is State.SCHEDULED else {}
        bad = put_on(q, 0, -1, priority=5, **options)
        healthy = [put_on(q, shard, 10 * shard + n, **options) for shard in (0, 1) for n in range(3)]
        if state in (State.RUNNING, State.DONE, State.FAILED):
            records = {record.job_id: record for record in q.get_many(100, timeout=0)}
            records |= {record.job_id: record for record in q.get_many(100, timeout=0)}
            assert sorted(records) == sorted([bad, *healthy])
            for record in records.values():
                if state is State.DONE:
                    record.ack({"n": record.payload["n"]})
                elif state is State.FAILED:
                    record.nack("boom", permanent=True)
        assert q.stats()[state.value] == 1 + len(healthy)
        damage(q, bad)
        raw = on_disk(q, bad)
    clock.advance(max(DELAY, LEASE) + 1)
    return bad, healthy, raw


def on_disk(q: Queue, job_id: int) -> bytes:
    raw = LmdbProbe(q).record_bytes(job_id)
    assert raw is not None
    return raw


def assert_quarantined(q: Queue, bad: int, raw: bytes) -> None:
    """The bad job is a dead letter that says what was wrong and keeps the bytes that were on disk."""
    # on disk, in the failed index, before any read could move it
    assert State.FAILED in LmdbProbe(q).indexes_naming(bad)
    job = q.job(bad)
    assert job is not None and job.state is State.FAILED and job.error_type == "Corrupted"
    assert job.error is not None and job.error.startswith(f"corrupted: job {bad}: the stored record")
    assert job.result == raw


def serve(q: Queue, *, corrupted: int) -> list[int]:
    """Claim and ack every job there is. -> their ids; exactly ``corrupted`` claims raise QueueCorrupted
    (a claim that meets a broken pending job quarantines it and says so, once: that is how a claim reports
    it, where the other walks log it)."""
    served: list[int] = []
    raised = 0
    while True:
        try:
            record = q.get(0)
        except QueueEmpty:
            assert raised == corrupted
            return served
        except QueueCorrupted:
            raised += 1
            assert raised <= corrupted
            continue
        served.append(record.job_id)
        record.ack()


def logged(caplog: pytest.LogCaptureFixture, job_id: int) -> int:
    return sum(
        1
        for entry in caplog.records
        if entry.name.startswith("queue_max_django") and str(job_id) in entry.message
    )


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.parametrize("state", STATES, ids=[state.value for state in STATES])
@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_the_walk_of_each_state_quarantines_a_bad_record_and_goes_on_with_the_rest(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture, state: State, damage: Damage
) -> None:
    """Promotion (inside get()), recovery, vacuum, purge and the claim each meet the bad job first and
    go on with every healthy job; the bad job is logged once, however often the walk runs again."""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    path = tmp_path / "store"
    bad, healthy, raw = broken_store(path, clock, state, damage)
    with open_queue(path, clock, lease_time=LEASE) as q:
        if state is State.SCHEDULED:
            assert sorted(serve(q, corrupted=0)) == sorted(healthy)
            assert q.promote() == 0
        elif state is State.RUNNING:
            assert q.recover() == len(healthy)
            assert q.recover() == 0
            assert sorted(serve(q, corrupted=0)) == sorted(healthy)
        elif state is State.DONE:
            assert q.vacuum(older_than=0) == len(healthy)
            assert q.vacuum(older_than=0) == 0
            assert all(q.job(job_id) is None for job_id in healthy)
        elif state is State.PENDING:
            assert sorted(serve(q, corrupted=1)) == sorted(healthy)
        if state is State.FAILED:  # the bad dead letter is purged with the others
            assert q.purge(State.FAILED) == 1 + len(healthy)
            assert q.job(bad) is None and q.stats()["failed"] == 0
            assert logged(caplog, bad) == 1
        else:
            assert_quarantined(q, bad, raw)
            assert q.stats()["failed"] == 1
            assert logged(caplog, bad) == (0 if state is State.PENDING else 1)  # a claim raised instead
            assert q.delete(bad) and q.job(bad) is None  # the dead letter it became is deletable by id
        assert q.verify() == []
        assert sum(q.stats()[s.value] for s in (State.PENDING, State.SCHEDULED, State.RUNNING)) == 0
    with open_queue(path, clock) as q:  # on disk, after a restart
        assert q.verify() == []


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.parametrize("state", STATES, ids=[state.value for state in STATES])
@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_reads_never_raise_on_a_bad_record_and_leave_it_a_dead_letter(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture, state: State, damage: Damage
) -> None:
    """stats(), queue_counts(), jobs() of every state, dead_letters(), verify() and job() answer on a store
    with a bad record; verify() names it; the listings and job() move it to the dead letters as they meet
    it, so that afterwards the store is consistent and the counts are those of the healthy jobs."""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    path = tmp_path / "store"
    bad, healthy, raw = broken_store(path, clock, state, damage)
    with open_queue(path, clock, lease_time=LEASE) as q:
        problems = q.verify()
        assert problems and all(str(bad) in problem for problem in problems), problems
        assert q.stats()[state.value] == 1 + len(healthy)  # entry counts: the bad job's is there still
        counts = q.queue_counts()
        if state is State.RUNNING:  # running jobs' records are read for the counts: the bad one is left out
            assert counts == {"default": {"pending": 0, "scheduled": 0, "running": 6}}
        elif state is State.SCHEDULED:  # the counters still count it: nothing read its record yet
            assert counts == {"default": {"pending": 0, "scheduled": 7, "running": 0}}
        listed = {s: [job.job_id for job in q.jobs(s, limit=100)] for s in State}
        if state in (State.SCHEDULED, State.RUNNING):  # quarantined: the counts are its healthy jobs'
            healthy_counts = {"pending": 0, "scheduled": 0, "running": 0, state.value: 6}
            assert q.queue_counts() == {"default": healthy_counts}
        assert sorted(listed[state]) == sorted(healthy + ([bad] if state is State.FAILED else []))
        assert bad in [job.job_id for job in q.dead_letters()]
        assert_quarantined(q, bad, raw)
        assert logged(caplog, bad) == 1
        assert q.verify() == []
        assert q.stats()["failed"] == 1 + (len(healthy) if state is State.FAILED else 0)


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.parametrize("state", STATES, ids=[state.value for state in STATES])
@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_job_by_id_delete_and_requeue_quarantine_a_bad_record(
    tmp_path: Path, clock: FakeClock, state: State, damage: Damage
) -> None:
    """Met by id, with nothing else walked first: job() returns the dead letter it became; requeue()
    refuses it (nothing to run); delete() removes it, its entries and large payload; the others stay."""
    path = tmp_path / "store"
    bad, healthy, raw = broken_store(path, clock, state, damage)
    with open_queue(path, clock, lease_time=LEASE) as q:
        assert q.requeue(bad) is False
        assert_quarantined(q, bad, raw)
        assert q.verify() == []
        assert q.delete(bad) is True
        assert q.job(bad) is None and q.verify() == []
        assert q.stats()[state.value] == len(healthy)


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_a_bad_dead_letter_is_deleted_by_id_before_anything_reads_it(
    tmp_path: Path, clock: FakeClock, damage: Damage
) -> None:
    path = tmp_path / "store"
    bad, healthy, _raw = broken_store(path, clock, State.FAILED, damage)
    with open_queue(path, clock) as q:
        assert q.delete(bad, state=State.FAILED) is True
        assert q.job(bad) is None and q.verify() == []
        assert sorted(job.job_id for job in q.dead_letters()) == sorted(healthy)


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.lmdb  # LMDB shards and record bytes, and the enqueue time in an LMDB job id
def test_purging_dead_letters_by_age_takes_a_bad_one_by_the_enqueue_time_of_its_id(
    tmp_path: Path, clock: FakeClock, damage: Damage
) -> None:
    """A bad record has no finish time to compare; its id still says when it was enqueued. A purge with
    a cutoff before that keeps it (a readable dead letter now), one after it deletes it."""
    path = tmp_path / "store"
    bad, healthy, raw = broken_store(path, clock, State.FAILED, damage)
    with open_queue(path, clock) as q:
        age = clock.now - (bad >> SHARD_BITS) / 1_000_000  # how long ago the bad job was put
        assert q.purge(State.FAILED, older_than=age + 3600) == 0
        assert_quarantined(q, bad, raw)
        assert q.verify() == []
    bad, healthy, raw = broken_store(tmp_path / "other", clock, State.FAILED, damage)
    with open_queue(tmp_path / "other", clock) as q:
        assert q.purge(State.FAILED, older_than=0.5) == 1 + len(healthy)
        assert q.job(bad) is None and q.verify() == []


@pytest.mark.lmdb  # LMDB keeps a large payload apart from its record (and its bytes)
def test_a_large_payload_of_a_bad_record_stays_the_dead_letters_payload(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A payload stored apart (over INLINE_PAYLOAD_MAX) survives its record: it is the dead letter's
    payload, readable; purging the dead letter removes it too."""
    path = tmp_path / "store"
    with open_queue(path, clock, shards=1) as q:
        bad = q.put({"big": "x" * 5000}, delay=DELAY)
        RECORD_DAMAGE["garbage-record"](q, bad)
    clock.advance(DELAY + 1)
    with open_queue(path, clock) as q:
        assert q.promote() == 0
        job = q.job(bad)
        assert job is not None and job.error_type == "Corrupted" and job.payload == {"big": "x" * 5000}
        assert q.verify() == []
        assert q.purge(State.FAILED) == 1
        assert LmdbProbe(q).places(bad) == []  # its payload too
        assert q.verify() == []


@pytest.mark.parametrize("damage", RECORD_DAMAGE.values(), ids=RECORD_DAMAGE.keys())
@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_a_bad_record_under_flow_control_is_passed_over_and_quarantined(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture, damage: Damage
) -> None:
    """With a rate limit set, claims look through ``peek_allowed``: a bad pending job there does not
    make every get() raise; it is passed over, quarantined after the look and logged once."""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    path = tmp_path / "store"
    bad, healthy, raw = broken_store(path, clock, State.PENDING, damage)
    with open_queue(path, clock) as q:
        q.set_rate_limit("queue:default", 1000)
        assert sorted(serve(q, corrupted=0)) == sorted(healthy)
        assert_quarantined(q, bad, raw)
        assert logged(caplog, bad) == 1 and q.verify() == []


@pytest.mark.lmdb  # the LMDB record's bytes kept as the dead letter's result
def test_scrub_moves_a_bad_record_nothing_else_walks_to_the_dead_letters(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A running job whose lease has not expired, its record broken: recovery's scrub of the records
    finds it, removes its lease entry (which the record can no longer name) and quarantines it."""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    path = tmp_path / "store"
    with open_queue(path, clock, shards=1, lease_time=LEASE) as q:
        bad, good = q.put("bad"), q.put("good")
        held = q.get_many(2, timeout=0)
        RECORD_DAMAGE["priority-a-str"](q, bad)
        raw = on_disk(q, bad)
        assert q.recover() == 0  # no lease has expired; the scrub walked every record
        assert_quarantined(q, bad, raw)
        assert q.stats()["running"] == 1 and q.verify() == []
        [mine] = [record for record in held if record.job_id == good]
        mine.ack()
        with pytest.raises(QueueCorrupted):  # its holder learns that the job was taken from it
            next(record for record in held if record.job_id == bad).ack()
        assert logged(caplog, bad) == 1 and q.verify() == []


@pytest.mark.lmdb  # two LMDB shards; the record's bytes kept as the dead letter's result
def test_the_quarantine_keeps_the_exact_bytes_and_says_which_field_was_wrong(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "store"
    bad, _healthy, raw = broken_store(path, clock, State.SCHEDULED, RECORD_DAMAGE["name-a-list"])
    with open_queue(path, clock) as q:
        q.promote()
        job = q.job(bad)
        assert job is not None and job.result == raw
        assert msgpack.unpackb(job.result)[2] == ["tasks", "add"]  # what was there, for whoever looks
        assert "a list as its name (None or str expected)" in (job.error or "")


# ------------------------------------------------------------------------------------------ a real worker


@pytest.mark.lmdb  # LMDB record bytes, its shards, the enqueue time in an LMDB job id
def test_a_real_worker_runs_every_healthy_job_past_a_bad_due_record_and_logs_it_once(site: Site) -> None:
    """The bug this guards against: a due scheduled job whose record does not decode made every claim in
    every shard raise, and the worker retried at once, forever (0 of 100 healthy jobs run, 127,682 log
    lines in 15 s). Now the promotion quarantines it, the worker runs all 100 and exits (``--burst``),
    and its log names the bad job once."""
    with site.queue() as queue:
        bad = queue.put({"args": [-1], "kwargs": {}}, name=TASKS + "finish", delay=0.2, priority=9)
        RECORD_DAMAGE["garbage-record"](queue, bad)
        raw = on_disk(queue, bad)
        for shard in range(queue.shard_count):
            queue.put_many_to_shard(shard, [{"args": [n], "kwargs": {}} for n in range(shard, 100, 6)],
                                    name=TASKS + "finish")  # fmt: skip
        due = (bad >> SHARD_BITS) / 1_000_000 + 0.2
    time.sleep(max(0.0, due - time.time()) + 0.05)  # the bad job is due before the worker starts

    done = site.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler", timeout=30)

    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(int(value) for value, _pid in site.marks("finished")) == list(range(100))
    lines = [line for line in done.stderr.splitlines() if str(bad) in line]
    assert len(lines) == 1 and "moved to the dead letters" in lines[0], done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    with site.queue() as queue:
        assert_quarantined(queue, bad, raw)
        assert queue.verify() == []
        stats = queue.stats()
        assert (stats["done"], stats["failed"], stats["pending"], stats["scheduled"]) == (100, 1, 0, 0)


# ------------------------------------------------------------------------------ the worker's claims


class FailingQueue:
    """Stands in for the Queue of a worker process: each claim raises the next of ``errors`` (None: finds
    nothing, as when all is well)."""

    lease_time = 30.0
    server_commits = False
    worker_id: str | None = None

    def __init__(self, errors: list[Exception | None]) -> None:
        self.errors = errors
        self.claims = 0

    def get_many(self, size: int, timeout: float, *, queues: object = None) -> list[object]:
        self.claims += 1
        error = self.errors.pop(0) if self.errors else None
        raise error or QueueEmpty("nothing")


def test_a_worker_thread_backs_off_on_failed_claims_and_logs_each_problem_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same problem 50 times in a row: one log line, and waits that double up to STORE_RETRY; a
    claim that works resets the wait; another problem is logged once too, with its traceback. (A claim
    used to retry a QueueCorrupted at once, logging it each time.)"""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    waits: list[float] = []
    monkeypatch.setattr(process.time, "sleep", waits.append)
    stuck: list[Exception | None] = [QueueCorrupted("job 7: the stored record cannot be decoded")] * 50
    disk = StoreError("LMDB read failed: I/O error")
    failing = FailingQueue([*stuck, None, disk, disk, None])
    worker = process.WorkerProcess(failing, WorkerOptions(threads=1), 0)  # type: ignore[arg-type]

    for _ in range(50):
        assert worker._claim(10) == []
    assert waits[:4] == [0.01, 0.02, 0.04, 0.08]
    assert waits[-1] == max(waits) == claims.STORE_RETRY and len(waits) == 50
    assert [entry.getMessage() for entry in caplog.records] == [
        f"worker {worker.worker_id}: job 7: the stored record cannot be decoded"
    ]
    assert worker._claim(10) == [] and len(waits) == 50  # found nothing: the claim worked, no wait

    waits.clear()
    worker._claim(10)  # the store error: a new problem, logged with its traceback
    worker._claim(10)  # the same again: not logged
    assert waits == [0.01, 0.02]  # from the start again after the claim that worked
    assert len(caplog.records) == 2 and "StoreError: LMDB read failed" in caplog.records[1].getMessage()
    assert caplog.records[1].exc_info is not None
    assert worker._claim(10) == [] and waits == [0.01, 0.02] and failing.claims == 54


def test_a_problem_that_goes_on_is_logged_again_after_a_while() -> None:
    now = [0.0]
    trouble = process.ClaimTrouble(clock=lambda: now[0])
    assert trouble.failed("disk full") == ("disk full", 0.01)
    assert trouble.failed("disk full") == (None, 0.02)
    now[0] = claims.CLAIM_LOG_EVERY + 1
    message, _wait = trouble.failed("disk full")
    assert message == "disk full (still: 1 more time(s) since it was last logged)"
    trouble.worked()
    assert trouble.failed("disk full") == (None, 0.01)


def test_background_maintenance_logs_a_failure_that_repeats_once(
    location: StoreLocation, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The maintenance thread retries a failed round every interval: the same failure in a row is one log
    line, and it is logged again only after a round that worked."""
    caplog.set_level(logging.ERROR, logger="queue_max_django")
    rounds: list[int] = []
    outcomes = [StoreError("disk on fire")] * 8 + [None] + [StoreError("disk on fire")] * 3

    def recover(self: Queue) -> int:
        rounds.append(1)
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        return 0

    monkeypatch.setattr(Queue, "recover", recover)
    with location.open_queue(shards=1, do_recover=True, recover_interval=0.01):
        deadline = time.monotonic() + 10
        while outcomes and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not outcomes and len(rounds) >= 12
    failures = [entry for entry in caplog.records if "background maintenance" in entry.getMessage()]
    assert len(failures) == 2 and all(entry.exc_info is not None for entry in failures)


@pytest.mark.lmdb  # which fields of an LMDB record a completion reads (layout.unpack_held)
def test_an_ack_keeps_what_its_claim_checked_and_the_next_walk_checks_the_rest(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A running job's record damaged while its holder works (its token intact): the ack completes it (a
    completion checks the state, token, lease and queue it uses: ``layout.unpack_held``), and vacuum, the
    next walk that reads it, quarantines it."""
    with open_queue(tmp_path / "store", clock, shards=1) as q:
        q.put("x")
        record = q.get(0)
        RECORD_DAMAGE["name-a-list"](q, record.job_id)
        record.ack()
        assert q.stats()["done"] == 1
        clock.advance(1)
        assert q.vacuum(older_than=0) == 0
        job = q.job(record.job_id)
        assert job is not None and job.error_type == "Corrupted" and "a list as its name" in (job.error or "")
        assert q.verify() == []
