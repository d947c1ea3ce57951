"""Each signal is sent from the engine's events with its arguments; a raising receiver is logged."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.dispatch import Signal
from django.test import override_settings

from queue_max_django import signals
from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from queue_max_django.testing import run_queued
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
Received = list[tuple[str, Any, dict[str, Any]]]

ALL = {
    "job_enqueued": signals.job_enqueued,
    "job_started": signals.job_started,
    "job_succeeded": signals.job_succeeded,
    "job_retried": signals.job_retried,
    "job_failed": signals.job_failed,
    "queue_alert": signals.queue_alert,
}


@pytest.fixture(autouse=True)
def _clean() -> None:
    t.ATTEMPTS.clear()


@pytest.fixture
def received() -> Iterator[Received]:
    """Every signal sent while the test runs: (signal name, sender, keyword arguments without ``signal``)."""
    seen: Received = []
    receivers: list[tuple[Signal, Callable[..., None]]] = []
    for label, signal in ALL.items():

        def receiver(sender: Any, label: str = label, **kwargs: Any) -> None:
            kwargs.pop("signal")
            seen.append((label, sender, kwargs))

        signal.connect(receiver, weak=False)
        receivers.append((signal, receiver))
    yield seen
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def test_a_successful_job_sends_enqueued_started_succeeded(queue_max: Configure, received: Received) -> None:
    with queue_max():
        job_id = t.add.delay(2, 3).job_id
        run_queued()
    name = "tests.testapp.tasks.add"
    common = {"job_id": job_id, "queue": "default", "name": name}
    assert received == [
        ("job_enqueued", name, common),
        ("job_started", name, {**common, "attempt": 1}),
        ("job_succeeded", name, {**common, "result": 5}),
    ]


def test_a_retried_then_failed_job_sends_retried_and_failed(queue_max: Configure, received: Received) -> None:
    with queue_max(MAX_RETRIES=1):
        job_id = t.fail_always.delay("boom").job_id
        run_queued()
    name = "tests.testapp.tasks.fail_always"
    common = {"job_id": job_id, "queue": "default", "name": name}
    labels = [label for label, _, _ in received]
    assert labels == ["job_enqueued", "job_started", "job_retried", "job_started", "job_failed"]
    assert all(sender == name for _, sender, _ in received)
    assert received[1][2] == {**common, "attempt": 1}
    assert received[3][2] == {**common, "attempt": 2}
    retried, failed = received[2][2], received[4][2]
    assert {k: retried[k] for k in common} == common and {k: failed[k] for k in common} == common
    assert retried["state"] == State.SCHEDULED or retried["state"] == State.PENDING
    assert failed["state"] == State.FAILED
    assert (retried["error"], failed["error"]) == ("boom", "boom")


def test_the_immediate_mode_sends_every_signal_of_its_job(queue_max: Configure, received: Received) -> None:
    with queue_max(IMMEDIATE=True):
        job_id = t.send_mail.delay("ann@example.com").job_id
        failed_id = t.fail_permanent.delay().job_id
    assert [(label, sender) for label, sender, _ in received] == [
        ("job_enqueued", "tests.testapp.tasks.send_mail"),
        ("job_started", "tests.testapp.tasks.send_mail"),
        ("job_succeeded", "tests.testapp.tasks.send_mail"),
        ("job_enqueued", "tests.testapp.tasks.fail_permanent"),
        ("job_started", "tests.testapp.tasks.fail_permanent"),
        ("job_failed", "tests.testapp.tasks.fail_permanent"),
    ]
    assert received[2][2] == {
        "job_id": job_id,
        "queue": "mail",
        "name": "tests.testapp.tasks.send_mail",
        "result": "ann@example.com: hello",
    }
    assert received[5][2]["job_id"] == failed_id and received[5][2]["state"] == State.FAILED


def test_map_sends_one_enqueued_per_job(queue_max: Configure, received: Received) -> None:
    with queue_max():
        ids = [result.job_id for result in t.add.map([1, 2, 3], 10)]
    assert sorted(kwargs["job_id"] for label, _, kwargs in received if label == "job_enqueued") == sorted(ids)


def test_an_engine_job_without_a_name_is_sent_with_sender_none(
    queue_max: Configure, received: Received
) -> None:
    with queue_max():
        job_id = get_queue().put({"raw": True})
    assert received == [("job_enqueued", None, {"job_id": job_id, "queue": "default", "name": None})]


def test_queue_alert_over_the_threshold(queue_max: Configure, received: Received) -> None:
    with queue_max(ALERT_THRESHOLD=1):
        t.add.delay(1, 1)
        assert [label for label, _, _ in received] == ["job_enqueued"]
        t.add.delay(1, 2)
    assert received[-1] == ("queue_alert", None, {"kind": "pending", "pending": 2, "threshold": 1})


def test_a_sender_filter_gets_only_its_task(queue_max: Configure) -> None:
    seen: list[int] = []

    def only_add(sender: Any, job_id: int, **kwargs: Any) -> None:
        seen.append(job_id)

    signals.job_enqueued.connect(only_add, sender=t.add.name)
    try:
        with queue_max():
            add_id = t.add.delay(1, 2).job_id
            t.echo.delay(1)
    finally:
        signals.job_enqueued.disconnect(only_add, sender=t.add.name)
    assert seen == [add_id]


def test_a_raising_receiver_is_logged_and_the_job_still_finishes(
    queue_max: Configure, received: Received, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.job_succeeded.connect(broken)
    signals.job_started.connect(broken)
    try:
        with queue_max(), caplog.at_level(logging.ERROR, logger="queue_max_django.signals"):
            result = t.add.delay(2, 2)
            run_queued()
            job = get_queue().job(result.job_id)
    finally:
        signals.job_succeeded.disconnect(broken)
        signals.job_started.disconnect(broken)
    assert job is not None and (job.state, job.result) == (State.DONE, 4)
    assert [label for label, _, _ in received] == ["job_enqueued", "job_started", "job_succeeded"]
    records = [r for r in caplog.records if r.name == "queue_max_django.signals"]
    assert [r.getMessage() for r in records] == [
        f"the {event} receiver {__name__}.{broken.__qualname__} raised; the job goes on"
        for event in ("job_started", "job_succeeded")
    ]
    assert all(r.exc_info is not None and isinstance(r.exc_info[1], RuntimeError) for r in records)


def test_no_receiver_means_no_send(queue_max: Configure, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("send_robust called with nobody listening")

    for signal in ALL.values():
        monkeypatch.setattr(signal, "send_robust", fail)
    with queue_max():
        t.add.delay(1, 1)
        assert [o.state for o in run_queued()] == [State.DONE]


def test_only_the_process_queue_is_connected(queue_max: Configure, received: Received, tmp_path: Any) -> None:
    from queue_max_django.engine import Queue

    other = Queue(tmp_path / "other")
    try:
        other.put({"x": 1}, name="tests.testapp.tasks.add")
    finally:
        other.close()
    assert received == []
