"""Queue.claim(job_id): claiming one given job, for running it inline (the Django layer's immediate mode)."""

from __future__ import annotations

import pytest

from queue_max_django.engine import Queue, State
from tests.engine.conftest import FakeClock


@pytest.mark.contract
@pytest.mark.rule_completion
def test_claim_takes_exactly_that_job_even_behind_others(queue: Queue) -> None:
    """rule_completion: claim(id) takes that job, not the head of its queue; the others stay pending."""
    first = queue.put("first", priority=50)
    wanted = queue.put("wanted", priority=-50)
    record = queue.claim(wanted)
    assert record is not None and record.job_id == wanted and record.payload == "wanted"
    job = queue.job(wanted)
    assert job is not None and job.state is State.RUNNING and job.attempts == 1
    other = queue.job(first)
    assert other is not None and other.state is State.PENDING
    record.ack("ok")
    assert queue.job(wanted).state is State.DONE  # type: ignore[union-attr]
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_delay
def test_claim_starts_a_scheduled_job_now(queue: Queue, clock: FakeClock) -> None:
    """rule_delay: claim(id) of a scheduled job runs it before its ETA (inline execution ignores delays)."""
    job_id = queue.put("later", delay=3600)
    record = queue.claim(job_id)
    assert record is not None
    assert queue.stats()["scheduled"] == 0 and queue.stats()["running"] == 1
    record.ack()
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.rule_completion
def test_claim_of_a_running_finished_or_missing_job_is_none(queue: Queue) -> None:
    """rule_completion: claim(id) never steals a running job nor revives a finished one."""
    job_id = queue.put("x")
    held = queue.claim(job_id)
    assert held is not None
    assert queue.claim(job_id) is None  # running: someone holds it
    held.ack()
    assert queue.claim(job_id) is None  # done
    assert queue.claim(job_id + 256 * 1000) is None  # never existed
    assert queue.job(job_id).state is State.DONE  # type: ignore[union-attr]
