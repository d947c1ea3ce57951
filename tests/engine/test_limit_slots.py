"""Concurrency limits' slots (issue 31) through the ``Queue``, on every store kind: a running limited job
that leaves the running state by being quarantined (its record found undecodable at its completion or at
its lease's recovery) gives its slot back, so the next job of its key starts. (A store whose records cannot
be garbled skips: ``StoreProbe.break_record``.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, State

from .conftest import FakeClock
from .probes import StoreProbe

LIMIT = (("task:t", 1),)


def running(queue: Queue) -> int:
    return queue.concurrency_limits().get("task:t", {}).get("running", 0)


@pytest.mark.parametrize("ended_by", ["ack", "recovery"])
def test_a_quarantined_running_job_gives_its_slot_back(
    queue: Queue, probe: Callable[[Queue], StoreProbe], clock: FakeClock, ended_by: str
) -> None:
    first = queue.put("first", concurrency=LIMIT)
    second = queue.put("second", concurrency=LIMIT)
    record = queue.get(timeout=0)
    assert record.job_id == first
    assert running(queue) == 1
    probe(queue).break_record(first, "garbage-record")
    if ended_by == "ack":
        with pytest.raises(QueueCorrupted):
            record.ack()
    else:
        clock.advance(queue.lease_time + 1)
        queue.recover()
    broken = queue.job(first)
    assert broken is not None and broken.state is State.FAILED and broken.error_type == "Corrupted"
    assert running(queue) == 0
    nxt = queue.get(timeout=0)
    assert nxt.job_id == second
    nxt.ack()
