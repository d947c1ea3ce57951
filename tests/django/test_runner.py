"""runner.run_job: one claimed job -> look up, call, ack or nack (classified); and the run_queued helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Job, State
from queue_max_django.running.runner import (
    UNKNOWN_TASK_WAIT_MAX,
    TaskNotRegistered,
    run_job,
    unknown_task_message,
    unknown_task_wait,
)
from queue_max_django.testing import run_queued, wait_until_empty
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    t.ATTEMPTS.clear()
    with queue_max():
        yield


def job(job_id: int) -> Job:
    found = get_queue().job(job_id)
    assert found is not None
    return found


def test_a_successful_task_is_acked_with_its_return_value() -> None:
    result = t.add.delay(2, 3)
    outcome = run_job(get_queue().get(0))
    assert (outcome.job_id, outcome.state, outcome.result) == (result.job_id, State.DONE, 5)
    assert (job(result.job_id).state, job(result.job_id).result) == (State.DONE, 5)


def test_a_coroutine_task_is_run_to_completion() -> None:
    result = t.async_add.delay(2, 3)
    run_job(get_queue().get(0))
    assert job(result.job_id).result == 5


UNKNOWN = "myapp.tasks.added_in_the_next_release"


def put_unknown() -> tuple[int, float]:
    """A job of a task no module of this process registers, as a newer web process would enqueue it."""
    job_id = get_queue().put({"args": [], "kwargs": {}}, name=UNKNOWN)
    stored = job(job_id)
    return job_id, stored.enqueued_at


def test_a_job_of_a_task_this_process_lacks_waits_uncounted_for_a_worker_that_has_it(
    queue_max: Configure,
) -> None:
    with queue_max(UNKNOWN_TASK_GRACE=3600):
        job_id, enqueued_at = put_unknown()
        outcome = run_job(get_queue().get(0), clock=lambda: enqueued_at + 10)
        assert outcome.state is State.SCHEDULED
        assert isinstance(outcome.error, TaskNotRegistered)
        assert "restart or update your workers" in str(outcome.error)
        stored = job(job_id)
        # given back, not failed: no attempt counted, no error recorded; back in about the 10 s it waited
        assert (stored.state, stored.retries, stored.attempts, stored.error) == (State.SCHEDULED, 0, 0, None)
        assert stored.eta is not None and 9 < stored.eta - time.time() < 11


def test_a_job_of_a_task_this_process_lacks_is_a_dead_letter_once_its_grace_period_is_over(
    queue_max: Configure,
) -> None:
    with queue_max(UNKNOWN_TASK_GRACE=60):
        job_id, enqueued_at = put_unknown()
        outcome = run_job(get_queue().get(0), clock=lambda: enqueued_at + 60)
        assert outcome.state is State.FAILED
        stored = job(job_id)
        assert (stored.state, stored.retries, stored.attempts) == (State.FAILED, 1, 1)
        assert stored.error == (
            unknown_task_message(UNKNOWN)
            + " It waited QUEUE_MAX['UNKNOWN_TASK_GRACE'] (60 s) for a worker that has it."
        )
        assert stored.error_type == "queue_max_django.running.runner.TaskNotRegistered"
        assert stored.traceback is None  # nothing was raised: the error and its type say it all


@pytest.mark.parametrize(
    ("grace", "name", "final"),
    [(0, UNKNOWN, False), (3600, None, False), (3600, UNKNOWN, True)],
    ids=["grace-0", "no-name", "immediate"],
)
def test_a_job_of_an_unknown_task_is_a_dead_letter_at_once_without_grace_name_or_retries(
    queue_max: Configure, grace: float, name: str | None, final: bool
) -> None:
    with queue_max(UNKNOWN_TASK_GRACE=grace):
        job_id = get_queue().put({"args": [], "kwargs": {}}, name=name)
        outcome = run_job(get_queue().get(0), final=final)
        assert outcome.state is State.FAILED and isinstance(outcome.error, TaskNotRegistered)
        stored = job(job_id)
        assert (stored.state, stored.retries) == (State.FAILED, 1)
        assert stored.error == unknown_task_message(name)
        assert f"no task named {name!r} is registered in this process" in (stored.error or "")
        assert stored.error_type == "queue_max_django.running.runner.TaskNotRegistered"


def test_the_wait_for_an_unknown_task_doubles_within_bounds_and_ends_with_the_grace_period() -> None:
    assert [unknown_task_wait(age, 3600) for age in (0, 0.5, 1, 2, 4, 8)] == [1, 1, 1, 2, 4, 8]
    assert unknown_task_wait(1000, 3600) == UNKNOWN_TASK_WAIT_MAX  # 5 minutes at most
    assert unknown_task_wait(3500, 3600) == 100  # never past the end of the grace period
    assert unknown_task_wait(3600, 3600) is None and unknown_task_wait(5000, 3600) is None
    assert unknown_task_wait(0, 0) is None  # 0: a dead letter at once, as before the grace period
    # waiting as long as it has waited: from 0 s, the tries of the default hour number about 19
    age, tries = 0.0, 0
    while (wait := unknown_task_wait(age, 3600)) is not None:
        age, tries = age + wait, tries + 1
    assert 15 <= tries <= 25


def test_a_malformed_payload_is_a_dead_letter() -> None:
    job_id = get_queue().put(["not", "a", "call"], name="tests.testapp.tasks.add")
    run_job(get_queue().get(0))
    assert job(job_id).state is State.FAILED
    assert "is not a task call" in (job(job_id).error or "")


def test_an_unclassified_error_is_retried_with_the_queue_backoff() -> None:
    result = t.fail_always.delay("boom")
    outcome = run_job(get_queue().get(0))
    assert outcome.state is State.SCHEDULED
    stored = job(result.job_id)
    assert (stored.state, stored.retries, stored.error, stored.error_type) == (
        State.SCHEDULED,
        1,
        "boom",
        "ValueError",
    )
    assert stored.eta is not None and 0.7 <= stored.eta - time.time() <= 1.3  # RETRY_BACKOFF 1 s +-20 %


def test_permanent_and_permanent_on_errors_fail_at_once() -> None:
    first = t.fail_permanent.delay()
    second = t.lookup.delay("missing")
    run_job(get_queue().get(0))
    run_job(get_queue().get(0))
    assert job(first.job_id).state is State.FAILED
    assert job(second.job_id).state is State.FAILED
    assert job(second.job_id).error_type == "KeyError"


def test_a_task_retry_backoff_gives_the_delay() -> None:
    result = t.slow_backoff.delay()
    run_job(get_queue().get(0))
    stored = job(result.job_id)
    assert stored.state is State.SCHEDULED
    assert stored.eta is not None and 79 <= stored.eta - time.time() <= 121  # 100 s +-20 %


def test_max_retries_bounds_the_attempts() -> None:
    result = t.send_mail.using(queue="default").delay(123)  # max_retries=0; f-string works on an int
    run_job(get_queue().get(0))
    assert job(result.job_id).state is State.DONE
    failing = t.fail_always.using(max_retries=0).delay("once")
    assert run_job(get_queue().get(0)).state is State.FAILED
    assert job(failing.job_id).retries == 1


def test_a_result_msgpack_cannot_encode_fails_the_job_with_a_clear_error() -> None:
    result = t.unstorable_result.delay()
    outcome = run_job(get_queue().get(0))
    assert outcome.state is State.FAILED
    assert "returned a value that cannot be stored as its result" in (job(result.job_id).error or "")


def test_keyboard_interrupt_releases_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    result = t.add.delay(1, 2)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(t.add, "func", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_job(get_queue().get(0))
    stored = job(result.job_id)
    assert (stored.state, stored.retries) == (State.PENDING, 0)


# ------------------------------------------------------------------------------------------ testing helper


def test_run_queued_runs_everything_runnable_including_retries() -> None:
    ok = t.add.delay(1, 1)
    flaky = t.flaky.delay("q", 2)
    dead = t.fail_always.delay("x")
    later = t.add.schedule_in(3600, 2, 2)
    outcomes = run_queued()
    assert len(outcomes) == 1 + 3 + 4  # flaky: 2 failures then success; fail_always: 1 + 3 retries
    assert job(ok.job_id).result == 2
    assert (job(flaky.job_id).state, job(flaky.job_id).result) == (State.DONE, "ok")
    assert job(dead.job_id).state is State.FAILED
    assert job(later.job_id).state is State.SCHEDULED
    assert run_queued() == []


def test_run_queued_filters_queues_and_bounds_jobs() -> None:
    mail = t.send_mail.delay("a")
    t.add.delay(1, 1)
    t.add.delay(2, 2)
    assert [o.job_id for o in run_queued(queues=["mail"])] == [mail.job_id]
    assert len(run_queued(max_jobs=1)) == 1
    assert get_queue().stats()["pending"] == 1


def test_wait_until_empty() -> None:
    t.add.delay(1, 1)
    assert wait_until_empty(timeout=0.01) is False
    run_queued()
    assert wait_until_empty(timeout=1) is True
