"""Pausing from Django (issue 31, "Pausing"): ``manage.py queue_pause``/``queue_resume``, the pauses in
``queue_stats``, the dashboard's buttons behind the ``pause_queue`` permission (and Django's admin log), and
the ``queue_max_queue_paused`` metric, on every store. The engine's side is tests/engine/test_pauses.py's,
real workers' tests/worker/test_pauses.py's."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.coordination.pausing import parse_duration
from queue_max_django.engine import Queue, QueueEmpty
from tests.admin_clients import logged_in
from tests.django.test_metrics import TOKEN, samples, scrape, value
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db
Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(METRICS_TOKEN=TOKEN):
        yield get_queue()


def call(*argv: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def claimable(queue: Queue) -> list[str]:
    """The queues of every job a worker would take now (each claimed and released again)."""
    found = []
    records = []
    while True:
        try:
            records.append(queue.get(timeout=0))
        except QueueEmpty:
            break
    for record in records:
        found.append(record.queue)
        record.release()
    return sorted(found)


# ------------------------------------------------------------------------------------------ the commands


def test_queue_pause_and_resume(store: Queue) -> None:
    store.put("m", queue="mail")
    store.put("s", queue="sms")
    store.put("d")
    out, err = call("queue_pause", "mail", "sms", "--reason", "provider outage")
    assert out.splitlines() == [
        "paused queue 'mail' until resumed: provider outage",
        "paused queue 'sms' until resumed: provider outage",
    ]
    assert err == ""
    assert claimable(store) == ["default"]
    (pause, _sms) = store.pauses()
    assert pause.by is not None and pause.by.startswith("queue_pause command (") and "@" in pause.by
    out, _ = call("queue_resume", "mail", "never-paused")
    assert out.splitlines()[0].startswith("resumed queue 'mail' (paused by queue_pause command (")
    assert out.splitlines()[1] == "queue 'never-paused' was not paused: nothing to resume"
    assert claimable(store) == ["default", "mail"]


def test_a_task_pause_with_an_end_and_json(store: Queue) -> None:
    out, _ = call("queue_pause", "default", "--task", t.add.name, "--until", "1h30m", "--json")
    data = json.loads(out)
    (paused,) = data["paused"]
    assert (paused["queue"], paused["task"]) == ("default", t.add.name)
    assert paused["until"] == pytest.approx(paused["paused_at"] + 5400)
    assert data["warnings"] == []
    store.put({}, name=t.add.name)  # (.delay() waits for the test's transaction to commit: it never does)
    store.put({}, name=t.fail_always.name)
    assert [job.name for job in (store.get(timeout=0),)] == [t.fail_always.name]
    out, _ = call("queue_resume", "default", "--task", t.add.name, "--json")
    assert [p["task"] for p in json.loads(out)["resumed"]] == [t.add.name]


def test_a_queue_that_never_had_a_job_is_paused_with_a_warning(store: Queue) -> None:
    out, err = call("queue_pause", "nowhere", "--task", "app.no_such_task")
    assert out.startswith("paused task 'app.no_such_task' in queue 'nowhere'")
    assert "queue 'nowhere' has never had a job" in err
    assert "no task 'app.no_such_task' is registered" in err
    assert [p.queue for p in store.pauses()] == ["nowhere"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["queue_pause", "mail", "--until", "soon"], "is not a duration"),
        (["queue_pause", "mail", "--until", "0"], "is not a duration"),
        (["queue_pause", ""], "queue must be a non-empty str"),
        (["queue_pause", "mail", "--reason", "x" * 501], "at most 500 characters"),
        (["queue_pause", "mail", "--task", ""], "name must be"),
        (["queue_resume", "bad\nname"], "control characters"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(store: Queue, argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call(*argv)
    assert store.pauses() == []


def test_a_queue_outside_the_configured_queues_is_an_error(queue_max: Configure) -> None:
    with queue_max(QUEUES=["default", "mail"]):
        with pytest.raises(CommandError, match="unknown queue"):
            call("queue_pause", "mial")
        assert get_queue().pauses() == []


def test_queue_stats_shows_who_paused_what_when_and_why(store: Queue) -> None:
    store.pause("mail", reason="provider down", by="alice")
    stats = json.loads(call("queue_stats", "--json")[0])
    assert [(p["queue"], p["task"], p["by"], p["reason"]) for p in stats["paused"]] == [
        ("mail", None, "alice", "provider down")
    ]
    text = call("queue_stats")[0]
    assert "Paused" in text and "alice" in text and "provider down" in text


def test_durations() -> None:
    assert parse_duration("90") == 90 and parse_duration("1h30m") == 5400 and parse_duration("2d") == 172800
    for bad in ("", "1x", "-5", "h", "0s", "1e3"):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)


# ------------------------------------------------------------------------------------------ the admin


def test_the_buttons_need_the_pause_permission(store: Queue) -> None:
    store.put("m", queue="mail")
    viewer = logged_in("view_job", "change_job", "delete_job", "cancel_job", username="viewer")
    page = viewer.get(BASE).content.decode()
    assert 'data-testid="paused-mail">no<' in page
    assert 'data-testid="pause-mail"' not in page  # no button without the permission
    assert viewer.post(BASE + "queues/pause/", {"queue": "mail"}).status_code == 403
    assert viewer.post(BASE + "queues/resume/", {"queue": "mail"}).status_code == 403
    assert store.pauses() == []
    no_view = logged_in("pause_queue", username="blind")
    assert no_view.post(BASE + "queues/pause/", {"queue": "mail"}).status_code == 403
    assert store.pauses() == []


def test_pause_and_resume_from_the_dashboard_are_logged(store: Queue) -> None:
    store.put("m", queue="mail")
    admin = logged_in("view_job", "pause_queue", username="ops")
    page = admin.get(BASE).content.decode()
    assert 'data-testid="pause-mail"' in page
    assert admin.get(BASE + "queues/pause/").status_code == 405  # POST only
    response = admin.post(BASE + "queues/pause/", {"queue": "mail", "duration": "1h", "reason": "outage"})
    assert response.status_code == 302 and response["Location"] == BASE
    (pause,) = store.pauses()
    assert (pause.queue, pause.task, pause.reason, pause.by) == ("mail", None, "outage", "admin user ops")
    assert pause.until == pytest.approx(pause.paused_at + 3600)
    page = admin.get(BASE).content.decode()
    assert 'data-testid="resume-mail"' in page and "paused by admin user ops" in page
    assert admin.post(BASE + "queues/resume/", {"queue": "mail"}).status_code == 302
    assert store.pauses() == []
    entries = [(entry.object_repr, entry.get_change_message()) for entry in LogEntry.objects.order_by("id")]
    assert entries[0][0] == "queue mail" and entries[0][1].startswith("Paused until ")
    assert entries[0][1].endswith(": outage.")
    assert entries[1] == ("queue mail", "Resumed.")


def test_a_task_pause_from_the_dashboard_and_bad_input(store: Queue) -> None:
    admin = logged_in("view_job", "pause_queue", username="ops")
    admin.post(BASE + "queues/pause/", {"queue": "default", "task": t.add.name})
    assert [(p.queue, p.task, p.until) for p in store.pauses()] == [("default", t.add.name, None)]
    response = admin.post(BASE + "queues/pause/", {"queue": "", "task": ""}, follow=True)
    assert "Nothing was paused: queue must be a non-empty str" in response.content.decode()
    response = admin.post(BASE + "queues/pause/", {"queue": "mail", "duration": "forever"}, follow=True)
    assert "Nothing was paused" in response.content.decode()
    assert len(store.pauses()) == 1
    page = admin.get(BASE).content.decode()
    assert f"task {t.add.name} in default" in page
    admin.post(BASE + "queues/resume/", {"queue": "default", "task": t.add.name})
    assert store.pauses() == []


# ------------------------------------------------------------------------------------------ the metric


def test_the_paused_metric(store: Queue) -> None:
    store.put("m", queue="mail")
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_queue_paused", queue="mail", task="") == 0
    store.pause("mail")
    store.pause("default", task=t.add.name)
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_queue_paused", queue="mail", task="") == 1
    assert value(found, "queue_max_queue_paused", queue="default", task=t.add.name) == 1
    assert value(found, "queue_max_queue_paused", queue="default", task="") == 0
