"""The Django layer over one odd row or record: the admin's pages and the read commands answer on a
PostgreSQL job whose partition key or metadata was written past the engine (they answered 500 and printed a
traceback), ``queue_check`` names it; a dead letter quarantined as corrupted is never retried by the admin or
``queue_retry`` (skipped and counted); and "all matching" takes only a finite ``as_of`` that is not after
now (``nan`` and ``inf`` deleted every dead letter, newer ones too; ``-inf`` answered 500)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, QueueCorrupted, State
from queue_max_django.engine.job import CORRUPTED
from tests.engine.pgprobe import PgProbe
from tests.engine.probes import LmdbProbe
from tests.faults.corrupt import GARBAGE
from tests.faults.test_odd_rows import break_worker_report

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"
ON_POSTGRES = pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0, SHARDS=1):
        yield get_queue()


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def messages_after(client: Client, response: object) -> list[str]:
    assert response.status_code == 302, response.status_code  # type: ignore[attr-defined]
    shown = client.get(response["Location"])  # type: ignore[index]
    return [str(message) for message in shown.context["messages"]]


def dead_letter(store: Queue, n: int) -> int:
    job_id = store.put({"args": [n], "kwargs": {}}, name="t.task", max_retries=0)
    record = store.claim(job_id)
    assert record is not None
    record.nack(ValueError(f"x{n}"))
    return job_id


def corrupted_dead_letter(store: Queue, store_kind: str) -> int:
    """A job whose payload does not decode, quarantined by a claim: a dead letter of error type Corrupted."""
    job_id = store.put({"args": [0], "kwargs": {}}, name="t.task", priority=9)
    probe = PgProbe(store) if store_kind == "postgres" else LmdbProbe(store)
    probe.break_payload(job_id)
    with pytest.raises(QueueCorrupted):
        store.get(0)
    job = store.job(job_id)
    assert job is not None and job.corrupted
    return job_id


# ---------------------------------------------------------------------------- odd columns (PostgreSQL)


@ON_POSTGRES
@pytest.mark.parametrize("state", [State.PENDING, State.FAILED], ids=lambda state: state.value)
def test_pages_and_read_commands_answer_on_a_partition_key_that_does_not_decode(
    admin_client: Client, store: Queue, state: State
) -> None:
    bad = store.put({"args": [1], "kwargs": {}}, name="t.task", partition_key="k", max_retries=0)
    if state is State.FAILED:
        record = store.claim(bad)
        assert record is not None
        record.nack("boom")
    healthy = store.put({"args": [2], "kwargs": {}}, name="t.task")
    probe = PgProbe(store)
    for table in ("qm_jobs", "qm_finished"):
        probe.conn.execute(f"UPDATE {table} SET partition_key = %s WHERE id = %s", (GARBAGE, bad))

    for url in (BASE, f"{BASE}panels/", f"{BASE}{state.value}/", f"{BASE}pending/", f"{BASE}{healthy}/"):
        assert admin_client.get(url).status_code == 200, url
    page = admin_client.get(f"{BASE}{bad}/")
    assert page.status_code == 200
    assert "partition key cannot be decoded" in page.content.decode()

    shown = call("queue_show", str(bad))
    assert "partition key cannot be decoded" in shown
    listed = call("queue_list", "--status", state.value)
    assert str(bad) in listed
    with pytest.raises(CommandError, match="1 problem"):
        call("queue_check")
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("queue_check", stdout=out)
    assert str(bad) in out.getvalue() and "partition key cannot be decoded" in out.getvalue()
    assert store.job(bad).state is state  # type: ignore[union-attr]  # reads moved nothing


@ON_POSTGRES
def test_a_worker_claim_quarantines_metadata_that_is_not_an_object_and_runs_the_rest(store: Queue) -> None:
    """``queue_worker --burst``: the job with metadata ``[1, 2]`` becomes a Corrupted dead letter, the
    others run (the claim used to raise ``ValueError``, which killed the worker's thread at every claim)."""
    bad = store.put({"args": [], "kwargs": {}}, name="t.task", priority=5, metadata={"step": 1})
    others = [store.put({"args": [n], "kwargs": {}}, name="t.unknown") for n in range(2)]
    probe = PgProbe(store)
    probe.conn.execute("UPDATE qm_jobs SET metadata = '[1, 2]'::jsonb WHERE id = %s", (bad,))

    record = None
    with pytest.raises(QueueCorrupted, match=str(bad)):
        record = store.get(0)
    assert record is None
    job = store.job(bad)
    assert job is not None and job.state is State.FAILED and job.error_type == CORRUPTED
    assert job.error is not None and "not a JSON object" in job.error
    assert {store.get(0).job_id, store.get(0).job_id} == set(others)
    assert store.verify() == []


# ---------------------------------------------------------------------------- Corrupted dead letters


def test_the_admin_skips_a_corrupted_dead_letter_on_retry_and_says_so(
    admin_client: Client, store: Queue, store_kind: str
) -> None:
    bad = corrupted_dead_letter(store, store_kind)
    fine = dead_letter(store, 1)
    before = store.job(bad)

    done = admin_client.post(
        f"{BASE}failed/action/",
        {"action": "retry", "scope": "selected", "ids": [bad, fine], "confirmed": "yes"},
    )
    said = messages_after(admin_client, done)
    assert len(said) == 1 and said[0].startswith("Retried 1 job. Skipped 1 job quarantined as corrupted")
    assert store.job(fine).state is State.PENDING  # type: ignore[union-attr]
    assert store.job(bad) == before  # still the dead letter, its explanation kept

    page = admin_client.get(f"{BASE}{bad}/").content.decode()
    assert "Corrupted" in page and 'value="Retry"' not in page  # no retry button on its page
    button = admin_client.post(f"{BASE}{bad}/retry/")
    said = messages_after(admin_client, button)
    assert said == [
        f"Job {bad} was quarantined as corrupted: its data did not decode, so nothing is left to run and it "
        f"cannot be retried. Nothing was done; read it, then delete it."
    ]
    assert store.job(bad) == before


def test_retry_all_matching_skips_a_corrupted_dead_letter(
    admin_client: Client, store: Queue, store_kind: str
) -> None:
    bad = corrupted_dead_letter(store, store_kind)
    fine = dead_letter(store, 1)
    done = admin_client.post(
        f"{BASE}failed/action/",
        {"action": "retry", "scope": "matching", "confirmed": "yes", "as_of": repr(store.now())},
    )
    said = messages_after(admin_client, done)
    assert len(said) == 1 and said[0].startswith("Retried 1 job. Skipped 1 job quarantined as corrupted")
    assert store.job(bad).corrupted and store.job(fine).state is State.PENDING  # type: ignore[union-attr]


def test_queue_retry_skips_a_corrupted_dead_letter_and_refuses_it_by_id(
    store: Queue, store_kind: str
) -> None:
    bad = corrupted_dead_letter(store, store_kind)
    fine = dead_letter(store, 1)
    before = store.job(bad)

    out = call("queue_retry", "--all")
    assert out.splitlines()[0] == "Retried 1 failed job."
    assert out.splitlines()[1].startswith(
        "Skipped 1 failed job quarantined as corrupted (error type Corrupted)"
    )
    assert store.job(fine).state is State.PENDING  # type: ignore[union-attr]
    assert store.job(bad) == before

    with pytest.raises(CommandError, match=f"job {bad} was quarantined as corrupted"):
        call("queue_retry", "--job-id", str(bad))
    assert store.job(bad) == before
    assert store.stats()["pending"] == 1 and store.stats()["failed"] == 1


# ---------------------------------------------------------------------------- as_of


@pytest.mark.parametrize("as_of", ["nan", "inf", "-inf", "1e400", "future", "", "soon"])
@pytest.mark.parametrize("action", ["delete", "retry"])
def test_all_matching_refuses_an_as_of_that_is_not_a_past_finite_time(
    admin_client: Client, store: Queue, as_of: str, action: str
) -> None:
    """``nan`` and ``inf`` made "delete all" purge every dead letter, those newer than the confirmation
    page too; ``-inf`` answered 500. Nothing is changed, and the message says why."""
    ids = [dead_letter(store, n) for n in range(3)]
    stats = store.stats()
    value = repr(store.now() + 3600) if as_of == "future" else as_of
    done = admin_client.post(
        f"{BASE}failed/action/", {"action": action, "scope": "matching", "confirmed": "yes", "as_of": value}
    )
    said = messages_after(admin_client, done)
    assert len(said) == 1 and said[0].startswith("The confirmation did not say when it was shown")
    assert [store.job(job_id).state for job_id in ids] == [State.FAILED] * 3  # type: ignore[union-attr]
    assert store.stats() == stats


def test_all_matching_with_the_confirmation_s_as_of_leaves_newer_dead_letters(
    admin_client: Client, store: Queue
) -> None:
    old = dead_letter(store, 1)
    confirm = admin_client.post(f"{BASE}failed/action/", {"action": "delete", "scope": "matching"})
    as_of = confirm.content.decode().split('name="as_of" value="')[1].split('"')[0]
    while store.now() <= float(as_of):  # the store's times are in microseconds
        pass
    new = dead_letter(store, 2)
    done = admin_client.post(
        f"{BASE}failed/action/", {"action": "delete", "scope": "matching", "confirmed": "yes", "as_of": as_of}
    )
    assert messages_after(admin_client, done) == ["Deleted 1 job."]
    assert store.job(old) is None and store.job(new).state is State.FAILED  # type: ignore[union-attr]


def test_the_dashboard_answers_with_a_worker_report_that_does_not_decode(
    admin_client: Client, store: Queue
) -> None:
    store.report_worker("w-bad", stale_after=60)
    store.report_worker("w-good", stale_after=60)
    break_worker_report(store, "w-bad", GARBAGE)
    for url in (BASE, f"{BASE}panels/"):
        response = admin_client.get(url)
        assert response.status_code == 200, url
    assert "w-good" in admin_client.get(f"{BASE}panels/").content.decode()


@ON_POSTGRES
def test_the_admin_answers_on_a_time_no_datetime_can_hold(admin_client: Client, store: Queue) -> None:
    """An enqueue time of year 287168 written by hand made the waiting list and the job's page answer 500."""
    job_id = store.put({"args": [], "kwargs": {}}, name="t.task")
    other = store.put({"args": [], "kwargs": {}}, name="t.task")
    probe = PgProbe(store)
    probe.conn.execute("UPDATE qm_jobs SET enqueued_us = 9000000000000000000 WHERE id = %s", (job_id,))
    for url in (BASE, f"{BASE}panels/", f"{BASE}pending/", f"{BASE}{job_id}/", f"{BASE}{other}/"):
        assert admin_client.get(url).status_code == 200, url
    assert str(other) in admin_client.get(f"{BASE}pending/").content.decode()
