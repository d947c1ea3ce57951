"""A model-based test: hypothesis drives a Queue on a fake clock with random operations and compares it, after
every step, with a small in-memory model of what each job's state should be.

The model knows each job's state, retries, payload, priority, queue, ready time (the claim order within a
shard) and ETA. It predicts which priority get() must return (never passing over a higher one in any shard),
each shard's FIFO order among equal priorities, the outcome of ack/nack/release/touch/recover/vacuum/requeue/
cancel/purge, and the stats. The nack backoff has random jitter: the model checks its bounds and adopts the
ETA the store chose.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, Record, State

from .conftest import FakeClock
from .locations import StoreLocation
from .probes import StoreProbe

SHARDS = 3
MAX_RETRIES = 2
LEASE_TIME = 3.0
BACKOFF = 1.0
QUEUES = ("alpha", "beta")
PRIORITIES = st.integers(min_value=-3, max_value=3)
DELAYS = st.sampled_from([None, None, 0.5, 1.0, 3.0])  # exact in binary: the model's µs match the store's
ADVANCES = st.sampled_from([0.25, 0.5, 1.0, 2.0, 5.0, 11.0])


def micros(seconds: float) -> int:
    return int(seconds * 1_000_000)


@dataclass
class ModelJob:
    job_id: int
    state: State
    payload: Any
    priority: int
    queue: str
    shard: int  # as the store's probe names it: 0 on a store without shards
    retries: int = 0
    ready_us: int = 0  # pending: its place in the shard's claim order; scheduled: its ETA
    lease_us: int = 0
    record: Record | None = None


class QueueMachine(RuleBasedStateMachine):
    """rule_verify (and rule_priority, rule_fifo, rule_completion): after any sequence of operations,
    verify() finds nothing, stats() and every job match the model, get() never passes over a higher priority
    and keeps each shard FIFO, and a record that lost its job can change nothing.

    Run by ``test_queue_against_model`` on a subclass that names the test's store (``location``: each
    example opens a new store beside it) and its probe."""

    location: ClassVar[StoreLocation]
    probe_of: ClassVar[Callable[[Queue], StoreProbe]]
    examples: ClassVar[itertools.count[int]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = self.location.sibling(f"example-{next(self.examples)}")
        self.q = self.store.open_queue(
            shards=SHARDS,
            clock=self.clock,
            max_retries=MAX_RETRIES,
            retry_backoff=BACKOFF,
            lease_time=LEASE_TIME,
            rng=random.Random(0),
        )
        self.probe = type(self).probe_of(self.q)
        self.jobs: dict[int, ModelJob] = {}
        self.total = 0
        self.counter = 0
        self.stale: list[Record] = []  # records that can no longer complete their job

    def teardown(self) -> None:
        self.q.close()
        self.store.remove()

    # ------------------------------------------------------------------ helpers

    @property
    def now_us(self) -> int:
        return micros(self.clock())

    def in_state(self, state: State) -> list[ModelJob]:
        return [job for job in self.jobs.values() if job.state is state]

    def held(self) -> list[ModelJob]:
        return sorted(self.in_state(State.RUNNING), key=lambda job: job.job_id)

    def _add(self, job_id: int, payload: Any, priority: int, delay: float | None, queue: str) -> None:
        assert job_id not in self.jobs
        now = self.clock()
        shard = self.probe.shard_of(job_id)
        job = ModelJob(job_id, State.PENDING, payload, priority, queue, shard, ready_us=micros(now))
        if delay:
            job.state, job.ready_us = State.SCHEDULED, micros(now + delay)
        self.jobs[job_id] = job
        self.total += 1

    def _promote_due(self) -> None:
        """What get() does first: every scheduled job whose ETA passed becomes pending, ordered by its ETA."""
        for job in self.in_state(State.SCHEDULED):
            if job.ready_us <= self.now_us:
                job.state = State.PENDING

    def _retire(self, job: ModelJob) -> None:
        if job.record is not None:
            self.stale.append(job.record)
            job.record = None

    def _failed_attempt(self, job: ModelJob, *, permanent: bool, delay: float | None) -> State:
        """The model of nack (and of an expired lease, with delay=0)."""
        self._retire(job)
        job.retries += 1
        if permanent or job.retries > MAX_RETRIES:
            job.state = State.FAILED
        elif delay is None:
            job.state = State.SCHEDULED  # the ETA is adopted from the store by the caller
        elif delay > 0:
            job.state, job.ready_us = State.SCHEDULED, micros(self.clock() + delay)
        else:
            job.state, job.ready_us = State.PENDING, self.now_us
        return job.state

    # ------------------------------------------------------------------ rules: producing

    @initialize(jobs=st.lists(st.tuples(PRIORITIES, st.sampled_from(QUEUES)), min_size=3, max_size=12))
    def start_with_jobs(self, jobs: list[tuple[int, str]]) -> None:
        assert self.q.stats()["total"] == 0
        for priority, queue in jobs:
            self.put(priority, None, queue)

    @rule(priority=PRIORITIES, delay=DELAYS, queue=st.sampled_from(QUEUES))
    def put(self, priority: int, delay: float | None, queue: str) -> None:
        self.counter += 1
        payload = {"n": self.counter}
        job_id = self.q.put(payload, priority=priority, delay=delay, queue=queue)
        self._add(job_id, payload, priority, delay, queue)

    @rule(count=st.integers(1, 4), priority=PRIORITIES, delay=DELAYS, queue=st.sampled_from(QUEUES))
    def put_many(self, count: int, priority: int, delay: float | None, queue: str) -> None:
        payloads = []
        for _ in range(count):
            self.counter += 1
            payloads.append([self.counter, "batch"])
        ids = self.q.put_many(payloads, priority=priority, delay=delay, queue=queue)
        assert len(ids) == count and len({self.probe.shard_of(job_id) for job_id in ids}) == 1  # one shard
        for job_id, payload in zip(ids, payloads, strict=True):
            self._add(job_id, payload, priority, delay, queue)

    # ------------------------------------------------------------------ rules: consuming

    @rule(only=st.sampled_from([None, *QUEUES]), count=st.integers(1, 3))
    def get(self, only: str | None, count: int) -> None:
        """``count`` get() calls in a row (consuming is as frequent as producing)."""
        for _ in range(count):
            self._get_one(only)

    def _get_one(self, only: str | None) -> None:
        self._promote_due()
        queues = None if only is None else [only]
        claimable = [job for job in self.in_state(State.PENDING) if only is None or job.queue == only]
        if not claimable:
            with pytest.raises(QueueEmpty):
                self.q.get(timeout=0, queues=queues)
            return
        record = self.q.get(timeout=0, queues=queues)
        job = self.jobs.get(record.job_id)
        assert job is not None and job in claimable, f"got job {record.job_id}, not a claimable one"
        assert job.priority == max(other.priority for other in claimable), "passed over a higher priority"
        rivals = [other for other in claimable if other.shard == job.shard and other.priority == job.priority]
        first = min(rivals, key=lambda other: (other.ready_us, other.job_id))
        assert job is first, f"shard {job.shard} is not FIFO: got {job.job_id}, {first.job_id} was first"
        assert (record.payload, record.priority, record.queue) == (job.payload, job.priority, job.queue)
        assert record.retries == job.retries
        job.state, job.record, job.lease_us = State.RUNNING, record, micros(self.clock() + LEASE_TIME)

    @precondition(lambda self: self.held())
    @rule(index=st.integers(0, 100), result=st.sampled_from([None, "ok", {"r": [1, 2]}]))
    def ack(self, index: int, result: Any) -> None:
        job = self.held()[index % len(self.held())]
        assert job.record is not None
        job.record.ack(result=result)
        job.state = State.DONE
        self._retire(job)
        snapshot = self.q.job(job.job_id)
        assert snapshot is not None and snapshot.result == result

    @precondition(lambda self: self.held())
    @rule(
        index=st.integers(0, 100),
        permanent=st.booleans(),
        delay=st.sampled_from([None, None, 0.0, 2.0]),
    )
    def nack(self, index: int, permanent: bool, delay: float | None) -> None:
        job = self.held()[index % len(self.held())]
        assert job.record is not None
        state = job.record.nack(RuntimeError("boom"), delay=delay, permanent=permanent)
        retries = job.retries + 1
        assert state is self._failed_attempt(job, permanent=permanent, delay=delay)
        snapshot = self.q.job(job.job_id)
        assert snapshot is not None
        assert (snapshot.error, snapshot.error_type) == ("boom", "RuntimeError")
        if state is State.SCHEDULED and delay is None:
            base = BACKOFF * 2 ** (retries - 1)
            assert snapshot.eta is not None
            assert base * 0.8 - 1e-6 <= snapshot.eta - self.clock() <= base * 1.2 + 1e-6
            job.ready_us = round(snapshot.eta * 1_000_000)

    @precondition(lambda self: self.held())
    @rule(index=st.integers(0, 100))
    def release(self, index: int) -> None:
        job = self.held()[index % len(self.held())]
        assert job.record is not None
        job.record.release()
        job.state = State.PENDING  # keeps its ready time: back at its place in the shard's order
        self._retire(job)

    @precondition(lambda self: self.held())
    @rule(index=st.integers(0, 100))
    def touch(self, index: int) -> None:
        job = self.held()[index % len(self.held())]
        assert job.record is not None
        until = job.record.touch()
        job.lease_us = micros(self.clock() + LEASE_TIME)
        assert micros(until) in (job.lease_us, job.lease_us - 1)

    @precondition(lambda self: self.stale)
    @rule(index=st.integers(0, 100), how=st.sampled_from(["ack", "nack", "release", "touch"]))
    def complete_stale_record(self, index: int, how: str) -> None:
        """A record whose job was completed, released or recovered cannot touch it again."""
        record = self.stale[index % len(self.stale)]
        before = self.q.job(record.job_id)
        with pytest.raises(QueueCorrupted):
            getattr(record, how)()
        assert self.q.job(record.job_id) == before

    # ------------------------------------------------------------------ rules: time and maintenance

    @rule(seconds=ADVANCES)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(
        op=st.sampled_from(
            ["promote", "vacuum", "requeue", "requeue", "cancel", "purge_done", "purge_failed"]
        ),
        index=st.integers(0, 1000),
    )
    def manage(self, op: str, index: int) -> None:
        """The maintenance and management calls share one rule, so that they don't crowd out the work."""
        if op in ("requeue", "cancel"):
            getattr(self, op)(index)
        elif op.startswith("purge_"):
            self.purge(State(op.removeprefix("purge_")))
        else:
            getattr(self, op)()

    def promote(self) -> None:
        due = [job for job in self.in_state(State.SCHEDULED) if job.ready_us <= self.now_us]
        assert self.q.promote() == len(due)
        self._promote_due()

    @rule()
    def recover(self) -> None:
        expired = [job for job in self.held() if job.lease_us <= self.now_us]
        assert self.q.recover() == len(expired)
        for job in expired:
            self._failed_attempt(job, permanent=False, delay=0.0)
            snapshot = self.q.job(job.job_id)
            assert snapshot is not None and snapshot.error_type == "LeaseExpired"
        assert self.q.recover() == 0

    def vacuum(self) -> None:
        done = self.in_state(State.DONE)
        assert self.q.vacuum(older_than=0) == len(done)
        for job in done:
            del self.jobs[job.job_id]

    def requeue(self, index: int) -> None:
        if not self.jobs:
            return
        job = sorted(self.jobs.values(), key=lambda job: job.job_id)[index % len(self.jobs)]
        expected = job.state is State.FAILED
        assert self.q.requeue(job.job_id) is expected
        if expected:
            job.state, job.retries, job.ready_us = State.PENDING, 0, self.now_us

    def cancel(self, index: int) -> None:
        if not self.jobs:
            return
        job = sorted(self.jobs.values(), key=lambda job: job.job_id)[index % len(self.jobs)]
        expected = job.state in (State.PENDING, State.SCHEDULED)
        assert self.q.cancel(job.job_id) is expected
        if expected:
            del self.jobs[job.job_id]

    def purge(self, state: State) -> None:
        doomed = self.in_state(state)
        assert self.q.purge(state) == len(doomed)
        for job in doomed:
            del self.jobs[job.job_id]

    # ------------------------------------------------------------------ after every step

    @invariant()
    def stats_match_the_model(self) -> None:
        stats = self.q.stats()
        assert {state.value: stats[state.value] for state in State} == {
            state.value: len(self.in_state(state)) for state in State
        }
        assert stats["total"] == self.total

    @invariant()
    def store_is_consistent(self) -> None:
        assert self.q.verify() == []

    @invariant()
    def every_job_matches_the_model(self) -> None:
        for job in self.jobs.values():
            snapshot = self.q.job(job.job_id)
            assert snapshot is not None, f"job {job.job_id} vanished"
            seen = (snapshot.state, snapshot.retries, snapshot.payload, snapshot.priority, snapshot.queue)
            assert seen == (job.state, job.retries, job.payload, job.priority, job.queue)
            if job.state is State.SCHEDULED:
                assert snapshot.eta is not None and round(snapshot.eta * 1_000_000) == job.ready_us
            if job.state is State.RUNNING:
                assert snapshot.lease_until is not None
                assert abs(micros(snapshot.lease_until) - job.lease_us) <= 1


@pytest.mark.contract
@pytest.mark.rule_verify
@pytest.mark.rule_priority
@pytest.mark.rule_fifo
@pytest.mark.rule_completion
@pytest.mark.slow
def test_queue_against_model(location: StoreLocation, probe: Callable[[Queue], StoreProbe]) -> None:
    """The model-based run on the test's store kind: QueueMachine's rules and invariants, 30 examples of
    up to 40 steps, each on a new store."""
    machine = type(
        "QueueMachineOnThisStore",
        (QueueMachine,),
        {"location": location, "probe_of": staticmethod(probe), "examples": itertools.count()},
    )
    run_state_machine_as_test(
        machine, settings=settings(max_examples=30, stateful_step_count=40, deadline=None, database=None)
    )
