"""A single put's path on the PostgreSQL store (issue 35): its statement prepared on a caller's connection
that prepares nothing of its own (as Django's), and the cursor the store keeps on its own connection."""

from __future__ import annotations

from typing import Any

import pytest

from queue_max_django.engine import Queue, State, StoreError
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests import pgserver
from tests.engine.procs import wait_for

pytestmark = pytest.mark.postgres


def _prepared(conn: Any) -> list[str]:
    """The statements prepared in ``conn``'s session, as the server has them (read in a transaction of its
    own: ``conn`` has no work pending)."""
    rows = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    conn.commit()
    return [row[0] for row in rows]


def _puts(q: Queue, caller: Any, values: range, *, own: Any = None) -> None:
    """One put per value, each in a transaction of the caller's that commits, as Django's ``atomic()``
    runs them (psycopg begins it at the first statement, ``commit()`` ends it); with ``own``, a statement
    of the caller's own on a cursor that binds on the server, in the same transaction."""
    for n in values:
        q.put(n, connection=caller)
        if own is not None:
            own.execute("SELECT %s::int AS mine", (n,))
        caller.commit()


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "transaction-pooled"])
def test_a_put_on_a_caller_connection_that_prepares_nothing_is_prepared_at_the_store_s_threshold(
    pg_url: str, pooled: bool
) -> None:
    """Django's connection binds parameters on the client (``ClientCursor``) and prepares nothing
    (``prepare_threshold=None``). A put in its transaction runs on a cursor that binds on the server, and
    its statement is prepared there once it ran the store's threshold of times, so the server no longer
    parses and plans it for every job; the caller's own statements are not prepared (its threshold is
    None again after each put). Behind a transaction pooler (the store's ``prepare_threshold=None``)
    nothing is prepared."""
    import psycopg

    store = PostgresStore.open(pg_url, listen=False, prepare_threshold=None if pooled else 2)
    q = Queue(store, do_recover=False, do_vacuum=False)  # type: ignore[arg-type]
    caller = psycopg.connect(pg_url, cursor_factory=psycopg.ClientCursor, prepare_threshold=None)
    own = psycopg.Cursor(caller)  # binds on the server: prepared, were the caller's threshold set
    try:
        _puts(q, caller, range(2), own=own)
        assert _prepared(caller) == []  # run twice: not yet
        _puts(q, caller, range(2, 6), own=own)
        prepared = _prepared(caller)
        assert len(prepared) == (0 if pooled else 1), prepared
        assert all("INSERT INTO qm_jobs" in text for text in prepared), prepared
        assert caller.prepare_threshold is None
        assert sorted(job.payload for job in q.jobs(State.PENDING)) == list(range(6))
        assert q.stats()["pending"] == 6 and q.verify() == []
    finally:
        caller.close()
        q.close()


def test_a_rolled_back_put_on_a_prepared_caller_connection_leaves_nothing_and_later_puts_work(
    pg_url: str,
) -> None:
    """psycopg forgets its prepared statements at a rollback of the connection (DEALLOCATE ALL): the put's
    statement is prepared again when due, and nothing of the rolled-back put is stored."""
    import psycopg

    store = PostgresStore.open(pg_url, listen=False, prepare_threshold=0)
    q = Queue(store, do_recover=False, do_vacuum=False)  # type: ignore[arg-type]
    caller = psycopg.connect(pg_url, cursor_factory=psycopg.ClientCursor, prepare_threshold=None)
    try:
        _puts(q, caller, range(2))
        assert len(_prepared(caller)) == 1
        q.put("lost", connection=caller)
        caller.rollback()
        assert _prepared(caller) == []
        _puts(q, caller, range(2, 4))
        assert len(_prepared(caller)) == 1
        assert sorted(job.payload for job in q.jobs(State.PENDING)) == [0, 1, 2, 3]
        assert q.stats()["pending"] == 4 and q.stats()["total"] == 4
    finally:
        caller.close()
        q.close()


def test_a_caller_connection_s_own_threshold_is_kept(pg_url: str) -> None:
    """A caller's connection that prepares statements itself (``prepare_threshold`` set) keeps its own
    threshold for the put's statement too."""
    import psycopg

    store = PostgresStore.open(pg_url, listen=False, prepare_threshold=1)
    q = Queue(store, do_recover=False, do_vacuum=False)  # type: ignore[arg-type]
    caller = psycopg.connect(pg_url, prepare_threshold=4)
    try:
        _puts(q, caller, range(4))
        assert _prepared(caller) == []  # the caller's 4, not the store's 1
        _puts(q, caller, range(4, 5))
        assert len(_prepared(caller)) == 1 and caller.prepare_threshold == 4
    finally:
        caller.close()
        q.close()


def test_the_store_keeps_one_cursor_per_connection_and_a_failed_statement_leaves_it_usable(
    pg_url: str,
) -> None:
    """The store's own statements run on a cursor kept on this thread's connection (a new cursor finds
    again how to send each parameter: CPU each put would spend); a statement the server refuses leaves it
    usable, and a new connection (after the old one ended) gets a cursor of its own."""
    q = Queue(pg_url, do_recover=False, do_vacuum=False)
    admin = pgserver.connect(pg_url)
    try:
        store: Any = q._live()
        first = q.put("first")
        conn = store.db.connection()
        kept = store.db.runner(conn)
        assert kept is store.db.runner(conn) and kept is not conn and kept.connection is conn
        with pytest.raises(StoreError, match="division by zero"):
            store.one("SELECT 1 / %s", (0,))
        second = q.put("second")
        assert store.db.runner(store.db.connection()) is kept
        pid = conn.info.backend_pid
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        wait_for(  # gone once the server has reaped it: its goodbye is then on the socket
            lambda: (
                not admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[
                    0
                ]
            ),
            what="the store's backend to end",
        )
        third = q.put("third")
        renewed = store.db.connection()
        assert renewed is not conn and store.db.runner(renewed).connection is renewed
        assert [q.job(i).payload for i in (first, second, third)] == ["first", "second", "third"]  # type: ignore[union-attr]
    finally:
        admin.close()
        q.close()
