"""PgBouncer in transaction mode from Django (docs/howto/postgresql.md#pgbouncer): ``TRANSACTION_POOLING``
and what it follows from an alias, its checks (E025, W004) against their exact output, and a real
``queue_worker`` (two processes, two threads each, the periodic scheduler on) whose every connection goes
through a PgBouncer with two server connections (``tests/pgbouncer.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.test import override_settings

from queue_max_django.checks import check_settings
from queue_max_django.conf import get_config
from queue_max_django.engine import Queue
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests.pgbouncer import Bouncer, backends
from tests.pgbouncer import bouncer as bouncer

from .pgdjango import ALIAS, Worker, alias_settings, database_alias, sql, wait_for
from .pgdjango import pg_alias as pg_alias
from .pgdjango import start_worker as start_worker

ID = "queue_max_django."
TASK = "tests.testapp.tasks.add"
POOLED = (
    f"DATABASES[{ALIAS!r}] sets DISABLE_SERVER_SIDE_CURSORS, which says its connections go through a pooler "
    f"in transaction mode (QUEUE_MAX['TRANSACTION_POOLING'] is not given, so it follows)"
)


@pytest.fixture
def pooled_alias(pg_url: str, django_db_blocker: Any) -> Any:
    """``configure(options=None, **queue_max)``: the alias ``ALIAS`` with DISABLE_SERVER_SIDE_CURSORS (and
    ``options``), and QUEUE_MAX naming it with ``queue_max``; -> (check messages, config or None)."""

    def configure(options: dict[str, Any] | None = None, **queue_max: Any) -> tuple[list[Any], Any]:
        entry = {**alias_settings(pg_url), "DISABLE_SERVER_SIDE_CURSORS": True, "OPTIONS": options or {}}
        with (
            django_db_blocker.unblock(),
            database_alias(ALIAS, entry),
            override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": ALIAS, **queue_max}),
        ):
            messages = check_settings()
            config = None if any(m.is_serious() for m in messages) else get_config()
        return messages, config

    return configure


def test_an_alias_behind_transaction_pooling_turns_listen_and_prepared_statements_off(
    pooled_alias: Callable[..., tuple[list[Any], Any]],
) -> None:
    messages, config = pooled_alias()
    assert messages == []
    pg = config.postgres
    assert (pg.transaction_pooling, pg.listen, pg.prepare_threshold, pg.notify) == (True, False, None, True)
    _, config = pooled_alias(TRANSACTION_POOLING=False)  # the pooler is in session mode: the user says so
    pg = config.postgres
    assert (pg.transaction_pooling, pg.listen, pg.prepare_threshold) == (False, True, 5)
    _, config = pooled_alias({"prepare_threshold": None}, TRANSACTION_POOLING=False)
    assert config.postgres.prepare_threshold is None  # the alias's own intent, for the store's connections


def test_a_url_is_not_pooled_unless_said(pg_url: str) -> None:
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url}):
        assert check_settings() == []
        assert (get_config().postgres.transaction_pooling, get_config().postgres.listen) == (False, True)  # type: ignore[union-attr]
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url, "TRANSACTION_POOLING": True}):
        assert (get_config().postgres.listen, get_config().postgres.prepare_threshold) == (False, None)  # type: ignore[union-attr]


def test_e025_listen_with_transaction_pooling(
    pooled_alias: Callable[..., tuple[list[Any], Any]], pg_url: str
) -> None:
    hint = (
        "Remove LISTEN (it is off then: idle workers poll, at most POLL_INTERVAL late); if the pooler runs "
        "in session mode, set QUEUE_MAX['TRANSACTION_POOLING'] to False instead."
    )
    tail = (
        ": such a pooler hands the listener's connection back to its pool after each transaction, and no "
        "notification reaches it."
    )
    assert pooled_alias(LISTEN=True) == (
        [Error(f"QUEUE_MAX['LISTEN'] is True, but {POOLED}{tail}", hint=hint, id=ID + "E025")],
        None,
    )
    with override_settings(
        QUEUE_MAX={"STORE": "postgresql", "URL": pg_url, "TRANSACTION_POOLING": True, "LISTEN": True}
    ):
        assert check_settings() == [
            Error(
                f"QUEUE_MAX['LISTEN'] is True, but QUEUE_MAX['TRANSACTION_POOLING'] is True{tail}",
                hint=hint,
                id=ID + "E025",
            )
        ]
    messages, _ = pooled_alias(LISTEN=False)
    assert messages == []


def test_w004_django_connection_prepares_behind_transaction_pooling(
    pooled_alias: Callable[..., tuple[list[Any], Any]],
) -> None:
    messages, config = pooled_alias({"server_side_binding": True})
    assert messages == [
        Warning(
            f"DATABASES[{ALIAS!r}] binds parameters on the server (OPTIONS 'server_side_binding') and so "
            f"prepares statements, but {POOLED}: PgBouncer in transaction mode loses prepared statements "
            f"(before 1.21, or without max_prepared_statements), and jobs enqueued inside a transaction of "
            f"that alias are written through Django's connection.",
            hint=f"Set DATABASES[{ALIAS!r}]['OPTIONS']['prepare_threshold'] to None, or remove "
            f"'server_side_binding' (the store's own connections prepare nothing here already).",
            id=ID + "W004",
        )
    ]
    assert config.postgres.prepare_threshold is None
    assert pooled_alias({"server_side_binding": True, "prepare_threshold": None})[0] == []
    assert pooled_alias({"server_side_binding": True}, TRANSACTION_POOLING=False)[0] == []


@pytest.mark.slow
def test_a_queue_worker_behind_transaction_pooling(
    bouncer: Bouncer, pg_url: str, start_worker: Callable[..., Worker]
) -> None:
    """Every connection of the worker (its store, its scheduler's locks, its registry) goes through the
    bouncer; jobs put through the bouncer too run once each, woken by polling."""
    worker = start_worker(
        bouncer.url, "--processes", "2", "--threads", "2", scheduler=True,
        DJANGO_SETTINGS_MODULE="tests.django.pgbouncer_worker_settings",
    )  # fmt: skip
    store = PostgresStore.open(bouncer.url, listen=False, prepare_threshold=None)
    with Queue(store) as queue:
        ids = queue.put_many([{"args": [n, n], "kwargs": {}} for n in range(60)], name=TASK)
        ids += [queue.put({"args": [n, 1], "kwargs": {}}, name=TASK) for n in range(40)]
        wait_for(lambda: queue.stats()["done"] == 100, 120, f"the jobs to run; log:\n{worker.output()}")
        assert [queue.job(job_id).result for job_id in ids] == [2 * n for n in range(60)] + [  # type: ignore[union-attr]
            n + 1 for n in range(40)
        ]
        wait_for(lambda: len(queue.workers()) == 2, 30, "both processes to report")
        assert queue.verify() == []
        assert backends(pg_url) <= bouncer.pool_size  # all of it through the bouncer's two sessions
    assert worker.stop() == 0, worker.output()
    assert "prepared statement" not in worker.output(), worker.output()
    assert sql(pg_url, "SELECT count(*) FROM qm_jobs WHERE state = 2") == [(0,)]
    assert {row[0] for row in sql(pg_url, "SELECT state FROM qm_finished")} == {3}  # done, none failed


def test_the_first_enqueue_inside_a_transaction_behind_a_pool_of_one_fails_clearly(
    pg_url: str, django_db_blocker: Any
) -> None:
    """A pool of ONE server connection: a statement inside ``transaction.atomic()`` holds it, and the
    process's first ``.delay()`` opens the store, whose first statements need a server connection of their
    own. They wait for the caller's transaction, which waits for them: PgBouncer's ``query_wait_timeout``
    ends the wait, and ``.delay()`` raises ``StoreUnavailable`` saying why (docs/howto/postgresql.md, "A pool
    of one server connection"), within a bound, instead of hanging. Once the store is open, the same
    enqueue joins the transaction on the caller's connection and commits with it (the remedy the page
    names: open the store before, outside any transaction)."""
    import threading

    from django.db import connections, transaction

    from queue_max_django.conf import get_queue, reset
    from queue_max_django.engine import StoreUnavailable
    from tests.pgbouncer import find_pgbouncer
    from tests.pgserver import dbname_of, server
    from tests.testapp.tasks import add

    if find_pgbouncer() is None:
        pytest.skip("needs PgBouncer")
    pool = Bouncer(server().url, dbname_of(pg_url), pool_size=1, query_wait_timeout=2)
    entry = {**alias_settings(pool.url), "DISABLE_SERVER_SIDE_CURSORS": True}
    outcome: list[BaseException | int] = []

    def first_enqueue_in_a_transaction() -> None:
        try:
            with transaction.atomic(using=ALIAS):
                connections[ALIAS].cursor().execute("SELECT 1")  # holds the pool's one server connection
                try:
                    add.delay(1, 2)
                except StoreUnavailable as exc:
                    outcome.append(exc)
            get_queue()  # the store opened outside a transaction (as at a process's start)
            with transaction.atomic(using=ALIAS):  # a put then joins the transaction, and needs no more
                connections[ALIAS].cursor().execute("SELECT 1")
                outcome.append(add.delay(3, 4).job_id)  # type: ignore[arg-type]
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connections[ALIAS].close()

    try:
        with (
            django_db_blocker.unblock(),
            database_alias(ALIAS, entry),
            override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": ALIAS}),
        ):
            caller = threading.Thread(target=first_enqueue_in_a_transaction)
            caller.start()
            caller.join(30)
            hung = caller.is_alive()
            if hung:
                pool.stop()  # ends the wait, so that the thread ends before the test does
                caller.join(30)
            reset()
        assert not hung, "the first enqueue inside a transaction hung behind a pool of one"
        first, second = outcome
        assert isinstance(first, StoreUnavailable), first
        assert "query_wait_timeout" in str(first) and "transaction.atomic()" in str(first)
        assert "A pool of one server connection" in str(first)
        assert isinstance(second, int)
        assert sql(pg_url, "SELECT name FROM qm_jobs WHERE id = %s", (second,)) == [(TASK,)]
    finally:
        pool.stop()
