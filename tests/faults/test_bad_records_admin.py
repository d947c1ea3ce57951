"""The Django layer on a store with a bad record (one whose bytes do not decode, or decode to wrong types):
the admin dashboard and ``queue_stats`` answer (they used to answer 500 and print a traceback: counting jobs
per queue decodes scheduled and running records), and "delete all dead letters" deletes a bad dead letter
with the others (it used to answer 500)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from queue_max_django import conf
from queue_max_django.engine import Queue, State
from tests.faults.corrupt import RECORD_DAMAGE

BASE = "/admin/queue_max_django/job/"
DAMAGE = {name: RECORD_DAMAGE[name] for name in ("garbage-record", "name-a-list", "queue-an-int")}

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Queue]:
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "store", "MAX_RETRIES": 0}):
        conf.reset()
        yield conf.get_queue()
    conf.reset()


def waiting_with_bad_records(store: Queue, damage: object) -> list[int]:
    """Two healthy jobs each scheduled and running in queue "mail", and a bad one of each. -> the bad."""
    for n in range(2):
        store.put({"args": [n], "kwargs": {}}, queue="mail", delay=3600)
    bad_scheduled = store.put({"args": [9], "kwargs": {}}, queue="mail", delay=3600)
    running = [store.put({"args": [n], "kwargs": {}}, queue="mail") for n in range(3)]
    for job_id in running:
        assert store.claim(job_id) is not None
    for job_id in (bad_scheduled, running[0]):
        damage(store, job_id)  # type: ignore[operator]
    return [bad_scheduled, running[0]]


def dead_letter(store: Queue, n: int) -> int:
    job_id = store.put({"args": [n], "kwargs": {}}, name="t.task", max_retries=0)
    record = store.claim(job_id)
    assert record is not None
    record.nack(ValueError(f"x{n}"))
    return job_id


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_the_dashboard_answers_with_bad_waiting_records(
    admin_client: Client, store: Queue, damage: object
) -> None:
    bad = waiting_with_bad_records(store, damage)

    response = admin_client.get(BASE)

    assert response.status_code == 200
    row = response.context["queues"]["mail"]  # the queue's counts by state, and its pause (admin/pausing.py)
    assert row["paused"] is None
    shown = {state: count.value for state, count in row.items() if state != "paused"}
    # The counters still count the scheduled job whose record broke behind their back (nothing read it
    # yet); the running jobs' records are read, so the bad one is left out and quarantined.
    assert shown == {"pending": 0, "scheduled": 3, "running": 2}
    assert store.job(bad[1]).error_type == "Corrupted"  # type: ignore[union-attr]
    store.jobs(State.SCHEDULED)  # a listing meets the bad scheduled record: quarantined, counts rebuilt
    response = admin_client.get(BASE)
    row = response.context["queues"]["mail"]  # the queue's counts by state, and its pause (admin/pausing.py)
    assert row["paused"] is None
    shown = {state: count.value for state, count in row.items() if state != "paused"}
    assert shown == {"pending": 0, "scheduled": 2, "running": 2}
    assert all(store.job(job_id).error_type == "Corrupted" for job_id in bad)  # type: ignore[union-attr]
    assert store.verify() == []


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_queue_stats_answers_with_bad_waiting_records(store: Queue, damage: object) -> None:
    waiting_with_bad_records(store, damage)
    out = StringIO()

    call_command("queue_stats", "--json", stdout=out)

    stats = json.loads(out.getvalue())
    assert stats["queues"]["mail"] == {"pending": 0, "scheduled": 3, "running": 2}  # as on the dashboard
    assert store.stats()["failed"] == 1  # the bad running one, moved to the dead letters as the count met it
    text = StringIO()
    call_command("queue_stats", stdout=text)
    assert "mail" in text.getvalue()


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_delete_all_dead_letters_deletes_a_bad_one_too(
    admin_client: Client, store: Queue, damage: object
) -> None:
    ids = [dead_letter(store, n) for n in range(3)]
    damage(store, ids[1])  # type: ignore[operator]
    waiting = store.put(1)

    confirm = admin_client.post(f"{BASE}failed/action/", {"action": "delete", "scope": "matching"})
    assert confirm.status_code == 200
    as_of = confirm.content.decode().split('name="as_of" value="')[1].split('"')[0]
    done = admin_client.post(
        f"{BASE}failed/action/",
        {"action": "delete", "scope": "matching", "confirmed": "yes", "as_of": as_of},
        follow=True,
    )

    assert done.status_code == 200
    assert [str(message) for message in done.context["messages"]] == ["Deleted 3 jobs."]
    assert all(store.job(job_id) is None for job_id in ids)
    assert store.job(waiting).state is State.PENDING  # type: ignore[union-attr]
    assert store.stats()["failed"] == 0 and store.verify() == []


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_bad_dead_letter_is_deleted_from_its_page(
    admin_client: Client, store: Queue, damage: object
) -> None:
    """Its page shows the dead letter it became; the delete button there deletes it by id."""
    bad = dead_letter(store, 1)
    damage(store, bad)  # type: ignore[operator]

    page = admin_client.get(f"{BASE}{bad}/")
    assert page.status_code == 200 and "Corrupted" in page.content.decode()
    confirm = admin_client.post(f"{BASE}failed/action/", {"action": "delete", "ids": [bad]})
    assert confirm.status_code == 200
    done = admin_client.post(
        f"{BASE}failed/action/", {"action": "delete", "ids": [bad], "confirmed": "yes"}, follow=True
    )

    assert [str(message) for message in done.context["messages"]] == ["Deleted 1 job."]
    assert store.job(bad) is None and store.verify() == []
