"""The admin's Schedules page (issue 34): code-declared and kept schedules in one list, the add/edit form
checked against the task's signature with a preview of the next five runs, pause until, disable, enable, run
now and delete, each in Django's admin log and behind the ``Schedule`` model's own permissions."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Callable, Iterator

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.test import Client, override_settings
from django.utils import timezone

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue
from queue_max_django.periodic import periodic_task
from queue_max_django.scheduling import editing
from tests.admin_clients import logged_in

pytestmark = pytest.mark.django_db
Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/schedule/"
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
SEND = "tests.testapp.tasks.send_mail"
FORM = {"name": "mail ops", "task": SEND, "args": '["ops@example.com"]', "kwargs": '{"subject": "hi"}',
        "interval": "", "cron": "0 6 * * *", "tz": "Europe/Berlin", "queue": "", "priority": "",
        "misfire_grace_time": "60", "enabled": "on"}  # fmt: skip


@pytest.fixture(autouse=True)
def store(queue_max: Configure, scratch_registry: None) -> Iterator[Queue]:  # its tasks leave with the test
    @periodic_task(interval=300, name="code.cleanup")
    def cleanup() -> None: ...

    with queue_max():
        yield get_queue()


def html(response: object) -> str:
    assert response.status_code == 200, response.status_code  # type: ignore[attr-defined]
    return response.content.decode()  # type: ignore[attr-defined]


def test_add_with_a_checked_form_preview_and_the_admin_log(admin_client: Client, store: Queue) -> None:
    page = html(admin_client.get(BASE))
    assert "code.cleanup" in page and "every 300s" in page and 'data-testid="add-schedule"' in page
    bad = html(admin_client.post(f"{BASE}add/", {**FORM, "args": "[]"}))
    assert "the arguments do not fit" in bad and "missing a required argument: &#x27;to&#x27;" in bad
    assert "Not JSON" in html(admin_client.post(f"{BASE}add/", {**FORM, "args": "[oops"}))
    assert "the minute field" in html(admin_client.post(f"{BASE}add/", {**FORM, "cron": "61 * * * *"}))
    preview = html(admin_client.post(f"{BASE}add/", {**FORM, "_preview": "1"}))
    table = preview.split('data-testid="preview">')[1].split("</table>")[0]
    shown = [dt.datetime.fromisoformat(when) for when in re.findall(r'datetime="([^"]+)"', table)]
    assert len(shown) == 5 and {(when.astimezone(BERLIN).hour, when.minute) for when in shown} == {(6, 0)}
    assert store.schedule_names() == []  # a preview saves nothing

    response = admin_client.post(f"{BASE}add/", {**FORM, "_save": "1"})
    assert response.status_code == 302 and response["Location"] == f"{BASE}mail%20ops/change/"
    kept = store.schedule("mail ops")
    assert kept is not None and kept.cron == "0 6 * * *" and kept.tz == "Europe/Berlin"
    assert kept.changed_by == "admin user admin" and kept.args == ["ops@example.com"]
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id) == (ADDITION, "mail ops")
    assert "cron '0 6 * * *'" in entry.get_change_message()
    assert entry.get_admin_url() == f"{BASE}mail%20ops/change/"
    assert "a schedule named &#x27;mail ops&#x27; exists already" in html(
        admin_client.post(f"{BASE}add/", {**FORM, "_save": "1"})
    )
    assert "taken by a schedule declared in code" in html(
        admin_client.post(f"{BASE}add/", {**FORM, "name": "code.cleanup", "_save": "1"})
    )


def test_edit_pause_enable_run_now_and_delete(admin_client: Client, store: Queue) -> None:
    editing.add(store, editing.build("nightly", SEND, args=["a@b"], interval=3600))
    url = f"{BASE}nightly/change/"
    page = html(admin_client.get(url))
    assert 'data-testid="schedule-form"' in page and 'value="nightly"' in page
    assert page.split('data-testid="next-runs">')[1].split("</table>")[0].count("<time") == 5

    response = admin_client.post(url, {**FORM, "name": "ignored", "interval": "60", "cron": "", "tz": "",
                                       "_save": "1"})  # fmt: skip
    assert response.status_code == 302
    kept = store.schedule("nightly")
    assert (
        kept is not None and kept.interval == 60.0 and kept.cron is None and kept.args == ["ops@example.com"]
    )
    assert store.schedule("ignored") is None  # the name cannot be changed

    action = f"{BASE}nightly/action/"
    until = timezone.localtime() + dt.timedelta(hours=2)  # the form's time is in the current zone
    admin_client.post(action, {"action": "pause", "until": until.strftime("%Y-%m-%dT%H:%M")})
    paused = store.schedule("nightly")
    assert paused is not None and paused.paused_until == until.replace(second=0, microsecond=0).timestamp()
    assert "paused until" in html(admin_client.get(BASE))
    admin_client.post(action, {"action": "disable"})
    assert store.schedule("nightly").enabled is False  # type: ignore[union-attr]
    admin_client.post(action, {"action": "enable"})
    kept = store.schedule("nightly")
    assert kept is not None and kept.enabled and kept.paused_until is None

    admin_client.post(action, {"action": "run"})
    (job,) = store.jobs("pending", name=SEND)  # type: ignore[arg-type]
    assert job.metadata["_schedule"] == "nightly" and job.payload["args"] == ["ops@example.com"]
    assert f"/admin/queue_max_django/job/{job.job_id}/" in html(admin_client.get(f"{BASE}nightly/change/"))

    confirm = html(admin_client.post(action, {"action": "delete"}))
    assert 'data-testid="confirm-question"' in confirm and store.schedule("nightly") is not None
    response = admin_client.post(action, {"action": "delete", "confirmed": "yes"})
    assert response.status_code == 302 and store.schedule("nightly") is None
    messages = [entry.get_change_message() for entry in LogEntry.objects.order_by("id")]
    assert [entry.action_flag for entry in LogEntry.objects.order_by("id")] == [CHANGE] * 6
    zone = timezone.get_current_timezone_name()
    assert messages[1:] == [f"Paused until {until:%Y-%m-%d %H:%M} ({zone}).",
                            "Disabled (paused until resumed).", "Enabled: it ticks from its next due time.",
                            f"Ran now: job {job.job_id}.", "Deleted schedule."]  # fmt: skip


def test_a_code_declared_schedule_can_be_paused_but_not_edited_or_deleted(
    admin_client: Client, store: Queue
) -> None:
    url = f"{BASE}code.cleanup/change/"
    page = html(admin_client.get(url))
    assert 'data-testid="schedule-form"' not in page and "declared in code" in page
    assert 'data-testid="delete"' not in page
    assert admin_client.post(url, FORM).status_code == 405
    action = f"{BASE}code.cleanup/action/"
    admin_client.post(action, {"action": "disable"})
    assert "disabled" in html(admin_client.get(BASE))
    response = admin_client.post(action, {"action": "delete", "confirmed": "yes"}, follow=True)
    assert "cannot be removed" in html(response)
    admin_client.post(action, {"action": "enable"})
    assert store.schedule("code.cleanup").enabled  # type: ignore[union-attr]
    assert admin_client.get(f"{BASE}no-such/change/").status_code == 404


def test_permissions_of_their_own(store: Queue) -> None:
    editing.add(store, editing.build("nightly", SEND, args=["a@b"], interval=3600))
    viewer = logged_in("view_schedule", username="viewer")
    assert viewer.get(BASE).status_code == 200
    page = html(viewer.get(f"{BASE}nightly/change/"))
    assert 'data-testid="schedule-form"' not in page and 'data-testid="schedule-actions"' not in page
    assert viewer.get(f"{BASE}add/").status_code == 403
    assert viewer.post(f"{BASE}nightly/action/", {"action": "disable"}).status_code == 403
    assert logged_in("view_job", username="jobs").get(BASE).status_code == 403
    changer = logged_in("change_schedule", username="changer")
    assert changer.post(f"{BASE}nightly/action/", {"action": "disable"}).status_code == 302
    assert changer.post(f"{BASE}nightly/action/", {"action": "delete", "confirmed": "yes"}).status_code == 403
    assert store.schedule("nightly") is not None
    adder = logged_in("add_schedule", "view_schedule", username="adder")
    assert adder.post(f"{BASE}add/", {**FORM, "_save": "1"}).status_code == 302
    deleter = logged_in("delete_schedule", "view_schedule", username="deleter")
    assert deleter.post(f"{BASE}nightly/action/", {"action": "delete", "confirmed": "yes"}).status_code == 302
    assert store.schedule_names() == ["mail ops"]
