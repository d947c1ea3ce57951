"""What only the PostgreSQL store does (the contract suite runs on it as on LMDB): the server's clock as
the one clock of several machines, waking consumers by LISTEN/NOTIFY, and the poll-only mode."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import Cancelled, ConfigurationError, Queue, QueueEmpty, State, StoreError
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests import pgserver
from tests.engine.procs import wait_for

pytestmark = pytest.mark.postgres

SKEW = 30.0  # seconds: how wrong the skewed machine's clock is


def skewed_queue(url: str, skew: float, **options: object) -> Queue:
    store = PostgresStore.open(url, local_clock=lambda: time.time() + skew)
    return Queue(store, do_recover=False, do_vacuum=False, **options)  # type: ignore[arg-type]


def test_the_store_reads_the_server_s_clock_through_a_wrong_local_one(pg_url: str) -> None:
    store = PostgresStore.open(pg_url, local_clock=lambda: time.time() + SKEW)
    try:
        assert store.server_clock is not None
        # The server runs on this machine: its time is time.time(), to within a round trip.
        assert abs(store.clock() - time.time()) < 0.5
        assert abs(store.server_clock.offset + SKEW) < 0.5  # type: ignore[operator]
    finally:
        store.close(flush=False)


def test_a_worker_whose_clock_is_30_s_off_keeps_its_lease_and_takes_no_held_one(pg_url: str) -> None:
    ahead = skewed_queue(pg_url, +SKEW, lease_time=5.0)
    behind = skewed_queue(pg_url, -SKEW, lease_time=5.0)
    try:
        job_id = ahead.put("work")
        record = behind.get(timeout=0)  # the slow machine holds it, for 5 s of the server's time
        stored = behind.job(job_id)
        assert stored is not None and stored.lease_until is not None
        assert abs(stored.lease_until - (time.time() + 5.0)) < 1.0  # the server's time, not the machine's
        # The fast machine, 30 s ahead, neither recovers the lease early nor claims the job.
        assert ahead.recover() == 0
        with pytest.raises(Exception):  # noqa: B017 (QueueEmpty)
            ahead.get(timeout=0)
        again = ahead.job(job_id)
        assert again is not None and again.state is State.RUNNING and again.attempts == 1
        record.ack("done")  # the holder still holds it
        finished = ahead.job(job_id)
        assert finished is not None and finished.state is State.DONE and finished.result == "done"
    finally:
        ahead.close()
        behind.close()


def test_a_step_of_the_local_clock_is_measured_again_at_once(pg_url: str) -> None:
    """This machine's clock steps (NTP, a restored virtual machine) 30 s forward, then 60 s back: the
    store's time stays the server's at once, not after the next minute's reading, so the stepped process
    neither takes back a live lease nor writes its own in the stepped time."""
    step = [0.0]
    store = PostgresStore.open(pg_url, local_clock=lambda: time.time() + step[0])
    stepping = Queue(store, do_recover=False, do_vacuum=False, lease_time=5.0)  # type: ignore[arg-type]
    holder = Queue(pg_url, do_recover=False, do_vacuum=False, lease_time=5.0)
    try:
        assert abs(store.clock() - time.time()) < 0.5
        held_id = holder.put("held")
        held = holder.get(timeout=0)  # a live lease, for 5 s of the server's time
        step[0] = SKEW
        assert abs(store.clock() - time.time()) < 0.5  # the step was seen: the server's time still
        assert stepping.recover() == 0  # 30 s ahead it would have taken the live job back
        job = stepping.job(held_id)
        assert job is not None and job.state is State.RUNNING and job.attempts == 1
        own_id = stepping.put("own")
        own = stepping.get(timeout=0)
        assert own.job_id == own_id
        step[0] = -SKEW
        assert abs(store.clock() - time.time()) < 0.5
        own.touch()  # the lease renewed in the server's time, not 30 s in its past
        renewed = holder.job(own_id)
        assert renewed is not None and renewed.lease_until is not None
        assert abs(renewed.lease_until - (time.time() + 5.0)) < 1.0
        assert holder.recover() == 0
        held.ack("done")
        own.ack("done")
    finally:
        stepping.close()
        holder.close()


def test_a_step_while_the_server_cannot_be_read_is_carried_by_the_monotonic_clock(pg_url: str) -> None:
    """The step is seen while the server is away (the connection fails): the clock goes on from its last
    reading by time.monotonic(), which does not step, until a reading works again."""
    import psycopg

    from queue_max_django.engine.stores.postgres.clock import ServerClock

    url = [pg_url]
    step = [0.0]
    clock = ServerClock(lambda: psycopg.connect(url[0], autocommit=True), lambda: time.time() + step[0])
    assert abs(clock() - time.time()) < 0.5
    url[0] = "postgresql:///nowhere?host=/nonexistent&connect_timeout=1"  # the server is away
    step[0] = -SKEW
    assert abs(clock() - time.time()) < 0.5
    assert abs(clock.offset - SKEW) < 0.5  # type: ignore[operator]
    url[0] = pg_url
    clock.maybe_resample()  # not due: the step was dealt with
    assert abs(clock() - time.time()) < 0.5


def test_a_put_on_another_connection_wakes_a_listening_consumer(pg_url: str) -> None:
    consumer = Queue(pg_url, do_recover=False, do_vacuum=False)
    producer = Queue(pg_url, do_recover=False, do_vacuum=False)
    try:
        hints = consumer._store.hints
        hints.changed()  # starts the listener
        deadline = time.monotonic() + 5
        while not hints.listening and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.01)
        assert hints.listening  # type: ignore[attr-defined]
        hints.changed()  # consume the hint the listener gives on connecting
        before = hints.mark()
        producer.put("wake up")  # leads an empty queue: one NOTIFY, at its commit
        started = time.monotonic()
        hints.wait(5.0)
        assert time.monotonic() - started < 4.0  # woken by the notification, not by the timeout
        assert hints.changed_since(before, hints.mark()) == [0]
        assert consumer.get(timeout=0).payload == "wake up"
    finally:
        consumer.close()
        producer.close()


def test_a_consumer_blocked_in_get_takes_a_job_put_elsewhere(pg_url: str) -> None:
    consumer = Queue(pg_url, do_recover=False, do_vacuum=False)
    producer = Queue(pg_url, do_recover=False, do_vacuum=False)
    got: list[object] = []
    try:
        thread = threading.Thread(target=lambda: got.append(consumer.get(timeout=10).payload))
        thread.start()
        time.sleep(0.05)  # let it block
        producer.put({"n": 1})
        thread.join(timeout=10)
        assert got == [{"n": 1}]
    finally:
        consumer.close()
        producer.close()


def test_poll_only_mode_has_no_listener_and_still_serves(pg_url: str) -> None:
    store = PostgresStore.open(pg_url, listen=False, poll_interval=0.05)
    q = Queue(store, do_recover=False, do_vacuum=False)
    try:
        hints = store.hints
        assert hints.changed() is True and hints.changed() is True  # never known unchanged
        assert hints.mark() is None and hints.watch() is None
        assert not hints.listening
        job_id = q.put("polled")
        assert q.get(timeout=1).job_id == job_id
        started = time.monotonic()
        hints.wait(1.0)  # a poll, not the whole timeout
        assert time.monotonic() - started < 0.9  # under the timeout: it polled (0.05 s) rather than waited
    finally:
        q.close()


def test_notify_off_sends_no_notification(pg_url: str) -> None:
    consumer = Queue(pg_url, do_recover=False, do_vacuum=False)
    producer = Queue(PostgresStore.open(pg_url, notify=False), do_recover=False, do_vacuum=False)
    try:
        hints = consumer._store.hints
        hints.changed()
        deadline = time.monotonic() + 5
        while not hints.listening and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.01)
        # The database is lent to other tests in turn: a process one of them left behind may NOTIFY on the
        # store's one channel at any time (seen once in a full run). A producer that sent a hint would be
        # heard in every round; a stray, in one at most.
        quiet_rounds = 0
        for round_ in range(3):
            hints.changed()
            before = hints.mark()
            producer.put(f"quiet {round_}")
            hints.wait(0.3)  # bounded: nothing is sent, so the wait runs out
            quiet_rounds += hints.mark() == before
            assert consumer.get(timeout=0).payload == f"quiet {round_}"  # the job is there all the same
            if quiet_rounds:
                break
        assert quiet_rounds == 1
    finally:
        consumer.close()
        producer.close()


def test_a_put_through_the_caller_s_connection_commits_and_rolls_back_with_it(pg_url: str) -> None:
    """Transactional enqueue: a put given the caller's connection is written in the caller's transaction:
    invisible to consumers until it commits, gone with a rollback, and nothing of it is left behind."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    consumer = Queue(pg_url, do_recover=False, do_vacuum=False)
    caller = pgserver.connect(pg_url)
    try:
        with caller.transaction():
            kept = q.put("kept", connection=caller)
            batch = q.put_many(["a", "b"], connection=caller)
            with pytest.raises(QueueEmpty):
                consumer.get(timeout=0)  # not committed: no consumer sees it
            assert consumer.job(kept) is None
        assert {consumer.get(timeout=0).job_id for _ in range(3)} == {kept, *batch}

        with pytest.raises(RuntimeError, match="business write failed"), caller.transaction():
            gone = q.put("rolled back", connection=caller)
            raise RuntimeError("business write failed")
        assert consumer.job(gone) is None
        with pytest.raises(QueueEmpty):
            consumer.get(timeout=0)
        assert consumer.stats()["pending"] == 0 and consumer.stats()["total"] == 3  # counted with the commit
        assert consumer.verify() == []
    finally:
        caller.close()
        q.close()
        consumer.close()


def test_a_unique_put_first_in_a_caller_s_transaction_rolls_back_with_it(pg_url: str) -> None:
    """A put that takes several statements (a unique key: the check, then the write) runs in a savepoint of
    the caller's transaction. As the first statement of a transaction not yet begun (Django's ``atomic()``
    sets autocommit off and sends nothing), psycopg's ``transaction()`` alone would have been the
    outermost block and committed the job, which then outlived the caller's rollback."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    caller = pgserver.connect(pg_url)
    try:
        caller.autocommit = False  # as Django's connection inside atomic(): no transaction begun yet
        assert caller.info.transaction_status.name == "IDLE"
        gone = q.put("rolled back", unique_key="order-42", connection=caller)
        assert caller.info.transaction_status.name == "INTRANS"  # still the caller's, open
        caller.rollback()
        assert q.job(gone) is None and q.stats()["total"] == 0
        kept = q.put("kept", unique_key="order-42", connection=caller)  # the key was rolled back too
        assert kept != gone
        caller.commit()
        job = q.job(kept)
        assert job is not None and job.state is State.PENDING and q.stats()["total"] == 1
    finally:
        caller.close()
        q.close()


@pytest.mark.parametrize("delay", [None, 60.0], ids=["pending", "scheduled"])
def test_a_single_put_is_planned_once_by_the_server(pg_url: str, delay: float | None) -> None:
    """The statement of a single put has nothing whose cost depends on a parameter's value, so the server
    keeps one generic plan of it after its first five runs instead of planning every put again (which
    was half of a put's server time); its jobs are stored as any put's."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    try:
        ids = [q.put({"n": n}, name="one", priority=n % 3, delay=delay) for n in range(20)]
        plans = q._live().rows(  # this thread's connection: prepared statements are a session's
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%%nextval(''qm_job_ids'')%%' AND statement NOT LIKE '%%generate_series%%'",
            (),
        )
        assert len(plans) == 1, plans
        generic, custom = plans[0]  # psycopg prepares it on its 5th run; the server plans 5 runs, then keeps
        assert custom <= 5 and generic >= 10, plans  # the generic plan
        state = State.PENDING if delay is None else State.SCHEDULED
        jobs = [q.job(job_id) for job_id in ids]
        assert [(job.payload, job.name, job.state) for job in jobs if job] == [
            ({"n": n}, "one", state) for n in range(20)
        ]
        assert q.stats()["pending" if delay is None else "scheduled"] == 20
        assert q.verify() == []
    finally:
        q.close()


@pytest.mark.parametrize("call", ["put", "put_many"])
def test_the_lmdb_store_refuses_the_caller_s_connection(tmp_path: Path, pg_url: str, call: str) -> None:
    caller = pgserver.connect(pg_url)
    try:
        with Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as q:
            put = q.put if call == "put" else q.put_many
            with pytest.raises(ConfigurationError, match="lmdb store cannot"):
                put("x" if call == "put" else ["x"], connection=caller)
            assert q.stats()["total"] == 0
    finally:
        caller.close()


def test_a_connection_the_server_ended_while_idle_is_replaced_before_it_is_used(pg_url: str) -> None:
    """Every backend of the store ended between operations (as a restart, a failover or an idle timeout
    does): the next operation sees it before sending anything, reconnects, and succeeds."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    admin = pgserver.connect(pg_url)
    try:
        kept = q.put("kept")
        ended = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
        assert ended >= 1
        deadline = time.monotonic() + 10  # the backends are gone once the server has reaped them
        while admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)

        again = q.put("after")  # no error: a new connection

        assert {q.get(timeout=0).job_id, q.get(timeout=0).job_id} == {kept, again}
    finally:
        admin.close()
        q.close()


def test_a_connection_lost_during_an_operation_is_a_clear_error_then_the_store_reconnects(
    pg_url: str,
) -> None:
    """The server ends the backend while a put runs (it waits on a lock here): the put raises StoreError,
    saying it may not have committed (it did not, here); nothing acknowledged is lost, and the next
    operation reconnects on its own."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    admin = pgserver.connect(pg_url)
    try:
        kept = q.put("kept")
        outcome: list[BaseException | int] = []
        locker = pgserver.connect(pg_url)
        with locker, locker.transaction():  # the watcher (admin) reads pg_stat_activity outside it
            locker.execute("LOCK TABLE qm_jobs IN ACCESS EXCLUSIVE MODE")
            putter = threading.Thread(target=lambda: outcome.append(_put_or_error(q, "lost")))
            putter.start()
            deadline = time.monotonic() + 10
            while not admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
                "current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
                "AND application_name = 'queue_max'"
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the put never waited on the lock"
                time.sleep(0.01)
            putter.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome
        assert "may or may not have committed" in str(outcome[0])
        again = q.put("after")  # reconnected
        assert {q.get(timeout=0).job_id for _ in range(q.stats()["pending"])} == {kept, again}
    finally:
        admin.close()
        q.close()


def _put_or_error(q: Queue, payload: str) -> BaseException | int:
    try:
        return q.put(payload)
    except BaseException as exc:
        return exc


def test_an_open_caller_transaction_holds_up_no_other_put_and_its_counts_fold_in(pg_url: str) -> None:
    """A put in the caller's transaction writes its counts as a journal row of its own: other puts and
    claims never wait for that transaction, two such transactions never deadlock, and the store's upkeep
    folds the committed journal into the shared counter rows (stats() is right before and after)."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    first, second = pgserver.connect(pg_url), pgserver.connect(pg_url)
    try:
        with first.transaction(), second.transaction():
            q.put("in the first", connection=first)
            q.put("in the second", connection=second)
            q.put("in the second again", connection=second)
            finished = threading.Event()
            others = threading.Thread(target=lambda: ([q.put(n) for n in range(20)], finished.set()))
            others.start()
            others.join(timeout=10)
            assert finished.is_set(), "a put waited for a caller's open transaction"
            assert q.stats()["pending"] == 20
        assert q.stats()["pending"] == 23 and q.stats()["total"] == 23
        journal = pgserver.connect(pg_url)
        try:
            count = "SELECT count(*) FROM qm_counts WHERE slot >= 1000"
            assert journal.execute(count).fetchone()[0] > 0
            q._store.maintain(flush=False)
            assert journal.execute(count).fetchone()[0] == 0
        finally:
            journal.close()
        assert q.stats()["pending"] == 23 and q.stats()["total"] == 23
        assert q.verify() == []
    finally:
        first.close()
        second.close()
        q.close()


def _dead_rows(conn: object, table: str) -> tuple[int, object]:
    row = conn.execute(  # type: ignore[attr-defined]
        "SELECT n_dead_tup, last_vacuum FROM pg_stat_user_tables WHERE relname = %s", (table,)
    ).fetchone()
    return int(row[0]), row[1]


@contextlib.contextmanager
def _churned(pg_url: str, monkeypatch: pytest.MonkeyPatch, table: str) -> Iterator[tuple[Any, Queue]]:
    """Autovacuum off for ``table`` (as on a server with ``autovacuum = off``), and 800 jobs put, claimed and
    acknowledged. -> (a connection of the test's, the queue); a dead row count of 500 is enough to vacuum."""
    from queue_max_django.engine.stores.postgres import upkeep

    monkeypatch.setattr(upkeep, "VACUUM_DEAD_MIN", 500)
    admin = pgserver.connect(pg_url)
    admin.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    try:
        q.put_many(list(range(800)))
        for _ in range(8):
            q.ack_many([(record, None) for record in q.get_many(100, timeout=0)])
        yield admin, q
    finally:
        q.close()
        admin.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
        admin.close()


def _maintain_once_counted(q: Queue, admin: Any, table: str, dead: int) -> object:
    """Wait until the server's statistics count ``dead`` dead rows in ``table``, then run the store's
    maintenance with its look at the dead rows due. -> the table's last vacuum before."""

    def counted() -> bool:  # a backend sends its statistics at a transaction's end, at most once a second
        q.stats()
        return _dead_rows(admin, table)[0] >= dead

    wait_for(counted, 60.0, "the server's statistics")  # they lag more than 15 s on a machine this busy
    before = _dead_rows(admin, table)[1]  # None, or when the test database was last emptied
    store = q._store  # type: ignore[attr-defined]
    store._vacuum_check_due = 0.0  # due now (the maintenance thread looked at start, when nothing was)
    store.maintain(flush=False)
    return before


def test_the_store_vacuums_the_done_jobs_its_vacuum_deleted_where_autovacuum_does_not(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vacuum deletes done jobs from ``qm_finished`` once their results expire. With autovacuum off for
    it (as on a server with ``autovacuum = off``) their dead rows would never be reused, and the table would
    grow with every job ever run (benchmarks/soak.py found it): the store's maintenance vacuums it too."""
    with _churned(pg_url, monkeypatch, "qm_finished") as (admin, q):
        assert q.vacuum(older_than=0) == 800  # 800 dead rows in qm_finished, no live one

        before = _maintain_once_counted(q, admin, "qm_finished", 800)

        dead, vacuumed_at = _dead_rows(admin, "qm_finished")
        assert vacuumed_at is not None and vacuumed_at != before and dead < 800
        assert q.stats()["done"] == 0 and q.verify() == []


def test_the_store_vacuums_its_hot_table_where_autovacuum_does_not(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With autovacuum off for ``qm_jobs`` (as on a server with ``autovacuum = off``), the dead rows of
    finished jobs pile up in the hot table every claim walks: the store's maintenance vacuums it once they
    outnumber the live rows, and not before."""
    from queue_max_django.engine.stores.postgres import store as store_module
    from queue_max_django.engine.stores.postgres import upkeep

    with _churned(pg_url, monkeypatch, "qm_jobs") as (admin, q):
        q.put_many(list(range(100)))  # 100 live rows, 800 dead ones

        before = _maintain_once_counted(q, admin, "qm_jobs", 800)

        dead, vacuumed_at = _dead_rows(admin, "qm_jobs")
        assert vacuumed_at is not None and vacuumed_at != before and dead < 800
        assert q.stats()["pending"] == 100 and q.stats()["done"] == 800
        q._store.maintain(flush=False)  # type: ignore[attr-defined]  # not due again for a while
        assert _dead_rows(admin, "qm_jobs")[1] == vacuumed_at
        assert store_module.VACUUM_CHECK_INTERVAL >= 10

        with pgserver.connect(pg_url) as own:  # few dead rows: nothing to do
            assert upkeep.vacuum_churned(own) == []


def test_the_vacuum_drops_a_mark_whose_job_is_gone_and_keeps_a_stored_jobs(pg_url: str) -> None:
    """Every statement that removes jobs takes their cancel marks; a mark can still be left behind by a
    cancel that read its job as running while the job ended and was removed (its insert not yet committed
    for the removal to see). The vacuum drops such a mark, never one of a job still stored."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    admin = pgserver.connect(pg_url)
    try:
        job_id = q.put("long")
        record = q.get(timeout=0)
        q.request_cancel(job_id)
        record.nack(Cancelled("cancelled"), permanent=True)
        orphan = job_id + (1 << 40)  # no such job
        admin.execute("INSERT INTO qm_cancels (job_id, requested_us) VALUES (%s, 0)", (orphan,))
        assert q.cancel_requested(orphan)
        q.vacuum(older_than=0)
        assert not q.cancel_requested(orphan)
        assert q.cancel_requested(job_id)  # a dead letter keeps its mark until it is removed or requeued
    finally:
        admin.close()
        q.close()
