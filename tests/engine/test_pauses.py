"""Pausing queues and tasks through the ``Queue`` (issue 31), on every store kind: ``pause``, ``resume``,
``pauses``, and what claims make of them (engine/pauses.py). The store's own operations are proven by the
contract suite (tests/store_contract/test_pauses.py); real worker processes by tests/worker/test_pauses.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine import InvalidJob, Queue, QueueEmpty, State, UnknownQueue
from queue_max_django.engine.pausestate import MAX_REASON

from .conftest import FakeClock


def eventually(q: Queue, expected: list[Any], **options: Any) -> None:
    """``drain(q)`` gives ``expected`` within 2 s: a resume made through another handle is seen by the
    next claim after the store's version changes, which a store that keeps its version a few ms
    (PostgreSQL) sees that late."""
    deadline = time.monotonic() + 2.0
    got: list[Any] = []
    while time.monotonic() < deadline:
        got += drain(q, **options)
        if got == expected:
            return
        time.sleep(0.002)
    assert got == expected


def drain(q: Queue, **options: Any) -> list[Any]:
    """Every job ``q.get`` hands out now (acked), in order."""
    got = []
    while True:
        try:
            record = q.get(timeout=0, **options)
        except QueueEmpty:
            return got
        got.append(record.payload)
        record.ack()


def test_a_paused_queue_is_not_claimed_and_the_others_are(queue: Queue) -> None:
    queue.put("mail 1", queue="mail")
    queue.put("default 1")
    queue.put("mail 2", queue="mail", priority=50)  # higher priority: still held back
    made = queue.pause("mail", reason="provider outage", by="ops")
    assert [(p.queue, p.task, p.reason, p.by, p.until) for p in made] == [
        ("mail", None, "provider outage", "ops", None)
    ]
    assert drain(queue) == ["default 1"]
    assert drain(queue, queues=["mail"]) == []
    assert drain(queue, queues=["mail", "default"]) == []
    assert queue.stats()["pending"] == 2
    assert [p.queue for p in queue.resume("mail")] == ["mail"]
    assert drain(queue) == ["mail 2", "mail 1"]


def test_a_queue_opened_after_the_pause_knows_it(make_queue: Callable[..., Queue]) -> None:
    first = make_queue()
    first.put("mail", queue="mail")
    first.put("other", queue="other")
    first.pause(["mail"])
    later = make_queue()  # another process, started later: nothing was broadcast to it
    assert drain(later) == ["other"]
    first.resume(["mail"])
    eventually(later, ["mail"])


def test_a_running_queue_sees_a_pause_made_elsewhere_at_its_next_claim(
    make_queue: Callable[..., Queue],
) -> None:
    worker, admin = make_queue(), make_queue()
    worker.put("a", queue="mail")
    worker.put("b", queue="mail")
    assert drain(worker, queues=["mail"])[:0] == []  # warm: its view and pause version are read
    worker.put("c", queue="mail")
    admin.pause("mail")
    assert drain(worker) == []
    admin.resume("mail")
    eventually(worker, ["c"])


def test_a_paused_task_never_blocks_the_other_tasks_of_its_queue(queue: Queue) -> None:
    for n in range(3):  # on one shard, whose order is first in, first out (across shards it need not be)
        queue.put(f"send {n}", queue="mail", name="app.send", priority=10, partition_key="sends")
    queue.put("digest", queue="mail", name="app.digest")
    queue.put("report", queue="reports", name="app.send")  # the same task in another queue: not paused
    queue.put("plain", queue="mail")  # no name: never a paused task's
    queue.pause("mail", task="app.send")
    assert sorted(drain(queue)) == ["digest", "plain", "report"]
    assert drain(queue, queues=["mail"]) == []
    assert queue.stats()["pending"] == 3
    queue.resume("mail")  # the queue's own pause: there is none; the task's stays
    assert drain(queue) == []
    queue.resume("mail", task="app.send")
    assert drain(queue) == ["send 0", "send 1", "send 2"]


def test_concurrency_limited_jobs_of_a_paused_queue_wait_and_the_others_run(queue: Queue) -> None:
    """A limited job (its own claim, ``concurrency.py``) of a queue not paused runs while another queue is
    paused, whether the claim names its queues or not; the paused queue's limited job waits for the resume.
    """
    queue.put("held", queue="media", concurrency=(("task:resize", 2),))
    queue.put("free", queue="default", concurrency=(("task:export", 2),))
    queue.pause("media")
    assert drain(queue) == ["free"]
    assert drain(queue, queues=["media"]) == []
    queue.resume("media")
    assert drain(queue) == ["held"]


def test_a_paused_task_never_holds_the_other_limited_jobs_of_its_queue(queue: Queue) -> None:
    """A paused task's limited jobs wait; the queue's other tasks' limited jobs run, under their own limit
    and under the queue's limit, where the paused task's jobs come first in the queue limit's group."""
    queue_limit = (("queue:mail", 5),)
    for n in range(2):  # the paused task's first, on one shard (a limit's key places them)
        queue.put(f"send {n}", queue="mail", name="app.send", priority=10, concurrency=queue_limit)
    queue.put("digest", queue="mail", name="app.digest", concurrency=queue_limit)
    queue.put("tasked", queue="mail", name="app.other", concurrency=(("task:app.other", 2),))
    queue.put("own", queue="mail", name="app.send", concurrency=(("task:app.send", 2),))
    queue.pause("mail", task="app.send")
    assert sorted(drain(queue)) == ["digest", "tasked"]
    assert sorted(drain(queue, queues=["mail"])) == []
    queue.put("later", queue="mail", name="app.digest", concurrency=queue_limit)
    assert drain(queue, queues=["mail"]) == ["later"]
    queue.resume("mail", task="app.send")
    assert sorted(drain(queue)) == ["own", "send 0", "send 1"]


def test_batches_still_come_from_the_queues_not_paused(queue: Queue) -> None:
    queue.put_many(["a", "b", "c"], queue="default")
    queue.put_many(["x", "y"], queue="mail")
    queue.pause("mail")
    records = queue.get_many(10, timeout=0, queues=["default", "mail"])
    assert [record.payload for record in records] == ["a", "b", "c"]
    queue.ack_many([(record, None) for record in records])


def test_scheduled_jobs_come_due_and_then_wait(queue: Queue, clock: FakeClock) -> None:
    job_id = queue.put("later", queue="mail", delay=10)
    queue.pause("mail")
    clock.advance(11)
    assert drain(queue) == []
    job = queue.job(job_id)
    assert job is not None and job.state is State.PENDING  # due: promoted, and waiting
    queue.resume("mail")
    assert drain(queue) == ["later"]


def test_a_pause_with_a_duration_ends_by_itself(queue: Queue, clock: FakeClock) -> None:
    queue.put("mail", queue="mail")
    queue.put("send", queue="other", name="app.send")
    (pause,) = queue.pause("mail", duration=30, reason="maintenance window")
    queue.pause("other", task="app.send", duration=60)
    assert pause.until == pytest.approx(clock() + 30)
    clock.advance(29.9)
    assert drain(queue) == []
    clock.advance(0.1)
    assert drain(queue) == ["mail"]  # no process lifted it
    assert [(p.queue, p.task) for p in queue.pauses()] == [("other", "app.send")]
    clock.advance(30)
    assert drain(queue) == ["send"]
    assert queue.pauses() == []


def test_a_running_job_finishes_under_a_pause(queue: Queue) -> None:
    queue.put("running", queue="mail")
    record = queue.get(timeout=0)
    queue.pause("mail")
    record.ack("done")
    job = queue.job(record.job_id)
    assert job is not None and job.state is State.DONE and job.result == "done"


def test_pauses_and_limits_together(queue: Queue) -> None:
    queue.set_rate_limit("queue:mail", "1000/s")
    queue.put("send", queue="mail", name="app.send", priority=5)
    queue.put("digest", queue="mail", name="app.digest")
    queue.put("other", queue="other")
    queue.pause("mail", task="app.send")
    queue.pause("other")
    assert drain(queue) == ["digest"]
    queue.resume("mail", task="app.send")
    queue.resume("other")
    assert drain(queue) == ["send", "other"]


def test_stats_and_pauses_say_who_paused_what_when_and_why(queue: Queue, clock: FakeClock) -> None:
    assert "paused" not in queue.stats()
    queue.pause(["mail", "sms"], reason="provider down", by="alice")
    clock.advance(5)
    queue.pause("default", task="app.report", duration=60, by="bob")
    paused = queue.stats()["paused"]
    assert [(p["queue"], p["task"], p["by"], p["reason"]) for p in paused] == [
        ("default", "app.report", "bob", None),
        ("mail", None, "alice", "provider down"),
        ("sms", None, "alice", "provider down"),
    ]
    assert paused[0]["paused_at"] == clock() and paused[0]["until"] == clock() + 60
    assert paused[1]["paused_at"] == clock() - 5 and paused[1]["until"] is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.pause([]), "at least one queue"),
        (lambda q: q.pause(""), "queue must be a non-empty str"),
        (lambda q: q.pause("mail\n"), "control characters"),
        (lambda q: q.pause("x" * 101), "at most 100"),
        (lambda q: q.pause("mail", task=""), "name must be"),
        (lambda q: q.pause("mail", duration=0), "duration must be above 0"),
        (lambda q: q.pause("mail", duration=-5), "duration must be above 0"),
        (lambda q: q.pause("mail", duration=float("nan")), "finite"),
        (lambda q: q.pause("mail", duration="1h"), "finite"),
        (lambda q: q.pause("mail", reason="r" * (MAX_REASON + 1)), "at most 500 characters"),
        (lambda q: q.pause("mail", reason="a\x1b[31m"), "control characters"),
        (lambda q: q.pause("mail", by=7), "by must be None or a str"),
        (lambda q: q.resume([]), "at least one queue"),
        (lambda q: q.pause(["ok", None]), "queue must be"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(queue: Queue, call: Any, message: str) -> None:
    version = queue._store.pauses.version()
    with pytest.raises(InvalidJob, match=message):
        call(queue)
    assert queue.pauses() == []
    assert queue._store.pauses.version() == version


def test_a_queue_the_queue_does_not_serve_is_unknown(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(queues=["default", "mail"])
    with pytest.raises(UnknownQueue, match="'typo'"):
        q.pause(["mail", "typo"])
    assert q.pauses() == []


def test_with_nothing_paused_a_claim_reads_no_pauses(queue: Queue) -> None:
    """The hot path: the pauses are read once, then only when their version changes."""
    ops = queue._store.pauses
    reads = []
    original = ops.pauses

    def counted() -> Any:
        reads.append(1)
        return original()

    ops.pauses = counted  # type: ignore[method-assign]
    try:
        queue.put_many(list(range(50)))
        assert len(drain(queue)) == 50
        assert len(reads) <= 1
        queue.pause("other")  # a pause of a queue with no jobs: read again once, then not
        queue.put_many(list(range(50)))
        assert len(drain(queue)) == 50
        assert len(reads) <= 2
    finally:
        del ops.pauses


@pytest.mark.parametrize("paused", ["queue", "task"])
def test_a_job_put_after_a_pause_never_starts_even_when_the_claim_read_the_pauses_before_it(
    queue: Queue, paused: str
) -> None:
    """A claim reads the pause version, then claims: a pause committed in between, and a job put after it,
    must not give that job to the claim (an idle consumer that read the pauses before a pause, woken by the
    put that followed it, took the job and ran it). The claim gives it back, uncharged, before anything
    runs (PostgreSQL's claim statement takes nothing on a changed version: [sc_pause_fresh]); the job of
    another queue is claimed."""
    queue.put_many_to_shard(0, ["other"], queue="other")
    pauses = queue._pauses
    held = pauses.held
    task = "app.send" if paused == "task" else None

    def decide_then_pause_then_put(allowed: Any) -> Any:
        pauses.held = held  # once: the pause and the put land after the claim read the pauses
        decided = held(allowed)
        queue.pause("mail", task=task, reason="outage")
        queue.put_many_to_shard(0, ["after the pause"], queue="mail", name="app.send", priority=10)
        return decided

    pauses.held = decide_then_pause_then_put  # type: ignore[method-assign]
    got = queue.get_many(10, timeout=1)  # (PostgreSQL's claim statement refuses on a changed version)
    assert [record.payload for record in got] == ["other"]
    got[0].ack()
    [held] = queue.jobs(State.PENDING)
    assert (held.payload, held.attempts) == ("after the pause", 0)  # back, waiting, not charged
    with pytest.raises(QueueEmpty):
        queue.get(timeout=0)
    queue.resume("mail", task=task)
    assert drain(queue) == ["after the pause"]
