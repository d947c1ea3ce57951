"""Circuit breakers through the ``Queue``, on the injected clock: failures of jobs open a breaker, an open
breaker's jobs wait (pending, untouched) while the others run, one trial decides, and what counts as a failure
(nacks, permanent nacks, lost leases). Then ``classify`` as a worker applies it to ``nack`` (issue 3).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import (
    InvalidBreakerPolicy,
    Permanent,
    Queue,
    QueueEmpty,
    Record,
    Retry,
    State,
    classify,
)
from tests.engine.conftest import FakeClock

pytestmark = pytest.mark.contract

TIMEOUT = 60.0
LEASE = 30.0  # the fixture queue's lease_time


def drain(q: Queue) -> list[Record]:
    records = []
    while True:
        try:
            records.append(q.get(0))
        except QueueEmpty:
            return records


def breaker(q: Queue, key: str = "name:x") -> dict[str, Any]:
    return q.circuit_breakers()[key]


def fail(q: Queue, count: int, *, permanent: bool = False) -> list[int]:
    """Take ``count`` jobs (all must be there) and nack each. -> their ids."""
    ids = []
    for _ in range(count):
        record = q.get(0)
        record.nack(RuntimeError("downstream is down"), permanent=permanent)
        ids.append(record.job_id)
    return ids


def assert_waiting(q: Queue, job_ids: list[int], attempts: int = 0) -> None:
    """Held back by a breaker: still pending (not failed), not leased, attempts unchanged."""
    for job_id in job_ids:
        job = q.job(job_id)
        assert job is not None
        assert job.state is State.PENDING, job
        assert (job.attempts, job.lease_until) == (attempts, None), job


def open_breaker(q: Queue, key: str = "name:x", threshold: int = 3, **put: Any) -> None:
    """Set a breaker on ``key`` and open it with ``threshold`` failing jobs (put with ``put`` options)."""
    q.set_circuit_breaker(key, threshold=threshold, recovery_timeout=TIMEOUT)
    for n in range(threshold):
        q.put({"failing": n}, max_retries=0, **put)
    fail(q, threshold)
    assert breaker(q, key)["state"] == "open"


@pytest.mark.flow_breaker
def test_threshold_consecutive_failures_open_the_breaker(
    queue: Queue, make_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """flow_breaker: a new breaker is closed; threshold consecutive nacks of jobs under its key open it, with
    the full recovery timeout to the next trial; the state is on disk (another Queue reads it) and in
    stats()."""
    queue.set_circuit_breaker("name:x", threshold=3, recovery_timeout=TIMEOUT)
    closed = {"state": "closed", "failures": 0, "threshold": 3, "recovery_timeout": TIMEOUT,
              "seconds_to_trial": None}  # fmt: skip
    assert queue.circuit_breakers() == {"name:x": closed}
    queue.put_many(list(range(5)), name="x", max_retries=10)
    fail(queue, 2)
    assert breaker(queue) == closed | {"failures": 2}
    fail(queue, 1)
    opened = {"state": "open", "failures": 3, "threshold": 3, "recovery_timeout": TIMEOUT,
              "seconds_to_trial": TIMEOUT}  # fmt: skip
    assert queue.circuit_breakers() == {"name:x": opened}
    assert queue.stats()["circuit_breakers"] == {"name:x": opened}
    clock.advance(20)
    with make_queue() as other:
        assert other.circuit_breakers()["name:x"] == opened | {"seconds_to_trial": 40.0}


@pytest.mark.flow_breaker
def test_an_open_breaker_holds_its_jobs_and_serves_the_others(queue: Queue, clock: FakeClock) -> None:
    """flow_breaker: while open, get() skips the breaker's jobs (they stay pending, not failed, never leased)
    and serves the others, whatever their priority."""
    open_breaker(queue, name="x")
    held = [queue.put(n, name="x", priority=100) for n in range(3)]
    others = [queue.put(n, name="y") for n in range(3)] + [queue.put("anonymous", priority=-100)]
    served = [record.job_id for record in drain(queue)]
    assert sorted(served) == sorted(others)
    assert_waiting(queue, held)
    clock.advance(TIMEOUT - 0.001)
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert_waiting(queue, held)
    assert queue.stats()["failed"] == 3  # only the jobs that opened it


@pytest.mark.flow_breaker
def test_one_trial_after_the_timeout_and_its_success_closes(queue: Queue, clock: FakeClock) -> None:
    """flow_breaker: after the recovery timeout exactly one trial job is handed out (a second get() finds
    nothing while it is out); its ack closes the breaker and the rest flow."""
    open_breaker(queue, name="x")
    held = [queue.put(n, name="x") for n in range(4)]
    clock.advance(TIMEOUT)
    assert breaker(queue)["state"] == "half_open"
    assert breaker(queue)["seconds_to_trial"] == 0.0
    trial = queue.get(0)
    assert trial.job_id in held and trial.name == "x"
    with pytest.raises(QueueEmpty):
        queue.get(0)
    assert breaker(queue)["state"] == "half_open"
    assert breaker(queue)["seconds_to_trial"] == TIMEOUT  # until this trial would count as lost
    assert_waiting(queue, [job_id for job_id in held if job_id != trial.job_id])
    trial.ack()
    assert breaker(queue) == {"state": "closed", "failures": 0, "threshold": 3, "recovery_timeout": TIMEOUT,
                              "seconds_to_trial": None}  # fmt: skip
    rest = drain(queue)
    assert sorted(record.job_id for record in rest) == sorted(set(held) - {trial.job_id})


@pytest.mark.flow_breaker
def test_a_failed_trial_opens_the_breaker_again(queue: Queue, clock: FakeClock) -> None:
    """flow_breaker: the trial's nack opens the breaker again for a whole recovery timeout from then; the
    trial job itself retries like any job; then a new trial comes."""
    open_breaker(queue, name="x")
    held = [queue.put(n, name="x", max_retries=5) for n in range(2)]
    clock.advance(TIMEOUT)
    trial = queue.get(0)
    clock.advance(5)
    assert trial.nack(RuntimeError("still down")) is State.PENDING
    assert breaker(queue) == {"state": "open", "failures": 4, "threshold": 3, "recovery_timeout": TIMEOUT,
                              "seconds_to_trial": TIMEOUT}  # fmt: skip
    with pytest.raises(QueueEmpty):
        queue.get(0)
    other = [job_id for job_id in held if job_id != trial.job_id]
    assert_waiting(queue, other)
    assert_waiting(queue, [trial.job_id], attempts=1)
    clock.advance(TIMEOUT)
    assert queue.get(0).job_id in held
    with pytest.raises(QueueEmpty):
        queue.get(0)


@pytest.mark.flow_breaker
def test_a_trial_whose_holder_died_counts_as_a_failure(queue: Queue, clock: FakeClock) -> None:
    """flow_breaker (rule_lease_attempt): a trial whose lease expires and is recovered is a failed trial:
    the breaker opens again, the job is pending with the lost attempt counted."""
    open_breaker(queue, name="x")
    job_id = queue.put("trial", name="x", max_retries=5)
    clock.advance(TIMEOUT)
    trial = queue.get(0)
    assert trial.job_id == job_id
    clock.advance(LEASE)
    assert queue.recover() == 1
    assert breaker(queue)["state"] == "open"
    assert breaker(queue)["seconds_to_trial"] == TIMEOUT
    job = queue.job(job_id)
    assert job is not None and job.state is State.PENDING and job.retries == 1
    assert job.error is not None and "lease expired" in job.error
    with pytest.raises(QueueEmpty):
        queue.get(0)


@pytest.mark.flow_breaker
def test_a_success_while_closed_resets_the_failure_count(queue: Queue) -> None:
    """flow_breaker: only consecutive failures count: an ack between them starts the count again."""
    queue.set_circuit_breaker("name:x", threshold=3, recovery_timeout=TIMEOUT)
    queue.put_many(list(range(10)), name="x", max_retries=10)
    fail(queue, 2)
    assert breaker(queue)["failures"] == 2
    queue.get(0).ack()
    assert breaker(queue)["failures"] == 0
    fail(queue, 2)
    assert (breaker(queue)["state"], breaker(queue)["failures"]) == ("closed", 2)
    fail(queue, 1)
    assert breaker(queue)["state"] == "open"


@pytest.mark.flow_breaker
def test_release_is_not_a_failure(queue: Queue) -> None:
    """flow_breaker: release() (a worker shutting down) is neither a success nor a failure."""
    queue.set_circuit_breaker("name:x", threshold=1, recovery_timeout=TIMEOUT)
    queue.put("job", name="x")
    for _ in range(3):
        queue.get(0).release()
    assert breaker(queue)["failures"] == 0
    assert breaker(queue)["state"] == "closed"


@pytest.mark.flow_breaker
def test_permanent_and_final_failures_count(queue: Queue) -> None:
    """flow_breaker: a permanent nack and a nack that exhausts the retries count like any failure."""
    queue.set_circuit_breaker("name:x", threshold=2, recovery_timeout=TIMEOUT)
    permanent = queue.put("bad input", name="x", max_retries=5)
    fail(queue, 1, permanent=True)
    assert breaker(queue)["failures"] == 1
    last_try = queue.put("no retries", name="x", max_retries=0)
    fail(queue, 1)
    assert breaker(queue)["state"] == "open"
    for job_id in (permanent, last_try):
        job = queue.job(job_id)
        assert job is not None and job.state is State.FAILED


@pytest.mark.flow_breaker
@pytest.mark.parametrize(
    ("key", "failing", "held", "served"),
    [
        ("queue:mail", {"queue": "mail"}, {"queue": "mail", "name": "t"}, {"queue": "default", "name": "t"}),
        ("name:x", {"name": "x", "queue": "a"}, {"name": "x", "queue": "b"}, {"name": "y", "queue": "a"}),
        ("*", {}, {"queue": "any", "name": "t"}, None),
    ],
    ids=["queue", "name", "store"],
)
def test_breakers_are_keyed_like_limits(
    queue: Queue, key: str, failing: dict[str, Any], held: dict[str, Any], served: dict[str, Any] | None
) -> None:
    """flow_breaker: a "queue:" breaker holds its queue's jobs, a "name:" breaker its task's in any queue,
    and "*" every job of the store."""
    open_breaker(queue, key, **failing)
    held_ids = [queue.put(n, **held) for n in range(2)]
    served_ids = [] if served is None else [queue.put(n, **served) for n in range(2)]
    assert sorted(record.job_id for record in drain(queue)) == sorted(served_ids)
    assert_waiting(queue, held_ids)


@pytest.mark.flow_breaker
def test_reset_closes_and_remove_drops_the_breaker(queue: Queue) -> None:
    """flow_breaker: reset_circuit_breaker closes an open breaker at once (its jobs flow again);
    remove_circuit_breaker drops it (stats() then has no "circuit_breakers"); both say False for an unknown
    key."""
    open_breaker(queue, name="x")
    held = [queue.put(n, name="x") for n in range(2)]
    assert queue.reset_circuit_breaker("name:x") is True
    assert (breaker(queue)["state"], breaker(queue)["failures"]) == ("closed", 0)
    assert sorted(record.job_id for record in drain(queue)) == sorted(held)
    assert queue.reset_circuit_breaker("name:nothing") is False
    assert queue.remove_circuit_breaker("name:x") is True
    assert queue.remove_circuit_breaker("name:x") is False
    assert queue.circuit_breakers() == {}
    assert "circuit_breakers" not in queue.stats()


@pytest.mark.flow_breaker
def test_changing_the_policy_keeps_the_state(queue: Queue, clock: FakeClock) -> None:
    """flow_breaker: set_circuit_breaker on an existing key changes its threshold and timeout, not its
    state."""
    open_breaker(queue, name="x")
    queue.set_circuit_breaker("name:x", threshold=10, recovery_timeout=5.0)
    assert breaker(queue) == {"state": "open", "failures": 3, "threshold": 10, "recovery_timeout": 5.0,
                              "seconds_to_trial": 5.0}  # fmt: skip
    clock.advance(5)
    job_id = queue.put("trial", name="x")
    assert queue.get(0).job_id == job_id


BAD_POLICIES: list[dict[str, Any]] = [
    {"threshold": 0},
    {"threshold": 1.5},
    {"threshold": True},
    {"recovery_timeout": 0},
    {"recovery_timeout": -1.0},
    {"recovery_timeout": float("inf")},
]


@pytest.mark.flow_breaker
@pytest.mark.parametrize("policy", BAD_POLICIES)
def test_bad_breaker_settings_raise_and_write_nothing(queue: Queue, policy: dict[str, Any]) -> None:
    """flow_breaker (inv_7): a bad threshold or timeout raises InvalidBreakerPolicy (a ValueError), and an
    existing breaker keeps its settings."""
    queue.set_circuit_breaker("name:x", threshold=3, recovery_timeout=TIMEOUT)
    for key in ("name:x", "name:new"):
        with pytest.raises(InvalidBreakerPolicy) as caught:
            queue.set_circuit_breaker(key, **policy)
        assert isinstance(caught.value, ValueError)
    assert list(queue.circuit_breakers()) == ["name:x"]
    assert (breaker(queue)["threshold"], breaker(queue)["recovery_timeout"]) == (3, TIMEOUT)


@pytest.mark.flow_breaker
def test_a_long_backlog_held_by_an_open_breaker_does_not_hide_the_others(
    make_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """flow_breaker: an open breaker's backlog (300 jobs from one put_many, ahead in the same queue and shard)
    does not starve a job of another task queued behind it."""
    with make_queue(shards=1) as q:
        open_breaker(q, name="x")
        backlog = q.put_many(list(range(300)), name="x")
        other = q.put("other", name="y")
        assert q.get(0).job_id == other
        assert_waiting(q, backlog[:5])


# ------------------------------------------------------------------------------------ classify, as a worker


class HTTPError(Exception):
    """What an HTTP client raises: a status code and the response headers."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers or {}


def run_and_record(q: Queue, clock: FakeClock, exc: BaseException) -> Record:
    """What a worker does when a task raised ``exc``: classify it, then nack accordingly."""
    record = q.get(0)
    decision = classify(exc, now=clock())
    record.nack(exc, delay=decision.delay, permanent=not decision.retry)
    return record


@pytest.mark.flow_classify
def test_classified_failures_become_the_right_state(
    make_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    """flow_classify: Permanent and a 404 fail for good (dead letters, error type kept); Retry(delay=5)
    schedules the retry 5 s on; a 503 without Retry-After uses the queue's backoff (base 2 s, +-20%), with
    one it waits that long; a timeout retries with the backoff. Classified failures count for breakers."""
    base = 2.0
    with make_queue(retry_backoff=base, rng=random.Random(7), max_retries=5) as q:
        q.set_circuit_breaker("name:call", threshold=100, recovery_timeout=TIMEOUT)
        cases: list[tuple[BaseException, State, tuple[float, float] | None]] = [
            (Permanent("the order does not exist"), State.FAILED, None),
            (HTTPError(404), State.FAILED, None),
            (Retry("try later", delay=5), State.SCHEDULED, (5.0, 5.0)),
            (HTTPError(503), State.SCHEDULED, (0.8 * base, 1.2 * base)),
            (HTTPError(503, {"Retry-After": "120"}), State.SCHEDULED, (120.0, 120.0)),
            (TimeoutError("read timed out"), State.SCHEDULED, (0.8 * base, 1.2 * base)),
        ]
        for exc, state, wait in cases:
            job_id = q.put({"case": repr(exc)}, name="call")
            record = run_and_record(q, clock, exc)
            assert record.job_id == job_id
            job = q.job(job_id)
            assert job is not None
            assert (job.state, job.retries, job.error) == (state, 1, str(exc)), exc
            assert job.error_type is not None and job.error_type.endswith(type(exc).__qualname__)
            if wait is None:
                assert job.eta is None and job.finished_at == clock()
            else:
                assert job.eta is not None and wait[0] <= job.eta - clock() <= wait[1], (exc, job.eta)
        assert breaker(q, "name:call")["failures"] == len(cases)
        assert len(q.dead_letters()) == 2
