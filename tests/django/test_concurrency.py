"""Concurrency limits from the Django layer (docs/howto/concurrency-limits.md): ``@task(concurrency=N,
concurrency_key=...)`` and ``QUEUE_MAX["QUEUE_CONCURRENCY"]`` stored with each job at enqueue and held by
the claim, on both real stores; bad input refused before anything is written; the check E028; the counts
in ``queue_stats``, the dashboard's data and the metrics."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.test import override_settings

from queue_max_django import DuplicateJob
from queue_max_django.conf import get_queue
from queue_max_django.conf.checks import check_settings
from queue_max_django.engine import QueueEmpty
from queue_max_django.running.registry import registry
from queue_max_django.tasks import task

Configure = Callable[..., override_settings]


@task(name="limits.export", concurrency=2)
def export(report: int) -> int:
    return report


@task(name="limits.sync", concurrency=1, concurrency_key="account")
def sync(account: str, full: bool = False) -> str:
    return account


@task(name="limits.by_tenant", concurrency=1, concurrency_key=lambda order: f"tenant-{order['tenant']}")
def ship(order: dict[str, Any]) -> int:
    return int(order["id"])


@task(name="limits.media", queue="media")
def resize(image: int) -> int:
    return image


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max(QUEUES=["default", "media"], QUEUE_CONCURRENCY={"media": 2}):
        yield


def claim_all() -> list[Any]:
    """Every job a consumer may claim now (none is finished)."""
    queue = get_queue()
    taken = []
    while True:
        try:
            taken.append(queue.get(timeout=0))
        except QueueEmpty:
            return taken


def test_a_task_limit_holds_and_a_finished_job_frees_its_slot() -> None:
    for report in range(5):
        export.delay(report)
    first = claim_all()
    assert sorted(record.payload["args"][0] for record in first) == [0, 1]
    assert get_queue().concurrency_limits() == {"task:limits.export": {"running": 2, "waiting": 3}}
    first[0].ack()
    assert [record.payload["args"][0] for record in claim_all()] == [2]


def test_a_keyed_limit_holds_per_key_and_keys_take_turns() -> None:
    for _ in range(3):
        sync.delay("acme")
    sync.delay(account="globex", full=True)
    sync.delay(7)  # an int key is its digits
    taken = claim_all()
    accounts = [r.payload["args"][0] if r.payload["args"] else r.payload["kwargs"]["account"] for r in taken]
    assert sorted(map(str, accounts)) == ["7", "acme", "globex"]
    assert get_queue().concurrency_limits()["task:limits.sync:acme"] == {"running": 1, "waiting": 2}


def test_a_key_function_of_the_calls_arguments() -> None:
    ship.delay({"id": 1, "tenant": "a"})
    ship.delay({"id": 2, "tenant": "a"})
    ship.delay({"id": 3, "tenant": "b"})
    assert sorted(r.payload["args"][0]["id"] for r in claim_all()) == [1, 3]
    assert get_queue().job(ship.delay({"id": 4, "tenant": "c"}).job_id).state.value == "pending"


def test_a_queue_limit_from_the_settings() -> None:
    for image in range(4):
        resize.delay(image)
    assert len(claim_all()) == 2
    assert get_queue().concurrency_limits() == {"queue:media": {"running": 2, "waiting": 2}}


def test_map_puts_each_item_under_its_own_key() -> None:
    handles = sync.map(["a", "b", "a"])
    jobs = [get_queue().job(handle.job_id) for handle in handles]
    assert [job.payload["args"][0] for job in jobs] == ["a", "b", "a"]  # type: ignore[union-attr]
    assert sorted(r.payload["args"][0] for r in claim_all()) == ["a", "b"]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"concurrency": 0}, ValueError, "concurrency must be an int from 1 to 1000000, not 0"),
        ({"concurrency": "2"}, TypeError, "concurrency must be an int >= 1, not '2'"),
        ({"concurrency": True}, TypeError, "concurrency must be an int"),
        ({"concurrency": 2, "concurrency_key": "customer"}, ValueError, "names no parameter of the task"),
        ({"concurrency_key": "account"}, ValueError, "concurrency_key needs concurrency=N"),
        ({"concurrency": 2, "concurrency_key": 5}, TypeError, r"a parameter name \(str\) or a callable"),
    ],
)
def test_bad_options_are_refused_when_the_task_is_declared(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    def job(account: str) -> None:
        return None

    with pytest.raises(error, match=message):
        task(name="limits.bad", **options)(job)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: sync.delay(["a"]), TypeError, "argument 'account', must be a str or an int, not list"),
        (lambda: sync.delay(""), ValueError, "a concurrency key must be a non-empty str"),
        (lambda: ship.delay({"id": 1}), ValueError, "concurrency_key function raised KeyError"),
        (lambda: ship.map([{"id": 1, "tenant": 1}, {"id": 2}]), ValueError, "function raised KeyError"),
    ],
)
def test_a_bad_key_is_refused_before_anything_is_written(
    call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()
    assert get_queue().stats()["total"] == 0


def test_a_key_function_returning_a_non_string() -> None:
    counted = task(name="limits.counted", concurrency=1, concurrency_key=lambda n: n)(lambda n: n)
    with pytest.raises(TypeError, match="must return a str, not int"):
        counted.delay(3)
    assert get_queue().stats()["total"] == 0


def test_queue_stats_shows_the_counts() -> None:
    sync.delay("acme")
    sync.delay("acme")
    claim_all()
    out = io.StringIO()
    call_command("queue_stats", "--json", stdout=out)
    assert json.loads(out.getvalue())["concurrency_limits"] == {
        "task:limits.sync:acme": {"running": 1, "waiting": 1}
    }
    out = io.StringIO()
    call_command("queue_stats", stdout=out)
    assert "Concurrency limits" in out.getvalue() and "task:limits.sync:acme" in out.getvalue()


@pytest.mark.store_neutral
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([("media", 8)], "is [('media', 8)] (list)"),
        ({"media": 0}, "gives queue 'media' the limit 0"),
        ({"media": "8"}, "gives queue 'media' the limit '8'"),
        ({"": 8}, "has the key '', which is not a queue name"),
    ],
)
def test_a_malformed_queue_concurrency_is_check_e028(queue_max: Configure, value: Any, problem: str) -> None:
    with queue_max(QUEUE_CONCURRENCY=value):
        found = [m for m in check_settings() if m.id == "queue_max_django.E028"]
    assert found == [
        Error(
            "QUEUE_MAX['QUEUE_CONCURRENCY'] must be a dict of queue name -> an int from 1 to 1000000: it "
            f"{problem}.",
            hint="Set QUEUE_MAX['QUEUE_CONCURRENCY'] to a dict such as {'media': 8}, or remove it "
            "(no limit).",
            id="queue_max_django.E028",
        )
    ]


@task(name="limits.sync_once", concurrency=1, concurrency_key="account", unique_key=True)
def sync_once(account: str, full: bool = False) -> str:
    return account


def test_a_unique_task_with_a_keyed_limit_skips_duplicates_and_holds_its_limit() -> None:
    """One job per distinct call (the key is the task and its arguments), at most one running per account,
    on every store: the limits place the job and its key is judged among the jobs of that placement."""
    first = sync_once.delay("acme")
    again = sync_once.delay("acme")
    full = sync_once.delay("acme", full=True)
    other = sync_once.delay("globex")
    assert again.deduplicated and again.job_id == first.job_id
    assert not full.deduplicated and not other.deduplicated
    taken = claim_all()
    assert sorted(r.payload["args"][0] for r in taken) == ["acme", "globex"]
    assert get_queue().concurrency_limits()["task:limits.sync_once:acme"] == {"running": 1, "waiting": 1}
    handles = sync_once.map(["acme", "initech", "initech"])
    assert [h.deduplicated for h in handles] == [False, False, True]  # acme's first job runs: not held
    assert get_queue().stats()["total"] == 5
    job = get_queue().job(first.job_id)
    assert job is not None and job.unique is not None and job.unique.key.startswith("limits.sync_once:")


def test_a_unique_task_in_a_limited_queue_is_deduplicated_and_limited(queue_max: Configure) -> None:
    @task(name="limits.unique_in_limited", queue="media", unique_key=lambda image: f"image-{image}")
    def once(image: int) -> int:
        return image

    try:
        assert [m for m in check_settings() if m.id.startswith("queue_max_django.")] == []
        handles = [once.delay(image) for image in (1, 2, 3, 1)]
        assert [h.deduplicated for h in handles] == [False, False, False, True]
        assert len(claim_all()) == 2  # the queue's limit of 2
        assert get_queue().concurrency_limits() == {"queue:media": {"running": 2, "waiting": 1}}
        with pytest.raises(DuplicateJob, match="unique key 'image-3'"):
            once.using(on_duplicate="raise").delay(3)
    finally:
        registry.unregister("limits.unique_in_limited")
