"""queue_health: exit 0 or a CommandError (status 1) with a one-line reason, from the worker registry and
the queues' lag as the store holds them, on both stores. Old heartbeats and old jobs are written through a
Queue whose clock stands in the past, so nothing sleeps. (A real worker's heartbeat: tests/worker.)"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue
from tests.engine.locations import StoreLocation

Configure = Callable[..., override_settings]


@pytest.fixture
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max():
        yield get_queue()


@pytest.fixture
def past(location: StoreLocation, store: Queue) -> Callable[[float], Queue]:
    """``past(seconds)``: a Queue on the test's store whose clock reads that many seconds ago."""
    opened: list[Queue] = []

    def make(seconds: float) -> Queue:
        q = location.open_queue(clock=lambda: time.time() - seconds)
        opened.append(q)
        return q

    yield make  # type: ignore[misc]
    for q in opened:
        q.close()


def health(*argv: str) -> str:
    out = io.StringIO()
    call_command("queue_health", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def unhealthy(*argv: str) -> str:
    with pytest.raises(CommandError) as caught:
        health(*argv)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("unhealthy: ")
    return message.removeprefix("unhealthy: ")


def report(q: Queue, worker_id: str, **fields: Any) -> None:
    q.report_worker(worker_id, stale_after=10.0, pid=1, host="box", threads=1, **fields)


def test_no_worker_ever_is_unhealthy(store: Queue) -> None:
    assert unhealthy() == "no worker is registered in this store (is queue_worker running?)"
    data = json.loads(_json_of_failure())
    assert data == {
        "ok": False,
        "store": store.path,
        "workers": 0,
        "newest_heartbeat_age": None,
        "lag": {},
        "reason": "no worker is registered in this store (is queue_worker running?)",
    }


def _json_of_failure(*argv: str) -> str:
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("queue_health", "--json", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_heartbeat_within_the_limit_is_healthy(store: Queue, past: Callable[[float], Queue]) -> None:
    report(past(120), "old")
    reason = unhealthy()
    assert reason.startswith("no worker heartbeat within 60 s (the newest is 12")  # 120.x s old
    assert health("--heartbeat-within", "300").startswith("OK: 1 live worker(s), the newest heartbeat 12")

    report(store, "fresh")
    assert health().startswith("OK: 1 live worker(s), the newest heartbeat 0.")
    data = json.loads(health("--json"))
    assert data["ok"] is True and data["workers"] == 1 and data["reason"] is None
    assert 0 <= data["newest_heartbeat_age"] < 60
    assert {w.worker_id for w in store.workers(include_dead=True)} == {"old", "fresh"}


def test_a_named_queue_needs_a_live_worker_serving_it(store: Queue) -> None:
    report(store, "mailer", queues=("mail",))
    assert health("--queue", "mail").startswith("OK: ")
    assert unhealthy("--queue", "mail", "--queue", "reports") == (
        "no live worker serves the queue 'reports' (1 live serve others)"
    )
    report(store, "any")  # queues=None: serves every queue
    assert health("--queue", "reports").startswith("OK: ")


def test_max_lag_fails_on_an_old_waiting_job(store: Queue, past: Callable[[float], Queue]) -> None:
    report(store, "w")
    past(90).put("old", queue="mail")
    store.put("new", queue="reports")
    assert health().startswith("OK: ")  # no --max-lag: lag is reported, not judged
    data = json.loads(health("--json"))
    assert set(data["lag"]) == {"mail", "reports"} and 90 <= data["lag"]["mail"] < 150
    reason = unhealthy("--max-lag", "30")
    assert reason.startswith("the oldest waiting job of queue 'mail' has waited ")
    assert reason.endswith(" s, over 30 s")
    assert health("--max-lag", "30", "--queue", "reports").startswith("OK: ")  # that queue alone
    assert health("--max-lag", "600").startswith("OK: ")

    store.get(timeout=0, queues=["mail"]).ack()  # the old job ran: nothing waits long now
    assert health("--max-lag", "30").startswith("OK: ")


@pytest.mark.parametrize("argv", [("--max-lag", "0"), ("--heartbeat-within", "soon"), ("--max-lag", "inf")])
def test_bad_seconds_are_refused_before_the_store_is_read(argv: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="is not a number of seconds above 0"):
        call_command("queue_health", *argv)
