"""Transactional enqueue: with the PostgreSQL store in the ``DATABASE`` alias, a job enqueued inside
``transaction.atomic()`` on that alias is written in the caller's transaction, through Django's own
connection. A rollback leaves no job (the tables are read on a connection of their own); a commit makes it
visible to a ``queue_worker`` that is running all along, which runs it.

No test transaction wraps these tests (``pgdjango.pg_alias``): every commit is real.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from queue_max_django.results import JobNotFound
from tests.testapp.tasks import add, echo

from .pgdjango import ALIAS, Configure, Worker, sql, stored_jobs, wait_for
from .pgdjango import pg_alias as pg_alias
from .pgdjango import pg_store as pg_store
from .pgdjango import start_worker as start_worker

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
BACKEND = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}


class Rollback(Exception):
    """Raised inside ``atomic()`` to roll it back."""


def orders(url: str) -> list[str]:
    return [row[0] for row in sql(url, "SELECT note FROM shop_order ORDER BY id")]


def order(note: str) -> None:
    """A business write on Django's connection of the store's alias (in the caller's transaction)."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("INSERT INTO shop_order (note) VALUES (%s)", [note])


@pytest.fixture
def shop(pg_store: Configure, pg_url: str) -> Iterator[str]:
    """The store in the alias, a business table beside it. -> the database's URL."""
    sql(pg_url, "CREATE TABLE shop_order (id serial PRIMARY KEY, note text NOT NULL)")
    with pg_store():
        yield pg_url


@pytest.fixture
def worker(shop: str, start_worker: Callable[..., Worker]) -> Iterator[Worker]:
    """A queue_worker running on the store (2 threads), ready before the test enqueues anything."""
    running = start_worker(shop, "--processes", "1", "--threads", "2")
    wait_for(lambda: get_queue().workers(), what=f"the worker to report; log:\n{running.output()}")
    yield running
    assert running.stop() == 0, running.output()


def test_a_rolled_back_delay_leaves_no_job_and_a_committed_one_runs(shop: str, worker: Worker) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
        lost = add.delay(1, 2)  # the first statement of the transaction
        order("lost")
        with connections[ALIAS].cursor() as cursor:  # the caller's transaction sees its job
            cursor.execute("SELECT id FROM qm_jobs")
            assert cursor.fetchall() == [(int(lost.id),)]
        assert stored_jobs(shop) == []  # nobody else does
        raise Rollback

    assert stored_jobs(shop) == [] and orders(shop) == []
    with pytest.raises(JobNotFound):
        lost.refresh()

    with transaction.atomic(using=ALIAS):
        order("kept")
        kept = add.delay(20, 22)
        assert stored_jobs(shop) == []  # not before the commit: a worker cannot take it yet

    assert kept.wait(timeout=30).return_value == 42
    assert orders(shop) == ["kept"]
    assert stored_jobs(shop) == [(int(kept.id), "qm_finished", "tests.testapp.tasks.add")]
    stats = get_queue().stats()
    assert (stats["total"], stats["done"], stats["pending"]) == (1, 1, 0)  # the rolled-back put never counted
    assert get_queue().verify() == []


def test_a_rolled_back_savepoint_takes_its_jobs_with_it(shop: str, worker: Worker) -> None:
    with transaction.atomic(using=ALIAS):
        outer = echo.delay("outer")
        with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            echo.delay("inner")
            echo.map(["inner-1", "inner-2"])
            raise Rollback
        mapped = echo.map(["a", "b", "c"])  # one put_many, in the transaction too
        later = echo.schedule_in(3600, "later")

    assert outer.wait(timeout=30).return_value == {"args": ["outer"], "kwargs": {}}
    for handle, item in zip(mapped, "abc", strict=True):
        assert handle.wait(timeout=30).return_value == {"args": [item], "kwargs": {}}
    later.refresh()
    assert later.status == "READY" and later.job.state is State.SCHEDULED
    ids = sorted(int(handle.id) for handle in [outer, *mapped, later])
    assert [job_id for job_id, _table, _name in stored_jobs(shop)] == ids
    assert get_queue().stats()["total"] == 5


def test_enqueue_on_commit_on_the_store_s_own_database_joins_the_transaction(
    pg_store: Configure, pg_url: str
) -> None:
    """``ENQUEUE_ON_COMMIT`` waits for a commit of the *default* database; inside a transaction on the
    store's alias the job joins that transaction instead: it has its id at once and commits with it."""
    with pg_store(ENQUEUE_ON_COMMIT=True):
        with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            handle = add.delay(1, 1)
            assert handle.is_enqueued and int(handle.id) > 0
            raise Rollback
        assert stored_jobs(pg_url) == []
        with transaction.atomic(using=ALIAS):
            handle = add.delay(1, 1)
        assert [job_id for job_id, _t, _n in stored_jobs(pg_url)] == [int(handle.id)]


def test_outside_the_store_s_alias_a_put_is_its_own_transaction(pg_alias: str, pg_url: str) -> None:
    """With ``URL`` (even naming the same database) or in IMMEDIATE mode the job is not part of the
    caller's transaction: it is committed at once, and a rollback of the caller's writes keeps it."""
    for keys in ({"URL": pg_url}, {"DATABASE": pg_alias, "IMMEDIATE": True}):
        with override_settings(QUEUE_MAX={"STORE": "postgresql", **keys}):
            with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
                handle = add.delay(2, 2)
                assert [job_id for job_id, _t, _n in stored_jobs(pg_url)][-1:] == [int(handle.id)]
                raise Rollback
            assert int(handle.id) in [job_id for job_id, _t, _n in stored_jobs(pg_url)]
    assert len(stored_jobs(pg_url)) == 2
    assert sql(pg_url, "SELECT state FROM qm_finished") == [(3,)]  # the IMMEDIATE one ran at once


def test_outside_any_transaction_delay_commits_at_once(pg_store: Configure, pg_url: str) -> None:
    with pg_store():
        handle = add.delay(3, 4)
        assert stored_jobs(pg_url) == [(int(handle.id), "qm_jobs", "tests.testapp.tasks.add")]
        assert connections[ALIAS].connection is None  # Django's connection was not even opened


@pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")
def test_django_tasks_enqueue_joins_the_transaction(shop: str, worker: Worker) -> None:
    from django.tasks import default_task_backend

    from tests.testapp.django_tasks import add as django_add

    with override_settings(TASKS=BACKEND):
        with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            lost = django_add.enqueue(1, 2)
            raise Rollback
        assert stored_jobs(shop) == []
        with transaction.atomic(using=ALIAS):
            kept = django_add.enqueue(5, 6)
            assert kept.status == "READY" and stored_jobs(shop) == []
        result = wait_for(
            lambda: _finished(default_task_backend.get_result(kept.id)), what="the django.tasks job to run"
        )
        assert result.return_value == 11
        assert [job_id for job_id, _t, _n in stored_jobs(shop)] == [int(kept.id)]
        assert lost.id != kept.id


def _finished(result: Any) -> Any:
    return result if result.status in ("SUCCESSFUL", "FAILED") else None


def test_job_enqueued_is_sent_when_the_caller_s_transaction_commits(pg_store: Configure, pg_url: str) -> None:
    """A job put in the caller's transaction is announced (``job_enqueued``, the task's ``enqueued``
    count) when that transaction commits, with the job stored; a rolled-back savepoint or transaction
    announces none of its jobs. A put that is its own transaction (``URL``) is announced at once."""
    from queue_max_django import signals

    announced: list[tuple[int, list[int]]] = []  # (the job, the jobs stored when it was announced)

    def receiver(sender: Any, *, job_id: int, **kwargs: Any) -> None:
        announced.append((job_id, [stored[0] for stored in stored_jobs(pg_url)]))

    signals.job_enqueued.connect(receiver)
    signals.reset_stats()
    try:
        with pg_store():
            with transaction.atomic(using=ALIAS):
                first = add.delay(1, 1)
                with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
                    add.delay(2, 2)
                    add.map([3, 4], 0)
                    raise Rollback
                mapped = add.map([5, 6], 0)
                assert announced == [] and add.get_stats()["enqueued"] == 0
            ids = sorted(int(handle.id) for handle in [first, *mapped])
            assert sorted(job_id for job_id, _ in announced) == ids
            assert all(stored == ids for _, stored in announced)  # each was stored when it was announced
            assert add.get_stats()["enqueued"] == 3

            announced.clear()
            with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
                add.delay(7, 7)
                raise Rollback
            assert announced == [] and add.get_stats()["enqueued"] == 3

        own_transaction = override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url})
        with own_transaction, pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            own = add.delay(8, 8)  # its own transaction: stored, and announced, at once
            assert [job_id for job_id, _ in announced] == [int(own.id)]
            raise Rollback
    finally:
        signals.job_enqueued.disconnect(receiver)
        signals.reset_stats()


def test_a_delay_in_atomic_is_prepared_on_django_s_connection_and_its_own_statements_are_not(
    pg_store: Configure, pg_url: str
) -> None:
    """Django's connection prepares nothing (``prepare_threshold`` None): the store prepares its put's
    statement there once it ran the store's threshold of times (5), so the server stops parsing and
    planning every ``.delay()`` in ``atomic()``; Django's own statements are not prepared, its threshold
    stays None, and after a rollback (which deallocates them) the puts go on and nothing rolled back is
    stored."""

    def prepared() -> list[str]:
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall()]

    with pg_store():
        handles = []
        for n in range(8):
            with transaction.atomic(using=ALIAS):
                handles.append(add.delay(n, n))
                with connections[ALIAS].cursor() as cursor:
                    cursor.execute("SELECT %s::int", [n])
        texts = prepared()
        assert len(texts) == 1 and "INSERT INTO qm_jobs" in texts[0], texts
        assert connections[ALIAS].connection.prepare_threshold is None
        with pytest.raises(Rollback), transaction.atomic(using=ALIAS):
            add.delay(100, 100)
            raise Rollback
        assert prepared() == []
        for n in range(8, 10):
            with transaction.atomic(using=ALIAS):
                handles.append(add.delay(n, n))
        assert [job_id for job_id, _t, _n in stored_jobs(pg_url)] == sorted(int(h.id) for h in handles)
        assert get_queue().stats()["total"] == 10 and get_queue().verify() == []
