"""queue_health: exit 0 or a CommandError (status 1) with a one-line reason, from the worker registry and
the queues' lag as the store holds them, on both stores. Old heartbeats and old jobs are written through a
Queue whose clock stands in the past, so nothing sleeps. (A real worker's heartbeat: tests/worker.)"""

from __future__ import annotations

import io
import json
import socket
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


def report(q: Queue, worker_id: str, *, host: str = "box", **fields: Any) -> None:
    q.report_worker(worker_id, stale_after=10.0, pid=1, host=host, threads=1, **fields)


def test_no_worker_ever_is_unhealthy(store: Queue) -> None:
    assert unhealthy() == "no worker is registered in this store (is queue_worker running?)"
    data = json.loads(_json_of_failure())
    assert data == {
        "ok": False,
        "store": store.path,
        "workers": 0,
        "newest_heartbeat_age": None,
        "lag": {},
        "unserved": [],
        "warnings": [],
        "replica": None,
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


# ------------------------------------------------------------------------------ one replica (liveness probes)


def test_one_replica_is_judged_by_its_worker_id_whatever_the_others_do(
    store: Queue, past: Callable[[float], Queue]
) -> None:
    report(store, "pod-a-1/0")
    report(past(120), "pod-b-1/0")  # pod b hangs: the store still has a live worker
    assert health().startswith("OK: 1 live worker(s), ")  # the store-wide check cannot see it
    assert unhealthy("--worker-id", "pod-b-1").startswith(
        "no worker process of worker 'pod-b-1' reported within 60 s (the newest is 12"
    )
    assert health("--worker-id", "pod-a-1").startswith("OK: 1 live worker(s) of worker 'pod-a-1', ")
    assert unhealthy("--worker-id", "pod-a") == (  # an id is matched whole, not as a prefix of another
        "no worker process of worker 'pod-a' is registered (is queue_worker running with --worker-id pod-a?)"
    )
    data = json.loads(_json_of_failure("--worker-id", "pod-b-1"))
    assert (data["ok"], data["replica"], data["workers"]) == (False, "worker 'pod-b-1'", 0)
    assert 120 <= data["newest_heartbeat_age"] < 180


def test_a_hung_process_of_a_replica_whose_siblings_report_is_unhealthy(
    store: Queue, past: Callable[[float], Queue]
) -> None:
    report(store, "pod-a-1/0")
    report(past(90), "pod-a-1/1")  # its main loop stopped beating; its supervisor does not see it
    reason = unhealthy("--worker-id", "pod-a-1")
    assert reason.startswith("worker process 'pod-a-1/1' of worker 'pod-a-1' has not reported for 9")
    assert reason.endswith(" s (over 60 s) while its siblings do: it is hung")
    assert health("--worker-id", "pod-a-1", "--heartbeat-within", "300").startswith("OK: 2 live worker(s) ")


def test_this_host_judges_the_workers_on_this_host_and_not_an_earlier_killed_run(
    store: Queue, past: Callable[[float], Queue]
) -> None:
    here = socket.gethostname()
    report(store, "elsewhere-1/0", host="elsewhere")
    assert unhealthy("--this-host") == (
        f"no worker process of host {here!r} is registered (is queue_worker running on this host?)"
    )
    report(past(90), f"{here}-7/0", host=here)  # an earlier queue_worker here, killed: left in the registry
    assert unhealthy("--this-host").startswith(f"no worker process of host {here!r} reported within 60 s")
    report(store, f"{here}-8/0", host=here)  # its successor reports: the leftover is not a hung sibling
    assert health("--this-host").startswith(f"OK: 1 live worker(s) of host {here!r}, ")


def test_processes_counts_the_processes_of_the_replica_that_report(store: Queue) -> None:
    report(store, "pod-a-1/0")
    assert health("--worker-id", "pod-a-1", "--processes", "1").startswith("OK: ")
    assert unhealthy("--worker-id", "pod-a-1", "--processes", "2") == (
        "1 of the 2 worker processes of worker 'pod-a-1' reported within 60 s"
    )
    report(store, "pod-a-1/1")
    assert health("--worker-id", "pod-a-1", "--processes", "2").startswith("OK: 2 live worker(s) ")
    with pytest.raises(CommandError, match=r"^--processes goes with --worker-id or --this-host\.$"):
        health("--processes", "2")


# ------------------------------------------------------------------------------ queues no worker serves


def run(*argv: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("queue_health", *argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_queue_no_live_worker_serves_is_a_warning_then_an_outage(
    store: Queue, past: Callable[[float], Queue]
) -> None:
    report(store, "mailer/0", queues=("mail",))
    store.put("soon", queue="reports", delay=3600)  # scheduled only: nothing waits yet
    out, err = run()
    assert out.startswith("OK: ")
    assert err == "Warning: no live worker serves the queue 'reports' (0 waiting, 1 scheduled)\n"

    past(400).put("old", queue="reports")  # ready for 400 s, and nobody takes it
    reason = unhealthy()
    assert reason.startswith("a job has waited 4") and reason.endswith(
        " s in the queue 'reports', which no live worker serves (over 300 s)"
    )
    out, err = run("--unserved-after", "600")  # not yet an outage: a warning
    assert out.startswith("OK: ") and err.startswith(
        "Warning: no live worker serves the queue 'reports' (1 waiting, 1 scheduled; the oldest has waited 4"
    )
    out, err = run("--worker-id", "mailer")  # one replica's probe: restarting it would not help
    assert out.startswith("OK: 1 live worker(s) of worker 'mailer'") and err.startswith("Warning: ")
    data = json.loads(_json_of_failure())
    (row,) = data["unserved"]
    assert (row["queue"], row["pending"], row["scheduled"]) == ("reports", 1, 1) and row["waited"] >= 400
    assert data["warnings"] == [err.removeprefix("Warning: ").rstrip("\n")]

    report(store, "reporter/0", queues=("reports",))
    out, err = run()
    assert out.startswith("OK: 2 live worker(s)") and err == ""
