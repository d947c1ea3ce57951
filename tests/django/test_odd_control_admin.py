"""The Django layer over a rate limit or circuit breaker whose stored value does not decode (written past the
engine): the admin's dashboard answers 200 and shows it as damaged (it answered 500), ``queue_check`` names
it and exits 1, workers run the jobs under it, and the setting at start-up (``QUEUE_RATE_LIMITS``) replaces
it. The engine's side, on both stores: tests/faults/test_odd_control.py."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from queue_max_django import conf
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State
from queue_max_django.engine.stores.lmdb import layout
from queue_max_django.engine.stores.postgres.store import PostgresStore
from tests.engine.pgprobe import PgProbe
from tests.faults.corrupt import GARBAGE, wrong_type
from tests.faults.test_odd_control import write_control

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"
LIMIT = "queue:default"
BREAKER = "name:t.task"

pytestmark = pytest.mark.django_db


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def settings_with_a_limit(queue_max: Configure) -> Iterator[Configure]:
    def configure() -> override_settings:
        return queue_max(RETRY_BACKOFF=0, SHARDS=1, QUEUE_RATE_LIMITS={"default": "1/h"})

    yield configure


@pytest.fixture
def store(settings_with_a_limit: Configure) -> Iterator[Queue]:
    with settings_with_a_limit():
        queue = get_queue()
        assert set(queue.rate_limits()) == {LIMIT}  # set at start-up, from the settings
        queue.set_circuit_breaker(BREAKER, threshold=1, recovery_timeout=600)
        write_control(queue, "limits", LIMIT, GARBAGE)
        write_control(queue, "breakers", BREAKER, GARBAGE)
        yield queue


def test_the_dashboard_answers_and_shows_a_damaged_limit_and_breaker(
    admin_client: Client, store: Queue
) -> None:
    store.set_rate_limit("queue:other", "5/m")
    for url in (BASE, f"{BASE}panels/"):
        response = admin_client.get(url)
        assert response.status_code == 200, url
    page = admin_client.get(f"{BASE}panels/").content.decode()
    assert page.count("damaged, ignored: the stored value does not decode") == 2
    assert LIMIT in page and BREAKER in page and "5/m" in page  # the healthy limit too
    metrics = admin_client.get("/queue/metrics/")
    if metrics.status_code != 501:  # 501: prometheus_client (the metrics extra) is not installed
        assert metrics.status_code == 200 and 'key="queue:other"' in metrics.content.decode()


def test_queue_check_names_them_and_exits_1(store: Queue) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match="2 problem"):
        call_command("queue_check", stdout=out, stderr=io.StringIO())
    said = out.getvalue()
    assert f"rate limit {LIMIT!r}" in said and f"circuit breaker {BREAKER!r}" in said, said


def test_jobs_run_under_them_and_the_setting_at_start_up_replaces_the_limit(
    store: Queue, settings_with_a_limit: Configure
) -> None:
    jobs = [store.put({"args": [n], "kwargs": {}}, name="t.task") for n in range(3)]
    served = [store.get(timeout=0) for _ in jobs]  # 1/h and an open-or-not breaker: ignored
    assert sorted(record.job_id for record in served) == sorted(jobs)
    for record in served:
        record.ack()
    assert all(store.job(job_id).state is State.DONE for job_id in jobs)  # type: ignore[union-attr]

    conf.reset()  # a new process: the setting is applied at start-up again
    with settings_with_a_limit():
        queue = get_queue()
        problems = queue.verify()
        assert len(problems) == 1 and BREAKER in problems[0], problems  # the limit was replaced
        assert queue.remaining(LIMIT) == 1.0


# ------------------------------------------------------------------ a time no datetime can hold (commands)

YEAR_287168 = 9_000_000_000_000.0  # unix seconds: year 287168


def put_in_year_287168(queue: Queue) -> int:
    """A pending job whose enqueue time was written by hand as year 287168, past the engine."""
    job_id = queue.put({"args": [], "kwargs": {}}, name="t.task")
    if isinstance(queue._store, PostgresStore):
        probe = PgProbe(queue)  # its connection lives as long as it does
        probe.conn.execute(
            "UPDATE qm_jobs SET enqueued_us = %s WHERE id = %s", (int(YEAR_287168 * 1e6), job_id)
        )
    else:
        wrong_type(layout.F_ENQUEUED_AT, int(YEAR_287168 * 1e6))(queue, job_id)  # microseconds
    job = queue.job(job_id)
    assert job is not None and job.enqueued_at == YEAR_287168
    return job_id


def test_queue_show_and_queue_list_show_a_time_no_datetime_can_hold_as_no_time(queue_max: Configure) -> None:
    """They raised ``ValueError: year 287168 is out of range`` from ``fromtimestamp``."""
    with queue_max(SHARDS=1):
        queue = get_queue()
        odd = put_in_year_287168(queue)
        other = queue.put({"args": [], "kwargs": {}}, name="t.task")
        shown = call("queue_show", str(odd))
        assert str(odd) in shown and "enqueued_at" in shown
        assert next(line for line in shown.splitlines() if line.startswith("enqueued_at")).split()[-1] == "-"
        listed = call("queue_list", "--status", "pending")
        assert str(odd) in listed and str(other) in listed
        assert call("queue_show", str(other)).count(" UTC") >= 1  # an ordinary time is shown as ever
        assert str(YEAR_287168) in call("queue_show", str(odd), "--json")  # the data itself, unchanged
