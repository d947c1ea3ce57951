"""Engine events fired by the ``Queue`` (issue 3): which operation fires which event with which fields,
``batch()`` in one thread only, a raising callback that never breaks the operation, the pending ALERT, and
nothing at all when nobody listens. (The ``Events`` object alone is tested in test_events.py.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import (
    ALERT,
    EVENTS,
    JOB_ENQUEUED,
    JOB_FAILED,
    JOB_LOST,
    JOB_RETRIED,
    JOB_STARTED,
    JOB_SUCCEEDED,
    Events,
    Queue,
    QueueEmpty,
    State,
)
from tests.engine.conftest import FakeClock

pytestmark = [pytest.mark.contract, pytest.mark.flow_events]

LOGGER = "queue_max_django.engine.events"
LEASE = 30.0  # the fixture queue's lease_time


class Recorder:
    """Listens to every event of a queue; ``calls`` holds (event, fields) in order."""

    def __init__(self, q: Queue, events: tuple[str, ...] = EVENTS) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.threads: list[str] = []
        for event in events:
            q.events.on(event, self._callback(event))

    def _callback(self, event: str) -> Any:
        def callback(**fields: Any) -> None:
            self.calls.append((event, fields))
            self.threads.append(threading.current_thread().name)

        return callback

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def heard(queue: Queue) -> Recorder:
    return Recorder(queue)


def test_put_and_put_many_fire_one_enqueued_event_per_job(queue: Queue, heard: Recorder) -> None:
    """flow_events: put() fires JOB_ENQUEUED(job_id, queue, name); put_many() one per job, in id order."""
    job_id = queue.put({"n": 1}, queue="mail", name="send")
    assert heard.take() == [(JOB_ENQUEUED, {"job_id": job_id, "queue": "mail", "name": "send"})]
    ids = queue.put_many([1, 2, 3])
    assert heard.take() == [(JOB_ENQUEUED, {"job_id": i, "queue": "default", "name": None}) for i in ids]
    assert queue.stats()["pending"] == 4


def test_get_and_ack_fire_started_and_succeeded(queue: Queue, heard: Recorder) -> None:
    """flow_events: get() fires JOB_STARTED(job_id, queue, name, attempt); ack() fires JOB_SUCCEEDED(job_id,
    queue, name, result)."""
    job_id = queue.put("payload", queue="mail", name="send")
    heard.take()
    record = queue.get(0)
    fields = {"job_id": job_id, "queue": "mail", "name": "send"}
    assert heard.take() == [(JOB_STARTED, fields | {"attempt": 1})]
    record.ack(result={"sent": True})
    assert heard.take() == [(JOB_SUCCEEDED, fields | {"result": {"sent": True}})]
    job = queue.job(job_id)
    assert job is not None and job.state is State.DONE


def test_nack_fires_retried_then_failed(queue: Queue, heard: Recorder) -> None:
    """flow_events: a nack with retries left fires JOB_RETRIED(job_id, queue, name, error, state); the one
    that dead-letters the job fires JOB_FAILED with the same fields; JOB_STARTED's attempt counts them."""
    job_id = queue.put("x", name="flaky", max_retries=1)
    fields = {"job_id": job_id, "queue": "default", "name": "flaky"}
    heard.take()
    queue.get(0).nack(RuntimeError("first"))
    assert heard.take() == [
        (JOB_STARTED, fields | {"attempt": 1}),
        (JOB_RETRIED, fields | {"error": "first", "state": State.PENDING}),
    ]
    assert queue.job(job_id).state is State.PENDING  # type: ignore[union-attr]
    record = queue.get(0)
    record.nack(RuntimeError("second"))
    assert heard.take() == [
        (JOB_STARTED, fields | {"attempt": 2}),
        (JOB_FAILED, fields | {"error": "second", "state": State.FAILED}),
    ]
    assert queue.job(job_id).state is State.FAILED  # type: ignore[union-attr]


def test_each_nack_outcome(queue: Queue, heard: Recorder) -> None:
    """flow_events: the retried event's state says where the job went (pending, or scheduled after a delay);
    a permanent nack fires JOB_FAILED."""
    ids = queue.put_many(["a", "b", "c"], name="t")
    heard.take()
    outcomes = []
    for kwargs in ({"delay": 10.0}, {"permanent": True}, {}):  # the pending one last: it could come again
        record = queue.get(0)
        record.nack("boom", **kwargs)
        outcomes.append((record.job_id, heard.take()[1]))
    by_id = dict(outcomes)
    assert sorted(by_id) == sorted(ids)
    events = [(event, fields["state"], fields["error"]) for _, (event, fields) in outcomes]
    assert events == [
        (JOB_RETRIED, State.SCHEDULED, "boom"),
        (JOB_FAILED, State.FAILED, "boom"),
        (JOB_RETRIED, State.PENDING, "boom"),
    ]
    for job_id, (_, fields) in outcomes:
        job = queue.job(job_id)
        assert job is not None and job.state is fields["state"]
        assert fields["job_id"] == job_id and fields["name"] == "t" and fields["queue"] == "default"


def test_lease_expiry_recovery_fires_retried_or_failed(
    queue: Queue, heard: Recorder, clock: FakeClock
) -> None:
    """flow_events: recover() of an expired lease fires JOB_RETRIED (or JOB_FAILED when it was the last
    attempt) with error "lease expired", then JOB_LOST for the same job (what the Django layer logs)."""
    again = queue.put("again", name="slowpoke", max_retries=3)
    last = queue.put("last", name="slowpoke", max_retries=0)
    queue.get(0)
    queue.get(0)
    heard.take()
    clock.advance(LEASE)
    assert queue.recover() == 2
    heard_in_order = heard.take()
    lost = [fields for event, fields in heard_in_order if event == JOB_LOST]
    ended = (call for call in heard_in_order if call[0] != JOB_LOST)
    calls = sorted(ended, key=lambda call: call[1]["job_id"])
    assert {fields["job_id"]: (fields["state"], fields["attempt"]) for fields in lost} == {
        again: (State.PENDING, 1),
        last: (State.FAILED, 1),
    }
    for fields in lost:  # each JOB_LOST comes after its job's JOB_RETRIED or JOB_FAILED
        position = heard_in_order.index((JOB_LOST, fields))
        assert any(f["job_id"] == fields["job_id"] for _, f in heard_in_order[:position])
    expected = {again: (JOB_RETRIED, State.PENDING), last: (JOB_FAILED, State.FAILED)}
    assert [call[1]["job_id"] for call in calls] == sorted(expected)
    for event, fields in calls:
        assert (event, fields["state"]) == expected[fields["job_id"]]
        assert fields["error"] == "lease expired"
        assert (fields["queue"], fields["name"]) == ("default", "slowpoke")
        job = queue.job(fields["job_id"])
        assert job is not None and job.state is fields["state"]


def test_held_back_jobs_fire_nothing(queue: Queue, heard: Recorder) -> None:
    """flow_events: only the jobs get() hands out fire JOB_STARTED; jobs a limit holds back fire nothing."""
    queue.set_rate_limit("name:slow", "2/m")
    ids = queue.put_many(list(range(5)), name="slow")
    heard.take()
    with pytest.raises(QueueEmpty):
        while True:
            queue.get(0)
    calls = heard.take()
    assert [event for event, _ in calls] == [JOB_STARTED, JOB_STARTED]
    assert {fields["job_id"] for _, fields in calls} < set(ids)


def test_batch_silences_per_job_events_in_its_own_thread_only(queue: Queue, heard: Recorder) -> None:
    """flow_events: inside ``with q.events.batch():`` this thread's operations fire no per-job events (the
    jobs are still written); another thread's operations at the same time still fire theirs; afterwards
    events fire again."""
    other_thread: list[int] = []
    with queue.events.batch():
        quiet = [queue.put("a", name="bulk"), *queue.put_many(["b", "c"], name="bulk")]
        record = queue.get(0)
        record.ack()
        queue.get(0).nack("boom", permanent=True)

        def put_elsewhere() -> None:
            other_thread.append(queue.put("elsewhere"))

        worker = threading.Thread(target=put_elsewhere, name="not-batching")
        worker.start()
        worker.join(5)
    assert heard.take() == [(JOB_ENQUEUED, {"job_id": other_thread[0], "queue": "default", "name": None})]
    assert heard.threads == ["not-batching"]
    stats = queue.stats()
    assert (stats["pending"], stats["done"], stats["failed"]) == (2, 1, 1)
    assert all(queue.job(job_id) is not None for job_id in quiet)
    queue.put("after")
    assert [event for event, _ in heard.take()] == [JOB_ENQUEUED]


@pytest.mark.parametrize("event", [JOB_ENQUEUED, JOB_STARTED, JOB_SUCCEEDED, JOB_RETRIED, JOB_FAILED])
def test_a_raising_callback_is_logged_and_the_operation_stands(
    queue: Queue, event: str, caplog: pytest.LogCaptureFixture
) -> None:
    """flow_events: a callback that raises is logged (with its traceback) and the others still run; the
    operation that fired it returns normally and its change is on disk."""
    seen: list[str] = []

    def broken(**fields: Any) -> None:
        raise ValueError("a broken listener")

    queue.events.on(event, broken)
    queue.events.on(event, lambda **fields: seen.append(event))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        job_id = queue.put("x", max_retries=0 if event == JOB_FAILED else 3)
        record = queue.get(0)
        if event == JOB_SUCCEEDED:
            record.ack(result=1)
        elif event in (JOB_RETRIED, JOB_FAILED):
            record.nack("boom")
    assert seen == [event]
    errors = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "a broken listener" in caplog.text
    expected = {
        JOB_ENQUEUED: State.RUNNING,
        JOB_STARTED: State.RUNNING,
        JOB_SUCCEEDED: State.DONE,
        JOB_RETRIED: State.PENDING,
        JOB_FAILED: State.FAILED,
    }[event]
    job = queue.job(job_id)
    assert job is not None and job.state is expected


@pytest.fixture
def alerting(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue(alert_threshold=2, retry_backoff=1.0)  # the default backoff: a retried nack waits


def test_alert_fires_when_pending_exceeds_the_threshold_at_most_once_a_second(alerting: Queue) -> None:
    """flow_events: with alert_threshold=2 and an ALERT listener, the put that brings pending over 2 fires
    ALERT(type="pending", pending, threshold); further puts within the second fire no more; a put a second
    later fires again. batch() does not silence alerts."""
    alerts = Recorder(alerting, (ALERT,))
    with alerting.events.batch():
        alerting.put_many([1, 2, 3])
    assert alerts.take() == [(ALERT, {"type": "pending", "pending": 3, "threshold": 2})]
    alerting.put(4)
    alerting.put_many([5, 6])
    assert alerts.take() == []
    time.sleep(1.05)
    alerting.put(7)
    assert alerts.take() == [(ALERT, {"type": "pending", "pending": 7, "threshold": 2})]
    assert alerting.stats()["pending"] == 7


def test_alert_fires_when_the_threshold_is_crossed_soon_after_a_calm_check(alerting: Queue) -> None:
    """flow_events: pending goes over the threshold by a put shortly after a put that found it below: that
    put fires the alert (no alert fired within the last second, so none is due to be throttled)."""
    alerts = Recorder(alerting, (ALERT,))
    alerting.put(1)  # pending 1: calm
    alerting.put_many([2, 3, 4])  # pending 4 > 2
    assert alerts.take() == [(ALERT, {"type": "pending", "pending": 4, "threshold": 2})]


class CountingEvents(Events):
    """An ``Events`` that counts every emit(), even ones with no listener."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[str] = []

    def emit(self, event: str, /, **fields: Any) -> None:
        self.emitted.append(event)
        super().emit(event, **fields)


def test_with_no_listener_nothing_is_emitted(
    alerting: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flow_events: with nobody listening, no operation emits anything, and an alert threshold with no ALERT
    listener costs no stats() read on put."""
    counting = CountingEvents()
    alerting.events = counting
    stats_calls: list[int] = []
    real_stats = alerting.stats
    monkeypatch.setattr(alerting, "stats", lambda: stats_calls.append(1) or real_stats())
    alerting.put_many(list(range(5)), max_retries=1)
    alerting.put("one")
    alerting.get(0).ack()
    alerting.get(0).nack("retry")
    alerting.get(0).nack("fail", permanent=True)
    alerting.get(0)
    clock.advance(LEASE)
    assert alerting.recover() == 1
    assert counting.emitted == []
    assert stats_calls == []
    counting.on(JOB_SUCCEEDED, lambda **fields: None)
    alerting.get(0).ack()
    assert counting.emitted == [JOB_SUCCEEDED]
