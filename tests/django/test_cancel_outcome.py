"""A cancel is its own outcome (issue 29, "Operating it"), from Django on both stores: who cancelled a running
job and when are stored with it (``JobResult.cancel(by=)``, the admin user, ``queue_cancel``) and said by the
result handle, ``queue_show``, the admin's job page and Django's admin log; the job is counted as cancelled,
not as a failure (``queue_stats --json``, the dashboard, the dead letters' list), and the ``job_cancelled``
signal goes out instead of ``job_failed``. The real worker's side is tests/worker/test_cancel_outcome.py's."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.management import call_command
from django.test import override_settings

from queue_max_django import signals
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, Record, State
from queue_max_django.results import JobStatus
from queue_max_django.running import cancels
from tests.django.test_cancel import BASE, cancel_running, staff
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0):
        yield get_queue()


def stop_as_the_worker_does(queue: Queue, record: Record) -> None:
    """What a worker does once its heartbeat reported the cancel and the task stopped (running/cancels.py)."""
    record.touch()
    assert record.cancel_requested
    cancels.learn(queue, record)
    record.nack(cancels.error(record, ": it stopped when asked"), permanent=True)


def output(command: str, *argv: object) -> str:
    out = io.StringIO()
    call_command(command, *(str(arg) for arg in argv), stdout=out)
    return out.getvalue()


def test_the_result_handle_says_who_cancelled_and_the_cancel_signal_is_sent(store: Queue) -> None:
    heard: list[tuple[str, int]] = []

    def on_failed(sender: Any, **fields: Any) -> None:
        heard.append(("failed", fields["job_id"]))

    def on_cancelled(sender: Any, **fields: Any) -> None:
        heard.append(("cancelled", fields["job_id"]))

    signals.job_failed.connect(on_failed)
    signals.job_cancelled.connect(on_cancelled)
    try:
        result = t.add.delay(1, 2)
        record = store.get(0)
        asked = store.now()
        assert result.cancel(by="nightly cleanup: order 7 was refunded") == "requested"
        after = store.now()
        stop_as_the_worker_does(store, record)
    finally:
        signals.job_failed.disconnect(on_failed)
        signals.job_cancelled.disconnect(on_cancelled)
    assert heard == [("cancelled", record.job_id)]  # a dead-letter alert on job_failed stays quiet
    result.refresh()
    assert result.status is JobStatus.FAILED and result.cancelled
    assert result.cancelled_by == "nightly cleanup: order 7 was refunded"
    at = result.cancelled_at
    assert at is not None and at.tzinfo is dt.UTC and asked <= at.timestamp() <= after
    assert t.add.get_stats()["cancelled"] >= 1
    other = t.add.delay(3, 4)
    assert not other.cancelled and other.cancelled_by is None and other.cancelled_at is None


@pytest.mark.django_db
def test_the_admin_notes_its_user_in_the_job_and_in_djangos_log_and_shows_the_cancel(store: Queue) -> None:
    job_id = store.put({"args": [1, 2], "kwargs": {}}, name=t.add.name)
    record = store.get(0)
    client = staff("view_job", "cancel_job")
    assert cancel_running(client, job_id, confirmed="yes").status_code == 302
    note = store.job(job_id).cancel_note
    assert note is not None and note.by == "view_job-cancel_job"  # the user's name
    entry = LogEntry.objects.get()
    assert (entry.user.get_username(), entry.object_id, entry.action_flag) == (
        "view_job-cancel_job",
        str(job_id),
        CHANGE,
    )
    assert entry.get_change_message() == "Cancel requested (its worker stops it)."
    stop_as_the_worker_does(store, record)
    store.put({"args": [], "kwargs": {}}, name=t.fail_always.name)
    store.get(0).nack(ValueError("boom"), permanent=True)

    listed = client.get(f"{BASE}failed/").content.decode()
    assert listed.count('data-testid="cancelled"') == 1 and "ValueError" in listed
    page = client.get(f"{BASE}{job_id}/").content.decode()
    assert re.search(r'data-testid="state">Cancelled<', page) and "failed for good" not in page
    assert re.search(
        r'data-testid="cancelled-by">by view_job-cancel_job at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d', page
    )
    dashboard = client.get(BASE).content.decode()
    assert 'data-state="failed">2<' in dashboard and 'data-state="cancelled">1<' in dashboard


def test_queue_cancel_notes_the_command_and_queue_show_and_queue_stats_say_it(store: Queue) -> None:
    result = t.add.delay(1, 2)
    record = store.get(0)
    assert "cancel requested" in output("queue_cancel", result.job_id, "--reason", "stuck on a lock")
    stop_as_the_worker_does(store, record)
    t.fail_always.delay("no")
    store.get(0).nack(ValueError("boom"), permanent=True)

    lines = output("queue_show", result.job_id).splitlines()
    assert lines[1].split()[:2] == ["state", "failed"]
    assert re.fullmatch(
        r"cancelled +by queue_cancel command: stuck on a lock at "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(not a failure\)",
        lines[2],
    ), lines[2]
    shown = json.loads(output("queue_show", result.job_id, "--json"))
    assert (
        shown["cancelled"] is True
        and shown["metadata"]["_cancel"]["by"] == "queue_cancel command: stuck on a lock"
    )
    stats = json.loads(output("queue_stats", "--json"))
    assert (stats["failed"], stats["cancelled"]) == (2, 1)
    assert (
        stats["pending"] + stats["scheduled"] + stats["running"] + stats["done"] + stats["failed"]
        <= stats["total"]
    )
    assert re.search(r"\nfailed +2\ncancelled +1\n", output("queue_stats"))  # (within failed)
    assert (
        store.job(result.job_id).state is State.FAILED
    )  # stored as a dead letter: the State vocabulary stays
