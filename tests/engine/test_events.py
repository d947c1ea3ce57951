"""Engine callbacks (engine/events.py): registration, ordering, failures logged not raised, batch()."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from queue_max_django.engine.events import (
    ALERT,
    EVENTS,
    JOB_CANCELLED,
    JOB_ENQUEUED,
    JOB_FAILED,
    JOB_LOST,
    JOB_RETRIED,
    JOB_STARTED,
    JOB_SUCCEEDED,
    PER_JOB_EVENTS,
    Events,
)

LOGGER = "queue_max_django.engine.events"


class Recorder:
    """A callback that records its calls, under a name."""

    def __init__(self, name: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.name = name
        self.calls = calls

    def __call__(self, **fields: Any) -> None:
        self.calls.append((self.name, fields))


@pytest.fixture
def events() -> Events:
    return Events()


def test_event_names() -> None:
    assert (JOB_ENQUEUED, JOB_STARTED, JOB_SUCCEEDED, JOB_RETRIED, JOB_FAILED, ALERT) == (
        "job_enqueued",
        "job_started",
        "job_succeeded",
        "job_retried",
        "job_failed",
        "alert",
    )
    assert EVENTS == (
        JOB_ENQUEUED, JOB_STARTED, JOB_SUCCEEDED, JOB_RETRIED, JOB_FAILED, JOB_CANCELLED, JOB_LOST, ALERT
    )  # fmt: skip
    assert frozenset(EVENTS) - PER_JOB_EVENTS == {ALERT}


def test_callbacks_get_the_fields_as_keywords_in_registration_order(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    for name in ("first", "second", "third"):
        events.on(JOB_SUCCEEDED, Recorder(name, calls))
    events.emit(JOB_SUCCEEDED, job_id=7, queue="default")
    assert calls == [(name, {"job_id": 7, "queue": "default"}) for name in ("first", "second", "third")]


def test_only_the_emitted_event_is_delivered(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    events.on(JOB_FAILED, Recorder("failed", calls))
    events.emit(JOB_SUCCEEDED, job_id=1)
    assert calls == []
    events.emit(JOB_FAILED, job_id=2)
    assert calls == [("failed", {"job_id": 2})]


def test_on_returns_the_callback_and_works_as_a_decorator(events: Events) -> None:
    seen: list[int] = []

    def callback(**fields: Any) -> None:
        seen.append(fields["job_id"])

    assert events.on(JOB_STARTED, callback) is callback

    @events.on(JOB_RETRIED)
    def decorated(**fields: Any) -> None:
        seen.append(-fields["job_id"])

    assert callable(decorated)
    events.emit(JOB_STARTED, job_id=1)
    events.emit(JOB_RETRIED, job_id=2)
    assert seen == [1, -2]


def test_registering_twice_keeps_one(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    callback = Recorder("once", calls)
    events.on(JOB_ENQUEUED, callback)
    events.on(JOB_ENQUEUED, callback)
    events.emit(JOB_ENQUEUED)
    assert calls == [("once", {})]


def test_off_stops_a_callback(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    first, second = Recorder("first", calls), Recorder("second", calls)
    events.on(JOB_FAILED, first)
    events.on(JOB_FAILED, second)
    assert events.off(JOB_FAILED, first) is True
    assert events.off(JOB_FAILED, first) is False
    assert events.off(JOB_SUCCEEDED, second) is False  # registered for another event
    events.emit(JOB_FAILED, job_id=3)
    assert calls == [("second", {"job_id": 3})]


def test_off_a_bound_method(events: Events) -> None:
    class Listener:
        def __init__(self) -> None:
            self.count = 0

        def on_alert(self, **fields: Any) -> None:
            self.count += 1

    listener = Listener()
    events.on(ALERT, listener.on_alert)
    events.emit(ALERT)
    assert events.off(ALERT, listener.on_alert)  # a new bound-method object, equal to the registered one
    events.emit(ALERT)
    assert listener.count == 1


def test_a_field_may_be_called_event(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    events.on(ALERT, Recorder("alert", calls))
    events.emit(ALERT, event="backlog", waiting=5000)
    assert calls == [("alert", {"event": "backlog", "waiting": 5000})]


@pytest.mark.parametrize("name", ["job_done", "JOB_FAILED", "", "alerts"])
def test_unknown_event_names_raise_listing_the_known_ones(events: Events, name: str) -> None:
    def callback(**fields: Any) -> None:
        pass

    for call in (
        lambda: events.on(name, callback),
        lambda: events.on(name),
        lambda: events.off(name, callback),
        lambda: events.listening(name),
        lambda: events.emit(name),
    ):
        with pytest.raises(ValueError, match="unknown event") as info:
            call()
        assert all(known in str(info.value) for known in EVENTS)


def test_a_callback_must_be_callable(events: Events) -> None:
    with pytest.raises(TypeError, match="callable"):
        events.on(JOB_FAILED, "print")  # type: ignore[call-overload]


def test_a_raising_callback_is_logged_and_swallowed(events: Events, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def broken(**fields: Any) -> None:
        raise RuntimeError("callback bug")

    events.on(JOB_SUCCEEDED, Recorder("before", calls))
    events.on(JOB_SUCCEEDED, broken)
    events.on(JOB_SUCCEEDED, Recorder("after", calls))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        events.emit(JOB_SUCCEEDED, job_id=9)
    assert [name for name, _ in calls] == ["before", "after"]
    [record] = caplog.records
    assert record.name == LOGGER
    assert record.levelno == logging.ERROR
    assert JOB_SUCCEEDED in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


def test_base_exceptions_are_not_swallowed(events: Events) -> None:
    def interrupted(**fields: Any) -> None:
        raise KeyboardInterrupt

    events.on(JOB_STARTED, interrupted)
    with pytest.raises(KeyboardInterrupt):
        events.emit(JOB_STARTED)


def test_listening(events: Events) -> None:
    def callback(**fields: Any) -> None:
        pass

    assert not any(events.listening(event) for event in EVENTS)
    events.on(JOB_FAILED, callback)
    assert events.listening(JOB_FAILED)
    assert not events.listening(JOB_SUCCEEDED)
    events.off(JOB_FAILED, callback)
    assert not events.listening(JOB_FAILED)


def test_emit_with_no_listener_calls_nothing(events: Events) -> None:
    for event in EVENTS:
        events.emit(event, job_id=1)  # nothing registered: nothing to call, nothing raised


def test_registering_during_emit_takes_effect_on_the_next_emit(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    late = Recorder("late", calls)

    def registrar(**fields: Any) -> None:
        calls.append(("registrar", fields))
        events.on(JOB_ENQUEUED, late)
        events.off(JOB_ENQUEUED, registrar)

    events.on(JOB_ENQUEUED, registrar)
    events.emit(JOB_ENQUEUED, n=1)
    assert calls == [("registrar", {"n": 1})]
    events.emit(JOB_ENQUEUED, n=2)
    assert calls == [("registrar", {"n": 1}), ("late", {"n": 2})]


def test_registration_from_many_threads_loses_nothing(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    recorders = [Recorder(str(i), calls) for i in range(200)]
    start = threading.Barrier(4)

    def register(chunk: list[Recorder]) -> None:
        start.wait(timeout=10)
        for recorder in chunk:
            events.on(JOB_STARTED, recorder)
            events.emit(JOB_STARTED)

    threads = [threading.Thread(target=register, args=(recorders[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    calls.clear()
    events.emit(JOB_STARTED)
    assert sorted(int(name) for name, _ in calls) == list(range(200))


# ------------------------------------------------------------------ batch()


def test_batch_suppresses_per_job_events_but_not_alerts(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    for event in EVENTS:
        events.on(event, Recorder(event, calls))
    with events.batch():
        assert events.batching
        for event in EVENTS:
            events.emit(event)
        assert [events.listening(event) for event in EVENTS] == [event == ALERT for event in EVENTS]
    assert calls == [(ALERT, {})]
    assert not events.batching
    events.emit(JOB_ENQUEUED)
    assert calls == [(ALERT, {}), (JOB_ENQUEUED, {})]
    assert events.listening(JOB_ENQUEUED)


def test_batch_nests(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    events.on(JOB_ENQUEUED, Recorder("enqueued", calls))
    with events.batch():
        with events.batch():
            events.emit(JOB_ENQUEUED, n=1)
        events.emit(JOB_ENQUEUED, n=2)  # still inside the outer batch
    events.emit(JOB_ENQUEUED, n=3)
    assert calls == [("enqueued", {"n": 3})]


def test_batch_ends_when_its_block_raises(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    events.on(JOB_FAILED, Recorder("failed", calls))
    with pytest.raises(ValueError, match="bulk"), events.batch():
        raise ValueError("bulk work failed")
    events.emit(JOB_FAILED)
    assert calls == [("failed", {})]


def test_batch_is_per_thread(events: Events) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    events.on(JOB_SUCCEEDED, Recorder("succeeded", calls))
    seen_in_thread: list[bool] = []

    def other_thread() -> None:
        seen_in_thread.append(events.batching)
        seen_in_thread.append(events.listening(JOB_SUCCEEDED))
        events.emit(JOB_SUCCEEDED, where="thread")

    with events.batch():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(timeout=10)
        events.emit(JOB_SUCCEEDED, where="main")
    assert seen_in_thread == [False, True]
    assert calls == [("succeeded", {"where": "thread"})]


def test_batch_is_per_events_object() -> None:
    one, two = Events(), Events()
    calls: list[tuple[str, dict[str, Any]]] = []
    one.on(JOB_STARTED, Recorder("one", calls))
    two.on(JOB_STARTED, Recorder("two", calls))
    with one.batch():
        one.emit(JOB_STARTED)
        two.emit(JOB_STARTED)
    assert calls == [("two", {})]
