"""The admin pages stay usable when a job's bytes on disk are broken: the damage is shown, the other jobs
are listed, and nothing answers 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client, override_settings

from queue_max_django import conf
from queue_max_django.engine import Queue
from tests.faults.corrupt import garbage_payload, garbage_record

BASE = "/admin/queue_max_django/job/"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Queue]:
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "store"}):
        conf.reset()
        yield conf.get_queue()
    conf.reset()


def test_a_job_whose_payload_does_not_decode_is_listed_and_shown_as_damaged(
    admin_client: Client, store: Queue
) -> None:
    good = store.put({"args": [1, 2], "kwargs": {}}, name="tests.testapp.tasks.add")
    bad = store.put({"args": [3, 4], "kwargs": {}}, name="tests.testapp.tasks.add")
    garbage_payload(store, bad)

    listing = admin_client.get(f"{BASE}pending/")
    detail = admin_client.get(f"{BASE}{bad}/")

    assert listing.status_code == 200
    assert str(good) in listing.content.decode() and str(bad) in listing.content.decode()
    assert detail.status_code == 200
    assert (
        'data-testid="damage"' in detail.content.decode() and "cannot be decoded" in detail.content.decode()
    )


def test_a_job_whose_record_does_not_decode_is_a_dead_letter_once_a_page_meets_it(
    admin_client: Client, store: Queue
) -> None:
    """The pending list that meets it leaves it out and moves it to the dead letters (nothing answers
    500); its page is then that dead letter's, saying what was wrong; cancel no longer applies to it."""
    good = store.put({"args": [1, 2], "kwargs": {}}, name="tests.testapp.tasks.add")
    bad = store.put({"args": [3, 4], "kwargs": {}}, name="tests.testapp.tasks.add")
    garbage_record(store, bad)

    listing = admin_client.get(f"{BASE}pending/")
    dead = admin_client.get(f"{BASE}failed/")
    detail = admin_client.get(f"{BASE}{bad}/")
    cancel = admin_client.post(f"{BASE}{bad}/cancel/", follow=True)

    assert listing.status_code == 200 and str(good) in listing.content.decode()
    assert str(bad) not in listing.content.decode()
    assert dead.status_code == 200 and str(bad) in dead.content.decode()
    assert detail.status_code == 200
    assert "corrupted: job" in detail.content.decode() and "cannot be decoded" in detail.content.decode()
    assert cancel.status_code == 200
    shown = [str(message) for message in cancel.context["messages"]]
    assert len(shown) == 1 and "nothing was done" in shown[0]
    job = store.job(bad)
    assert job is not None and job.state.value == "failed" and job.error_type == "Corrupted"
    assert store.job(good) is not None and store.verify() == []  # nothing else was touched
