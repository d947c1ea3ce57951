"""The same code means the same thing on both stores (issue 29): a job enqueued inside
``transaction.atomic()`` is the transaction's, "not committed yet" until it commits and never stored if it
rolls back, on LMDB (``ENQUEUE_ON_COMMIT``, on by default: stored at the commit) as on PostgreSQL (written
in the caller's transaction); ``run_queued()`` runs the jobs of the caller's transaction (a ``TestCase``);
and a process without the app in ``INSTALLED_APPS`` refuses its first put.

The transaction is on the store's own database on PostgreSQL (the alias ``pgdjango.ALIAS``, where a job
joins it) and on Django's default database on LMDB (there is no other): ``tx_alias``. What is stored is
read on a queue of its own (``location.open_queue()``), which sees what is committed and nothing else.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.engine import State
from queue_max_django.results import JobNotCommitted, JobNotFound, JobResult, JobStatus
from queue_max_django.testing import run_queued
from queue_max_django.workflows import WorkflowNotCommitted, WorkflowNotFound, chain, group
from tests.engine.locations import StoreLocation
from tests.testapp.tasks import add

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
Configure = Callable[..., override_settings]
pytestmark = pytest.mark.django_db(transaction=True)  # Django's default database: LMDB's tx_alias


class Rollback(Exception):
    """Raised inside ``atomic()`` to roll it back."""


@pytest.fixture
def tx_alias(store_kind: str, request: pytest.FixtureRequest) -> str:
    """The database of the caller's transaction: the PostgreSQL store's alias, or the default one."""
    return str(request.getfixturevalue("pg_alias")) if store_kind == "postgres" else "default"


def stored(location: StoreLocation) -> dict[int, State]:
    """The state of every job committed in the store, by id (as another process sees them)."""
    if not location.exists():
        return {}
    with location.open_queue() as queue:
        return {job.job_id: job.state for state in State for job in queue.jobs(state, limit=1000)}


def in_another_thread(fn: Callable[[], Any]) -> BaseException | None:
    """What ``fn`` raised when called in another thread (None if nothing)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return raised[0] if raised else None


def test_a_handle_in_an_open_transaction_is_not_committed_yet(
    queue_max: Configure, tx_alias: str, location: StoreLocation
) -> None:
    with queue_max():
        with transaction.atomic(using=tx_alias):
            handle = add.delay(1, 2)
            assert repr(handle).endswith(" task='tests.testapp.tasks.add' status=READY (not committed yet)>")
            assert handle.status is JobStatus.READY and not handle.is_committed
            error = in_another_thread(handle.refresh)  # a connection outside the transaction
            assert isinstance(error, JobNotCommitted), error
            assert "is not committed yet" in str(error) and f"database {tx_alias!r}" in str(error)
            assert stored(location) == {}
        assert handle.is_committed and stored(location) == {int(handle.id): State.PENDING}
        handle.refresh()
        assert repr(handle) == f"<JobResult id={handle.id} task='tests.testapp.tasks.add' status=READY>"


def test_a_rolled_back_delay_stores_nothing(
    queue_max: Configure, tx_alias: str, location: StoreLocation
) -> None:
    with queue_max():
        with pytest.raises(Rollback), transaction.atomic(using=tx_alias):
            handle = add.delay(1, 2)
            jobs = add.map([1, 2, 3], 10)
            raise Rollback
        assert stored(location) == {}
        assert run_queued() == []
        assert repr(handle).endswith("(rolled back: never stored)>") and not handle.is_committed
        for lost in (handle, *jobs):
            with pytest.raises(JobNotFound, match="never stored: the transaction it was enqueued in"):
                lost.refresh()


def test_a_workflow_put_in_a_transaction_is_stored_with_it_or_not_at_all(
    queue_max: Configure, tx_alias: str, location: StoreLocation
) -> None:
    """A workflow's ``.delay()`` inside ``atomic()`` is the transaction's, as a task's: stored at the commit
    on LMDB (no id before), written in it on PostgreSQL; nothing at all after a rollback."""

    def workflows() -> dict[str, int]:
        if not location.exists():
            return {}
        with location.open_queue() as queue:
            return {status: n for status, n in queue.workflows.counts().items() if n}

    with queue_max():
        with transaction.atomic(using=tx_alias):
            result = chain(add.s(1, 2), add.s(3)).delay()
            assert not result.is_committed
            assert workflows() == {} and stored(location) == {}
            if tx_alias == "default":  # LMDB: stored at the commit, no id until then
                assert repr(result) == "<WorkflowResult (not committed yet)>"
                with pytest.raises(WorkflowNotCommitted, match="is not committed yet"):
                    result.id  # noqa: B018
        assert result.is_committed and workflows() == {"running": 1}
        assert result.status == "running" and [n.state.value for n in result.nodes] == ["queued", "waiting"]

        with pytest.raises(Rollback), transaction.atomic(using=tx_alias):
            lost = group(add.s(1, 1), add.s(2, 2)).delay()
            raise Rollback
        assert workflows() == {"running": 1} and not lost.is_committed
        with pytest.raises(WorkflowNotFound):
            lost.status  # noqa: B018


def test_a_repr_never_raises(queue_max: Configure, location: StoreLocation) -> None:
    with queue_max():
        handle = add.delay(1, 2)
        conf.get_queue().cancel(int(handle.id))
        assert stored(location) == {}
        assert repr(handle) == (
            f"<JobResult id={handle.id} task='tests.testapp.tasks.add' status=? (JobNotFound: job "
            f"{handle.id} is no longer in the store (cancelled, purged or vacuumed))>"
        )


def test_enqueue_on_commit_is_the_default_and_can_be_turned_off(
    queue_max: Configure, location: StoreLocation
) -> None:
    """On the default database (where neither store joins the transaction): the job waits for the
    commit, unless the setting or the call says not to."""
    with queue_max():
        with pytest.raises(Rollback), transaction.atomic():
            add.delay(1, 2)
            now = add.using(enqueue_on_commit=False).delay(3, 4)  # per call
            assert now.is_committed and stored(location) == {int(now.id): State.PENDING}
            raise Rollback
        assert stored(location) == {int(now.id): State.PENDING}
    with queue_max(ENQUEUE_ON_COMMIT=False):
        with pytest.raises(Rollback), transaction.atomic():
            kept = add.delay(5, 6)
            raise Rollback
        assert stored(location) == {int(now.id): State.PENDING, int(kept.id): State.PENDING}
        with transaction.atomic():
            waits = add.using(enqueue_on_commit=True).delay(7, 8)
            assert not waits.is_enqueued
        assert waits.is_enqueued and len(stored(location)) == 3


def test_run_queued_runs_the_jobs_of_the_callers_transaction(
    store_kind: str, queue_max: Configure, tx_alias: str, location: StoreLocation
) -> None:
    """As in a ``TestCase``, whose transaction never commits: ``run_queued()`` runs the test's jobs."""
    with queue_max():
        with pytest.raises(Rollback), transaction.atomic(using=tx_alias):
            handle = add.delay(2, 3)
            outcomes = run_queued()
            assert [(o.state, o.result) for o in outcomes] == [(State.DONE, 5)]
            assert outcomes[0].job_id == int(handle.id)
            handle.refresh()
            assert handle.status is JobStatus.SUCCESSFUL and handle.return_value == 5
            assert run_queued() == []
            raise Rollback
        # PostgreSQL: the job and its run were the transaction's; LMDB: stored when run_queued() ran
        assert stored(location) == ({} if store_kind == "postgres" else {int(handle.id): State.DONE})


@pytest.mark.django_db  # a TestCase's transaction on the default database, never committed
@pytest.mark.lmdb  # PostgreSQL in a TestCase: the test above, in its store's database
def test_run_queued_in_a_test_transaction_stores_and_runs_what_waits_for_the_commit(
    queue_max: Configure, location: StoreLocation
) -> None:
    with queue_max():
        handle = add.delay(2, 3)
        assert repr(handle).endswith("status=READY (not committed yet)>") and stored(location) == {}
        assert [o.result for o in run_queued()] == [5]
        assert handle.status is JobStatus.SUCCESSFUL and stored(location) == {int(handle.id): State.DONE}


def test_a_process_without_the_app_refuses_its_first_put(
    queue_max: Configure, location: StoreLocation
) -> None:
    apps = [app for app in settings.INSTALLED_APPS if app != "queue_max_django"]
    with override_settings(INSTALLED_APPS=apps), queue_max():
        with pytest.raises(ImproperlyConfigured) as raised:
            add.delay(1, 2)
        message = str(raised.value)
        assert "'queue_max_django' is not in INSTALLED_APPS" in message and "nothing was stored" in message
        with pytest.raises(ImproperlyConfigured):
            JobResult.load(1)
    assert not location.exists()


@pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")
def test_a_django_task_enqueued_in_a_transaction_is_the_transactions(
    queue_max: Configure, tx_alias: str, location: StoreLocation
) -> None:
    from django.tasks.exceptions import TaskResultDoesNotExist

    from tests.testapp import django_tasks as dt_tasks

    backend = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend"}}
    with queue_max(), override_settings(TASKS=backend):
        with pytest.raises(Rollback), transaction.atomic(using=tx_alias):
            lost = dt_tasks.add.enqueue(1, 2)
            raise Rollback
        assert stored(location) == {}
        with pytest.raises(TaskResultDoesNotExist, match="never stored"):
            lost.refresh()
        with transaction.atomic(using=tx_alias):
            result = dt_tasks.add.enqueue(2, 3)
            error = in_another_thread(result.refresh)
            assert isinstance(error, TaskResultDoesNotExist) and "is not committed yet" in str(error)
            assert stored(location) == {}
        assert stored(location) == {int(result.id): State.PENDING}
        assert [o.result for o in run_queued()] == [5]
        result.refresh()
        assert result.return_value == 5


@pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")
def test_the_backend_option_enqueue_on_commit_false_stores_at_once(
    queue_max: Configure, location: StoreLocation
) -> None:
    from tests.testapp import django_tasks as dt_tasks

    backend = {
        "default": {
            "BACKEND": "queue_max_django.backend.QueueMaxBackend",
            "OPTIONS": {"ENQUEUE_ON_COMMIT": False},
        }
    }
    with queue_max(), override_settings(TASKS=backend):
        with pytest.raises(Rollback), transaction.atomic():
            result = dt_tasks.add.enqueue(1, 2)
            raise Rollback
        assert stored(location) == {int(result.id): State.PENDING}


@pytest.mark.store_neutral
@pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")
def test_the_backend_option_enqueue_on_commit_is_checked(queue_max: Configure) -> None:
    from django.tasks import task_backends

    backend = {
        "default": {
            "BACKEND": "queue_max_django.backend.QueueMaxBackend",
            "OPTIONS": {"ENQUEUE_ON_COMMIT": "yes"},
        }
    }
    with queue_max(), override_settings(TASKS=backend):
        [error] = task_backends["default"].check()
    assert (error.id, error.msg) == (
        "queue_max_django.backend.E007",
        "TASKS['default']['OPTIONS']['ENQUEUE_ON_COMMIT'] must be None, True or False, not 'yes'",
    )
