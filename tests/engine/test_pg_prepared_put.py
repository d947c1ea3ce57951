"""A single put on the PostgreSQL store's own connection runs through libpq (``stores/postgres/prepared.py``,
issue 35): prepared by name once per server session, nothing prepared behind a transaction pooler, prepared
again on a new connection or after psycopg's ``DEALLOCATE ALL``, and a failure raised as the store's cursor
raised it. Each checked against what the database holds."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from queue_max_django.engine import Queue, State, StoreError
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests import pgserver
from tests.engine.procs import wait_for

pytestmark = pytest.mark.postgres

PUT_STATEMENTS = ["qm_put_0", "qm_put_1"]  # pending, scheduled (job_sql.PUT_ONE)


def _queue(pg_url: str, threshold: int | None = 5) -> tuple[Queue, Any]:
    store = PostgresStore.open(pg_url, listen=False, prepare_threshold=threshold)
    return Queue(store, do_recover=False, do_vacuum=False), store  # type: ignore[arg-type]


def _prepared(store: Any) -> list[str]:
    """The put statements prepared in the session of this thread's connection of ``store``."""
    rows = store.db.connection().execute("SELECT name FROM pg_prepared_statements ORDER BY name").fetchall()
    return [row[0] for row in rows if row[0].startswith("qm_put_")]


def _rows(admin: Any) -> list[tuple[Any, ...]]:
    return admin.execute(
        "SELECT id, state, queue, name, priority, max_retries, timeout, partition_key IS NOT NULL, "
        "metadata->>'k', ready_us > enqueued_us FROM qm_jobs ORDER BY id"
    ).fetchall()


def test_a_single_put_is_prepared_once_per_session_and_stores_every_field(pg_url: str) -> None:
    q, store = _queue(pg_url)
    admin = pgserver.connect(pg_url)
    try:
        first = q.put({"n": 1})
        assert _prepared(store) == ["qm_put_0"]
        second = q.put(b"\x00raw\xff", queue="élan", name="t.ü", priority=-7, max_retries=0, timeout=2.5,
                       partition_key="pé", metadata={"k": "ünï"})  # fmt: skip
        third = q.put(3, delay=60, timeout=30)  # scheduled: the other statement
        assert _prepared(store) == PUT_STATEMENTS
        for n in range(4, 10):
            q.put(n)
        assert _prepared(store) == PUT_STATEMENTS  # prepared once each
        rows = _rows(admin)
        assert rows[0] == (first, 0, "default", None, 0, 3, None, False, None, False)
        assert rows[1] == (second, 0, "élan", "t.ü", -7, 0, 2.5, True, "ünï", False)
        assert rows[2] == (third, 1, "default", None, 0, 3, 30.0, False, None, True)
        assert [q.job(i).payload for i in (first, second, third)] == [{"n": 1}, b"\x00raw\xff", 3]  # type: ignore[union-attr]
        assert q.job(second).partition_key == "pé"  # type: ignore[union-attr]
        stats = q.stats()
        assert (stats["pending"], stats["scheduled"], stats["total"]) == (8, 1, 9)
        assert q.verify() == []
    finally:
        admin.close()
        q.close()


def test_behind_a_transaction_pooler_nothing_is_prepared(pg_url: str) -> None:
    """``prepare_threshold=None``: the put's SQL goes with each run, unnamed, as through PgBouncer in
    transaction mode; no statement of the store's or psycopg's is prepared in the session."""
    q, store = _queue(pg_url, None)
    try:
        ids = [q.put(n) for n in range(8)] + [q.put("later", delay=60)]
        assert store.db.connection().execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0
        assert [q.job(i).payload for i in ids] == [*range(8), "later"]  # type: ignore[union-attr]
        assert q.stats()["pending"] == 8 and q.stats()["scheduled"] == 1 and q.verify() == []
    finally:
        q.close()


def _end_backend(admin: Any, pid: int) -> None:
    assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    wait_for(
        lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone(),
        what="the store's backend to end",
    )


def test_a_new_connection_prepares_again(pg_url: str) -> None:
    """A prepared statement lives in one server session: after the server ended the connection, or the
    thread closed it, the next put prepares it on the new one."""
    q, store = _queue(pg_url)
    admin = pgserver.connect(pg_url)
    try:
        a = q.put("a")
        old = store.db.connection()
        _end_backend(admin, old.info.backend_pid)
        b = q.put("b")  # the dead connection is seen before it is used, and replaced
        assert store.db.connection() is not old and _prepared(store) == ["qm_put_0"]
        store.end_thread()
        c = q.put("c")
        assert _prepared(store) == ["qm_put_0"]
        assert [job.payload for job in q.jobs(State.PENDING)] == ["a", "b", "c"]
        assert sorted((a, b, c)) == [a, b, c] and q.stats()["total"] == 3 and q.verify() == []
    finally:
        admin.close()
        q.close()


def test_a_statement_deallocated_in_the_session_is_prepared_again(pg_url: str) -> None:
    """psycopg sends ``DEALLOCATE ALL`` when a transaction of its own on the connection rolls back while it
    holds prepared statements: the put's is then gone from the session; the next put prepares it again,
    and the job is stored once."""
    q, store = _queue(pg_url, 0)  # psycopg prepares every statement of its own on the connection
    try:
        q.put(1)
        conn = store.db.connection()
        with pytest.raises(ZeroDivisionError), conn.transaction():
            conn.execute("SELECT 1")  # prepared by psycopg: its rollback deallocates all
            raise ZeroDivisionError
        assert _prepared(store) == []
        q.put(2)
        conn.execute("DEALLOCATE ALL")
        q.put(3)
        assert _prepared(store) == ["qm_put_0"]
        assert [job.payload for job in q.jobs(State.PENDING)] == [1, 2, 3]
        assert q.stats()["total"] == 3 and q.verify() == []
    finally:
        q.close()


def test_a_put_the_server_refuses_leaves_the_connection_usable(pg_url: str) -> None:
    """The server's error is the store's ``StoreError`` (psycopg's error chained, as its cursor raised it);
    nothing is stored, and the next put runs on the same connection."""
    import psycopg

    q, store = _queue(pg_url)
    admin = pgserver.connect(pg_url)
    admin.execute("ALTER TABLE qm_jobs ADD CONSTRAINT test_refused CHECK (queue <> 'refused')")
    try:
        q.put("before")
        pid = store.db.connection().info.backend_pid
        with pytest.raises(StoreError, match=r"refused an operation.*test_refused") as caught:
            q.put("no", queue="refused")
        assert isinstance(caught.value.__cause__, psycopg.errors.CheckViolation)
        q.put("after")
        assert store.db.connection().info.backend_pid == pid
        assert [job.payload for job in q.jobs(State.PENDING)] == ["before", "after"]
        assert q.stats()["total"] == 2 and q.verify() == []
    finally:
        admin.execute("ALTER TABLE qm_jobs DROP CONSTRAINT test_refused")
        admin.close()
        q.close()


def test_a_connection_lost_during_a_put_is_a_store_error_and_the_next_put_reconnects(pg_url: str) -> None:
    """The server ends the session while the put waits for a lock: ``StoreError`` saying it may have
    committed (libpq's message has no SQLSTATE then: psycopg's ``OperationalError``), the connection is
    dropped, and the next put opens and prepares a new one."""
    q, store = _queue(pg_url)
    admin = pgserver.connect(pg_url)
    locker = pgserver.connect(pg_url)
    try:
        q.put("before")
        pid = store.db.connection().info.backend_pid
        locker.autocommit = False
        locker.execute("LOCK TABLE qm_counts IN EXCLUSIVE MODE")  # the put's counter upsert waits
        failed: list[BaseException] = []
        after: list[Any] = []

        def put() -> None:  # a thread of its own: its own connection, whose backend the test ends
            try:
                q.put("lost")
            except BaseException as exc:  # the test reads it
                failed.append(exc)
            q.put("again")  # on a new connection, the statement prepared there
            after.extend([store.db.connection().info.backend_pid, _prepared(store)])

        thread = threading.Thread(target=put)
        thread.start()
        waiting = wait_for(
            lambda: admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s", (pid,)
            ).fetchone(),
            what="the put to wait for the lock",
        )
        admin.execute("SELECT pg_terminate_backend(%s)", (waiting[0],))
        time.sleep(0.2)
        locker.rollback()
        thread.join(30)
        assert len(failed) == 1 and isinstance(failed[0], StoreError), failed
        assert "may or may not have committed" in str(failed[0])
        assert after[0] not in (pid, waiting[0]) and after[1] == ["qm_put_0"]
        q.put("after")
        assert store.db.connection().info.backend_pid == pid
        assert [job.payload for job in q.jobs(State.PENDING)] == ["before", "again", "after"]
        assert q.stats()["total"] == 3 and q.verify() == []
    finally:
        locker.close()
        admin.close()
        q.close()


def test_a_put_waiting_for_a_lock_gives_way_to_a_signal_and_the_connection_stays_usable(pg_url: str) -> None:
    """The put is waited for as psycopg's cursor waits (never in a blocking libpq call, which would hold
    off Python's signal handlers until the lock is released): Ctrl-C (here a timer's signal raising
    ``KeyboardInterrupt``) stops it, the statement is cancelled on the server, nothing is stored, and the
    next put runs on the same connection."""
    import signal

    q, store = _queue(pg_url)
    locker = pgserver.connect(pg_url)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        q.put("before")
        pid = store.db.connection().info.backend_pid
        locker.autocommit = False
        locker.execute("LOCK TABLE qm_counts IN EXCLUSIVE MODE")  # the put's counter upsert waits
        release = threading.Timer(10, locker.rollback)  # a put that held off the signal: it fails, not hangs
        release.start()
        began = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            q.put("interrupted")
        assert time.monotonic() - began < 5
        release.cancel()
        release.join()
        locker.rollback()
        q.put("after")
        assert store.db.connection().info.backend_pid == pid
        assert [job.payload for job in q.jobs(State.PENDING)] == ["before", "after"]
        assert q.stats()["total"] == 2 and q.verify() == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        locker.close()
        q.close()
