"""runner.run_job: one claimed job -> look up, call, ack or nack (classified); and the run_queued helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Job, State
from queue_max_django.runner import run_job, unknown_task_message
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


def test_a_job_naming_an_unknown_task_is_a_dead_letter_with_a_clear_error() -> None:
    job_id = get_queue().put({"args": [], "kwargs": {}}, name="os.system")
    outcome = run_job(get_queue().get(0))
    assert outcome.state is State.FAILED
    stored = job(job_id)
    assert stored.state is State.FAILED
    assert stored.retries == 1  # permanent: no retry
    assert stored.error == unknown_task_message("os.system")
    assert "no task named 'os.system' is registered in this process" in (stored.error or "")


def test_a_job_without_a_name_is_a_dead_letter() -> None:
    job_id = get_queue().put({"args": [], "kwargs": {}})
    run_job(get_queue().get(0))
    assert job(job_id).state is State.FAILED
    assert "no task named None" in (job(job_id).error or "")


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
