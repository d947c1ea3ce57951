"""PgBouncer in transaction mode from Django (docs/howto/postgresql.md#pgbouncer): ``TRANSACTION_POOLING``
and what it follows from an alias, its checks (E025, W004) against their exact output, and a real
``queue_worker`` (two processes, two threads each, the periodic scheduler on) whose every connection goes
through a PgBouncer with two server connections (``tests/pgbouncer.py``); and through a pool of ONE server
connection, the process's first enqueue inside ``transaction.atomic()`` (docs/howto/postgresql.md, "A pool
of one server connection")."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.db import connections, transaction
from django.test import override_settings

from queue_max_django.conf import get_config, get_queue, reset
from queue_max_django.conf.checks import check_settings
from queue_max_django.engine import Queue, StoreUnavailable, parse_rate
from queue_max_django.engine.stores.postgres.store import PostgresStore
from queue_max_django.tasks import registry, task
from tests.pgbouncer import HOW_TO_ENABLE, Bouncer, backends, find_pgbouncer
from tests.pgbouncer import bouncer as bouncer
from tests.pgserver import dbname_of, in_ci, server

from .pgdjango import ALIAS, Configure, Worker, alias_settings, database_alias, sql, wait_for
from .pgdjango import pg_alias as pg_alias
from .pgdjango import pg_store as pg_store
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


# ---------------------------------------------------------------- a pool of one server connection

POOL_WAIT = 2  # s: PgBouncer's query_wait_timeout here; a statement that waits for a server connection fails
JOIN_BOUND = 30  # s: a caller's thread that has not ended by then waits for itself
LIMITED = "tests.django.test_pg_pgbouncer.pool_one_limited"
SETTINGS = {"RATE_LIMIT": "600/m", "QUEUE_RATE_LIMITS": {"pooled": "120/m"}}
LIMITS = [("*",), ("name:" + LIMITED,), ("queue:pooled",)]
HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
BACKEND = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}


class Rollback(Exception):
    pass


@pytest.fixture
def pool_of_one(pg_url: str, django_db_blocker: Any) -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """``run(fn)``: ``fn()`` in a thread of its own (Django's connections are per thread), the store in the
    alias ``ALIAS``, which goes through a PgBouncer with ONE server connection (``query_wait_timeout``
    ``POOL_WAIT``), with ``SETTINGS``' limits, and no queue open in the process: each run is the process's
    first use of the store. -> what ``fn`` returned (its exception raised again); the test fails if the
    thread did not end within ``JOIN_BOUND`` (a wait for itself). The task ``LIMITED`` (a rate limit and a
    breaker) is registered meanwhile, and the tables of limits and breakers are empty at each run."""
    if find_pgbouncer() is None:
        if in_ci():
            pytest.fail(f"PgBouncer tests cannot run under CI: {HOW_TO_ENABLE}", pytrace=False)
        pytest.skip(f"needs PgBouncer: {HOW_TO_ENABLE}")
    pool = Bouncer(server().url, dbname_of(pg_url), pool_size=1, query_wait_timeout=POOL_WAIT)
    entry = {**alias_settings(pool.url), "DISABLE_SERVER_SIDE_CURSORS": True}

    def run(fn: Callable[[], Any]) -> Any:
        reset()  # the process's first use of the store is the next one
        sql(pg_url, "DELETE FROM qm_limits")
        sql(pg_url, "DELETE FROM qm_breakers")
        outcome: list[tuple[bool, Any]] = []

        def caller() -> None:
            try:
                outcome.append((True, fn()))
            except BaseException as exc:
                outcome.append((False, exc))
            finally:
                connections[ALIAS].close()

        thread = threading.Thread(target=caller)
        thread.start()
        thread.join(JOIN_BOUND)
        if thread.is_alive():
            pool.stop()  # ends the wait, so that the thread ends before the test does
            thread.join(JOIN_BOUND)
            pytest.fail("the first use of the store inside a transaction hung behind a pool of one")
        returned, value = outcome[0]
        if not returned:
            raise value
        return value

    breaker = {"THRESHOLD": 3, "TIMEOUT": 60}
    task(name=LIMITED, queue="pooled", rate_limit="30/m", circuit_breaker=breaker)(_add)
    try:
        with (
            django_db_blocker.unblock(),
            database_alias(ALIAS, entry),
            override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": ALIAS, **SETTINGS}),
        ):
            yield run
            reset()
    finally:
        registry.unregister(LIMITED)
        pool.stop()


def _add(a: int, b: int) -> int:
    return a + b


def _enqueue(how: str) -> list[int]:
    """Enqueue as ``how`` says, inside the caller's open transaction. -> the jobs' ids."""
    if how == "delay":
        return [registry[LIMITED].delay(1, 2).job_id]  # type: ignore[list-item]
    if how == "map":
        return [handle.job_id for handle in registry[LIMITED].map([1, 2, 3], 4)]  # type: ignore[misc]
    from django.tasks import task_backends

    from tests.testapp.django_tasks import add as django_add

    return [int(task_backends["default"].enqueue(django_add, [1, 2], {}).id)]


def _stored(pg_url: str, ids: list[int]) -> list[tuple[Any, ...]]:
    """The jobs ``ids`` and the limits and breakers, as committed."""
    jobs = sql(pg_url, "SELECT id FROM qm_jobs WHERE id = ANY(%s) ORDER BY id", (ids,))
    return [*jobs, *sql(pg_url, "SELECT key FROM qm_limits ORDER BY key"),
            *sql(pg_url, "SELECT 'breaker', key FROM qm_breakers")]  # fmt: skip


@pytest.mark.parametrize("how", ["delay", "map", "django_tasks"])
def test_the_first_enqueue_inside_a_transaction_behind_a_pool_of_one_needs_no_second_connection(
    pool_of_one: Callable[[Callable[[], Any]], Any], pg_url: str, how: str
) -> None:
    """A statement inside ``transaction.atomic()`` holds the pool's ONE server connection; the process's
    first enqueue then opens the store (its schema version, the server's clock), reads the settings' rate
    limits and the task's limit and breaker, and writes the job, all on the caller's connection, in its
    transaction: nothing waits for a second server connection (which would wait for this transaction:
    ``StoreUnavailable`` after ``POOL_WAIT``, or a hang). The job commits with the caller's write, and the
    limits and breaker, which the store did not have, are written right after that commit."""
    if how == "django_tasks" and not HAS_TASKS:
        pytest.skip("django.tasks needs Django >= 6.0")

    def first_enqueue_in_a_transaction() -> tuple[list[int], float]:
        with override_settings(TASKS=BACKEND), transaction.atomic(using=ALIAS):
            connections[ALIAS].cursor().execute("CREATE TABLE callers_write (n int)")
            started = time.monotonic()
            ids = _enqueue(how)
            took = time.monotonic() - started
        return ids, took

    ids, took = pool_of_one(first_enqueue_in_a_transaction)
    assert took < POOL_WAIT  # no statement waited for a server connection, and failed quietly
    assert len(ids) == (3 if how == "map" else 1)
    limits = LIMITS if how != "django_tasks" else [("*",), ("queue:pooled",)]
    breakers = [("breaker", "name:" + LIMITED)] if how != "django_tasks" else []
    assert _stored(pg_url, ids) == [(job_id,) for job_id in sorted(ids)] + limits + breakers
    assert sql(pg_url, "SELECT count(*) FROM callers_write") == [(0,)]  # the caller's write committed too
    with Queue(PostgresStore.open(pg_url)) as queue:  # what was committed is what was asked for
        assert queue.rate_limits()["queue:pooled"] == parse_rate("120/m")
        if how != "django_tasks":
            assert queue.rate_limits()["name:" + LIMITED] == parse_rate("30/m")
            breaker = queue.circuit_breakers()["name:" + LIMITED]
            assert (breaker["threshold"], breaker["recovery_timeout"]) == (3, 60.0)


def test_limits_written_in_a_transaction_that_rolls_back_are_written_again(
    pool_of_one: Callable[[Callable[[], Any]], Any], pg_url: str
) -> None:
    """The limits and breaker the store lacks are written after the commit of the transaction of the first
    enqueue: when it rolls back (a transaction, then a savepoint), nothing is written, the process does not
    take them for applied, and its next enqueue looks again, and writes them once its transaction commits."""
    limited = registry[LIMITED]

    def rolled_back_then_again() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
        with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            connections[ALIAS].cursor().execute("SELECT 1")
            lost = limited.delay(1, 2).job_id
            raise Rollback
        after_rollback = _stored(pg_url, [lost])  # type: ignore[list-item]
        with transaction.atomic(using=ALIAS):
            connections[ALIAS].cursor().execute("SELECT 1")
            with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
                limited.delay(3, 4)  # they are to be written at the commit ...
                raise Rollback  # ... of a savepoint that rolls back
            inside = connections[ALIAS].cursor()
            inside.execute("SELECT count(*) FROM qm_limits UNION ALL SELECT count(*) FROM qm_breakers")
            inside = inside.fetchall()
            kept = limited.delay(5, 6).job_id  # writes them again
        return after_rollback, inside, kept  # type: ignore[return-value]

    after_rollback, inside, kept = pool_of_one(rolled_back_then_again)
    assert after_rollback == []
    assert inside == [(0,), (0,)]  # seen from inside the transaction
    assert _stored(pg_url, [kept]) == [(kept,), *LIMITS, ("breaker", "name:" + LIMITED)]


def test_a_step_of_the_clock_seen_by_a_put_inside_the_transaction_reads_the_server_on_it(
    pool_of_one: Callable[[Callable[[], Any]], Any], pg_url: str
) -> None:
    """This machine's clock steps 30 s ahead between two enqueues inside one transaction: the second one
    reads the server's clock again (``ServerClock``) on the caller's connection, at once, rather than on a
    connection of its own that would wait for the pool's one server connection (``POOL_WAIT``)."""
    from tests.testapp.tasks import add

    def stepped() -> tuple[float | None, float, int]:
        with transaction.atomic(using=ALIAS):
            connections[ALIAS].cursor().execute("SELECT 1")
            registry[LIMITED].delay(1, 2)
            clock = get_queue()._store.server_clock  # type: ignore[attr-defined]
            clock._local = lambda: time.time() + 30  # the step (this machine's clock, as the store reads it)
            started = time.monotonic()
            job_id = add.delay(3, 4).job_id  # a task without limits: its put is what reads the clock
            took = time.monotonic() - started
        return clock.offset, took, job_id  # type: ignore[return-value]

    offset, took, job_id = pool_of_one(stepped)
    assert took < POOL_WAIT
    assert offset is not None and abs(offset + 30) < 1  # measured again: the server's time is 30 s behind
    assert sql(pg_url, "SELECT count(*) FROM qm_jobs WHERE id <= %s", (job_id,)) == [(2,)]


def test_a_reading_of_the_store_inside_the_transaction_still_needs_a_second_connection(
    pool_of_one: Callable[[Callable[[], Any]], Any], pg_url: str
) -> None:
    """What still needs one (docs/howto/postgresql.md, "A pool of one server connection"): a reading of the
    store on its own connection, as ``result.refresh()``'s first look, waits for the caller's transaction:
    PgBouncer's ``query_wait_timeout`` ends the wait, and it raises ``StoreUnavailable`` saying why, within
    a bound; the caller's transaction is unharmed, and its job commits."""

    def refresh_inside() -> tuple[int, StoreUnavailable, float]:
        with transaction.atomic(using=ALIAS):
            connections[ALIAS].cursor().execute("SELECT 1")
            handle = registry[LIMITED].delay(1, 2)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as raised:
                handle.refresh()
            took = time.monotonic() - started
        return handle.job_id, raised.value, took  # type: ignore[return-value]

    job_id, error, took = pool_of_one(refresh_inside)
    assert POOL_WAIT * 0.9 < took < JOIN_BOUND
    assert "query_wait_timeout" in str(error) and "transaction.atomic()" in str(error)
    assert "A pool of one server connection" in str(error)
    assert sql(pg_url, "SELECT id FROM qm_jobs") == [(job_id,)]


def test_a_first_enqueue_inside_a_transaction_leaves_no_flow_row_locked_in_it(
    pg_store: Configure, pg_url: str
) -> None:
    """The limits and breaker of a first enqueue are not written in the caller's transaction: such writes
    would lock the rows of flow control (the version row every flow write updates) until it ends, and the
    same thread's next flow write on the store's own connection (``try_acquire``) would wait for its own
    transaction forever; every worker's admission would wait for it too. Here it takes a token at once."""
    from tests.testapp.tasks import limited

    def first_enqueue_then_a_token() -> bool:
        try:
            with transaction.atomic(using=ALIAS):
                limited.delay()
                return get_queue().try_acquire("name:" + limited.name)
        finally:
            connections[ALIAS].close()

    outcome: list[Any] = []
    with Queue(PostgresStore.open(pg_url)) as queue:
        queue.set_rate_limit("name:" + limited.name, "5/m")  # a limit the task has changed since
    with pg_store(**SETTINGS):
        reset()
        caller = threading.Thread(target=lambda: outcome.append(first_enqueue_then_a_token()))
        caller.start()
        caller.join(JOIN_BOUND)
        hung = caller.is_alive()
        if hung:  # end the wait on the server, so that the thread ends before the test does
            sql(
                pg_url,
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()",
            )
            caller.join(JOIN_BOUND)
        reset()
    assert not hung, "a flow write waited for the caller's own transaction"
    assert outcome == [True]
    assert sql(pg_url, "SELECT key FROM qm_limits ORDER BY key") == [("*",), ("name:" + limited.name,),
                                                                     ("queue:pooled",)]  # fmt: skip
    with Queue(PostgresStore.open(pg_url)) as queue:  # changed once the transaction committed
        assert queue.rate_limits()["name:" + limited.name] == parse_rate("10/m")
