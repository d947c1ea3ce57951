"""The metrics view (``queue/metrics/`` through ``queue_max_django.urls``, tests/urls.py): Prometheus's text
format that prometheus_client's own parser reads, with the numbers the store holds, on both stores; the guard
(a bearer token, or the jobs' view permission); the settings check of the token and the check of the extra."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from queue_max_django.conf import get_queue
from queue_max_django.engine import Cancelled, Queue, State
from tests.admin_clients import logged_in

pytestmark = pytest.mark.django_db
Configure = Callable[..., override_settings]
TOKEN = "s3cret-token-for-the-scraper"
URL = "/queue/metrics/"


@pytest.fixture
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(METRICS_TOKEN=TOKEN):
        yield get_queue()


def scrape(client: Client | None = None, token: str | None = TOKEN) -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return (client or Client()).get(URL, headers=headers)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value, every sample of every family as prometheus_client parses them."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def test_the_metrics_are_what_the_store_holds(store: Queue) -> None:
    q = store
    q.put_many([1, 2, 3], queue="mail")
    q.put(4, queue="reports", priority=5)
    q.put(5, queue="reports", delay=600)
    q.get(timeout=0, queues=["mail"]).ack(result=1)
    q.get(timeout=0, queues=["mail"]).nack("boom", permanent=True)
    running = q.get(timeout=0, queues=["reports"])
    q.report_worker("w-1", stale_after=60.0, pid=7, host="box", threads=2, current_jobs=(running.job_id,),
                    processed=12, failed=3)  # fmt: skip
    q.set_circuit_breaker("payments", threshold=1)
    q.circuit_breakers()  # (created closed)
    q.set_rate_limit("api", "60/m")
    assert q.try_acquire("api")

    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")  # the library's own
    assert "no-cache" in response["Cache-Control"]
    found = samples(response.content.decode())

    stats = q.stats()
    for state in ("pending", "scheduled", "running", "done", "failed"):
        assert value(found, "queue_max_jobs", state=state) == stats[state]
    assert (stats["pending"], stats["scheduled"], stats["running"], stats["done"], stats["failed"]) == (
        1, 1, 1, 1, 1)  # fmt: skip
    for name, counts in q.queue_counts().items():
        for state, count in counts.items():
            assert value(found, "queue_max_queue_jobs", queue=name, state=state) == count
    assert value(found, "queue_max_enqueued_total") == stats["total"] == 5
    assert value(found, "queue_max_done_total") == 1 and value(found, "queue_max_failed_total") == 1
    assert value(found, "queue_max_queue_enqueued_total", queue="mail") == 3
    assert value(found, "queue_max_queue_enqueued_total", queue="reports") == 2
    ages = q.pending_ages()
    assert set(ages) == {"mail"}
    assert 0 <= value(found, "queue_max_oldest_pending_age_seconds", queue="mail") <= ages["mail"]
    assert value(found, "queue_max_oldest_pending_age_seconds", queue="reports") == 0  # none waits there
    assert value(found, "queue_max_workers") == 1
    assert value(found, "queue_max_worker_processed_total", worker="w-1") == 12
    assert value(found, "queue_max_worker_failed_total", worker="w-1") == 3
    assert value(found, "queue_max_worker_running_jobs", worker="w-1") == 1
    assert value(found, "queue_max_circuit_breaker_state", key="payments", state="closed") == 1
    assert value(found, "queue_max_circuit_breaker_state", key="payments", state="open") == 0
    assert 59 <= value(found, "queue_max_rate_limit_tokens", key="api") <= q.remaining("api") <= 60


def test_an_open_breaker_and_an_empty_store(store: Queue) -> None:
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_jobs", state="pending") == 0 and value(found, "queue_max_workers") == 0
    per_queue = {key: number for key, number in found.items() if key[0] == "queue_max_queue_jobs"}
    assert per_queue == {  # a fresh store: the default queue reads 0, not "No data"
        ("queue_max_queue_jobs", frozenset({("queue", "default"), ("state", state)})): 0
        for state in ("pending", "scheduled", "running")
    }
    assert value(found, "queue_max_oldest_pending_age_seconds", queue="default") == 0
    store.set_circuit_breaker("name:payments", threshold=1)  # the breaker of the jobs named "payments"
    store.put(1, name="payments")
    store.get(timeout=0).nack("down", permanent=True)  # the breaker's one allowed failure
    assert store.circuit_breakers()["name:payments"]["state"] == "open"
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_circuit_breaker_state", key="name:payments", state="open") == 1
    assert value(found, "queue_max_circuit_breaker_state", key="name:payments", state="closed") == 0


@pytest.mark.store_neutral  # refused before the store is read
@pytest.mark.parametrize(
    "token", [None, "wrong-token-of-the-same-kind", TOKEN + "x", TOKEN[:-1], ""], ids=repr
)
def test_without_the_token_the_scrape_is_refused(store: Queue, token: str | None) -> None:
    response = scrape(token=token)
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert b"queue_max" not in response.content


def test_a_user_needs_the_view_permission_of_the_jobs(store: Queue) -> None:
    assert scrape(logged_in(username="nobody"), token=None).status_code == 401
    response = scrape(logged_in("view_job", username="viewer", staff=False), token=None)
    assert response.status_code == 200 and b"queue_max_jobs{" in response.content


def test_a_request_with_a_bearer_token_is_judged_by_the_token_alone(store: Queue) -> None:
    viewer = logged_in("view_job", username="viewer", staff=False)
    assert scrape(viewer, token="wrong-token-of-the-same-kind").status_code == 401  # not the session's
    assert scrape(viewer, token=TOKEN).status_code == 200


def test_without_a_token_setting_only_users_with_the_permission_may_read(queue_max: Configure) -> None:
    with queue_max():
        get_queue()  # the store is there (a worker made it): the view never creates one
        assert scrape().status_code == 401  # a bearer token is no use when none is configured
        assert scrape(logged_in("view_job", username="viewer"), token=None).status_code == 200


@pytest.mark.store_neutral  # refused before the store is read
def test_only_get_and_head(store: Queue) -> None:
    assert Client().post(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


@pytest.mark.store_neutral  # a settings check
@pytest.mark.parametrize("token", ["short", 12345678901234567890, "has a space in it, sixteen+", "é" * 20])
def test_a_bad_token_setting_is_check_error_e026(queue_max: Configure, token: Any) -> None:
    with queue_max(METRICS_TOKEN=token):
        errors = [m for m in checks.run_checks(tags=["queue_max_django"]) if m.id == "queue_max_django.E026"]
    assert len(errors) == 1
    assert errors[0].msg.startswith("QUEUE_MAX['METRICS_TOKEN'] must be None or a string of at least 16 ")
    assert str(token) not in errors[0].msg or token == 12345678901234567890


@pytest.mark.store_neutral  # the URLconf check, and the import before the store is read
def test_without_the_extra_the_check_and_the_view_name_it(
    store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [m for m in checks.run_checks(tags=["urls"]) if m.id == "queue_max_django.E027"] == []
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    (error,) = [m for m in checks.run_checks(tags=["urls"]) if m.id == "queue_max_django.E027"]
    assert "[metrics]' (or prometheus-client>=0.20)" in error.hint
    with pytest.raises(ImproperlyConfigured, match=r"\[metrics\]' \(or prometheus-client"):
        scrape()


def test_the_done_and_failed_totals_are_counters_that_outlive_the_jobs(store: Queue) -> None:
    q = store
    q.put_many([1, 2, 3, 4])
    q.get(timeout=0).ack()
    q.get(timeout=0).ack()
    for _ in range(2):
        q.get(timeout=0).nack("boom", permanent=True)
    assert q.purge(State.DONE) == 2 and q.purge(State.FAILED) == 2  # the jobs are gone, the counts stay
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_jobs", state="done") == value(found, "queue_max_jobs", state="failed") == 0
    assert value(found, "queue_max_done_total") == 2 and value(found, "queue_max_failed_total") == 2
    kinds = {family.name: family.type for family in text_string_to_metric_families(scrape().content.decode())}
    assert kinds["queue_max_done"] == kinds["queue_max_failed"] == kinds["queue_max_enqueued"] == "counter"
    assert kinds["queue_max_queue_enqueued"] == "counter"
    assert value(found, "queue_max_queue_enqueued_total", queue="default") == 4


def test_every_known_queue_has_a_sample_of_each_per_queue_metric_even_when_nothing_waits(
    queue_max: Configure,
) -> None:
    """A Grafana panel over a per-queue gauge shows 0, not "No data", for a queue where nothing waits: each
    configured queue, and each queue the store has counted jobs of (here ``mail``: all of its jobs done)."""
    with queue_max(METRICS_TOKEN=TOKEN, QUEUES=["default", "mail", "reports"]):
        q = get_queue()
        q.put(1, queue="mail")
        q.get(timeout=0).ack()
        q.put(2, queue="default", delay=600)
        found = samples(scrape().content.decode())
    for name in ("default", "mail", "reports"):
        for state in ("pending", "running"):
            assert value(found, "queue_max_queue_jobs", queue=name, state=state) == 0
        assert value(found, "queue_max_oldest_pending_age_seconds", queue=name) == 0
    assert value(found, "queue_max_queue_jobs", queue="default", state="scheduled") == 1
    assert value(found, "queue_max_queue_jobs", queue="mail", state="scheduled") == 0
    assert value(found, "queue_max_queue_enqueued_total", queue="mail") == 1
    assert value(found, "queue_max_queue_enqueued_total", queue="reports") == 0
    queues = {dict(labels)["queue"] for name, labels in found if name == "queue_max_queue_jobs"}
    assert queues == {"default", "mail", "reports"}


def test_cancelled_jobs_are_their_own_counter_not_failures(store: Queue) -> None:
    """Issue 29: a job cancelled while it ran is kept with the dead letters but counted apart: the
    ``cancelled`` gauge and ``queue_max_cancelled_total``, never in ``failed`` nor ``queue_max_failed_total``
    (which a dead-letter alert watches)."""
    q = store
    for _ in range(3):
        job_id = q.put("work")
        record = q.get(timeout=0)
        assert q.request_cancel(job_id, by="alice").value == "requested"
        record.nack(Cancelled(f"job {job_id} was cancelled"), permanent=True)
    q.put("boom")
    q.get(timeout=0).nack("boom", permanent=True)
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_jobs", state="failed") == 1
    assert value(found, "queue_max_jobs", state="cancelled") == 3
    assert value(found, "queue_max_failed_total") == 1 and value(found, "queue_max_cancelled_total") == 3
    assert q.purge(State.FAILED) == 4  # the jobs go, the counters stay
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_jobs", state="cancelled") == 0
    assert value(found, "queue_max_failed_total") == 1 and value(found, "queue_max_cancelled_total") == 3
    kinds = {family.name: family.type for family in text_string_to_metric_families(scrape().content.decode())}
    assert kinds["queue_max_cancelled"] == "counter"


def test_duplicates_of_unique_keys_are_counted_skipped_and_replaced(store: Queue) -> None:
    """Issue 31: ``queue_max_unique_duplicates_total{outcome}``, counted by the store in each put's own
    transaction (every process once); a periodic tick's key (no ``unique_until``) is not counted."""
    q = store
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_unique_duplicates_total", outcome="skipped") == 0
    q.put("a", unique_key="k", unique_until="started")
    q.put("b", unique_key="k", unique_until="started")
    q.put("c", unique_key="k", unique_until="started", on_duplicate="replace")
    q.put("tick", unique_key="tick")
    q.put("tick", unique_key="tick")
    found = samples(scrape().content.decode())
    assert value(found, "queue_max_unique_duplicates_total", outcome="skipped") == 1
    assert value(found, "queue_max_unique_duplicates_total", outcome="replaced") == 1
