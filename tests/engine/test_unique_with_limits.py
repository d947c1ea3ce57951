"""A job with a unique key and concurrency limits (issue 31), through the ``Queue``, on every store kind: its
limits place it, and its key is judged among the jobs of that placement (``uniqueness.scoped``), so that a
duplicate is skipped, replaced or refused as without limits, and the limit holds whatever the key did."""

from __future__ import annotations

import pytest

from queue_max_django.engine import DuplicateJob, InvalidJob, Queue, QueueEmpty, State
from queue_max_django.engine.concurrency import MAX_KEY

TASK = (("task:sync", 1),)


def running(queue: Queue, key: str = "task:sync") -> int:
    return queue.concurrency_limits().get(key, {}).get("running", 0)


def test_a_limited_put_with_a_key_is_deduplicated_and_its_job_limited(queue: Queue) -> None:
    first = queue.put_unique("a", unique_key="acct-1", unique_until="started", concurrency=TASK)
    again = queue.put_unique("b", unique_key="acct-1", unique_until="started", concurrency=TASK)
    other = queue.put_unique("c", unique_key="acct-2", unique_until="started", concurrency=TASK)
    assert (first.outcome, again.outcome, other.outcome) == ("stored", "skipped", "stored")
    assert again.job_id == first.job_id != other.job_id
    assert queue.stats()["total"] == 2 and queue.unique_counts() == {"skipped": 1, "replaced": 0}
    job = queue.job(first.job_id)
    assert job is not None and job.unique is not None and job.unique.key == "acct-1"  # the caller's key
    record = queue.get(timeout=0)  # one of the two runs; the limit of 1 holds the other
    with pytest.raises(QueueEmpty):
        queue.get(timeout=0)
    assert running(queue) == 1
    # While it runs, its key is free again (unique_until="started"): a new job takes it, and waits.
    key = "acct-1" if record.payload == "a" else "acct-2"
    taken = queue.put_unique(record.payload, unique_key=key, unique_until="started", concurrency=TASK)
    assert taken.outcome == "stored"
    record.ack()
    assert running(queue) == 0
    nxt = queue.get(timeout=0)
    assert running(queue) == 1 and nxt.job_id != record.job_id
    nxt.ack()
    assert queue.verify() == []


def test_replace_gives_a_waiting_limited_holder_the_new_payload_and_keeps_its_limit(queue: Queue) -> None:
    blocker = queue.put("blocker", concurrency=TASK)
    first = queue.put("old", unique_key="acct-1", unique_until="started", concurrency=TASK)
    replaced = queue.put_unique(
        "new", unique_key="acct-1", unique_until="started", on_duplicate="replace", concurrency=TASK
    )
    assert (replaced.outcome, replaced.job_id) == ("replaced", first)
    running_one = queue.get(timeout=0)
    assert running_one.job_id == blocker
    with pytest.raises(QueueEmpty):
        queue.get(timeout=0)  # the replaced holder is still under the limit of 1
    running_one.ack()
    record = queue.get(timeout=0)
    assert (record.job_id, record.payload) == (first, "new")
    record.ack()
    assert queue.verify() == []


def test_raise_names_the_caller_s_key_and_writes_nothing(queue: Queue) -> None:
    held = queue.put("a", unique_key="acct-1", unique_until="started", concurrency=TASK)
    with pytest.raises(DuplicateJob, match=f"job {held} holds the unique key 'acct-1':") as raised:
        queue.put("b", unique_key="acct-1", unique_until="started", on_duplicate="raise", concurrency=TASK)
    assert raised.value.key == "acct-1"
    assert queue.stats()["total"] == 1


def test_a_key_is_judged_among_the_jobs_of_its_placement(queue: Queue) -> None:
    """The same key under two placements (a keyed limit's two values), and without limits: three jobs. The
    broadest limit places the job: with a queue's limit first, the key is judged across the queue."""
    per_account_a = (("task:sync:a", 1),)
    per_account_b = (("task:sync:b", 1),)
    ids = [
        queue.put("x", unique_key="nightly", unique_until="started", concurrency=per_account_a),
        queue.put("x", unique_key="nightly", unique_until="started", concurrency=per_account_b),
        queue.put("x", unique_key="nightly", unique_until="started"),
    ]
    assert len(set(ids)) == 3
    queue_wide = [(("queue:default", 4), ("task:sync:a", 1)), (("queue:default", 4), ("task:sync:b", 1))]
    first = queue.put("y", unique_key="report", unique_until="started", concurrency=queue_wide[0])
    assert queue.put("y", unique_key="report", unique_until="started", concurrency=queue_wide[1]) == first
    assert queue.stats()["total"] == 4


def test_put_many_with_keys_and_limits_decides_each_item_and_limits_them(queue: Queue) -> None:
    keys = [f"acct-{n % 3}" for n in range(7)]
    done = queue.put_many_unique(list(range(7)), unique_keys=keys, unique_until="started", concurrency=TASK)
    assert [put.deduplicated for put in done] == [False] * 3 + [True] * 4
    assert queue.put_many(list(range(3)), unique_keys=keys[:3], concurrency=TASK) == [
        put.job_id for put in done[:3]
    ]
    records = queue.get_many(10, timeout=0)
    assert len(records) == 1 and running(queue) == 1
    records[0].ack()
    assert len(queue.get_many(10, timeout=0)) == 1
    states = sorted(job.state.value for put in done[:3] if (job := queue.job(put.job_id)) is not None)
    assert states == [State.DONE.value, State.PENDING.value, State.RUNNING.value]


def test_a_key_and_a_limit_too_long_together_are_refused_before_anything_is_written(queue: Queue) -> None:
    long_limit = (("k" * MAX_KEY, 1),)
    with pytest.raises(InvalidJob, match=r"unique_key with its concurrency key is \d+ bytes in UTF-8"):
        queue.put("a", unique_key="é" * 200, unique_until="started", concurrency=long_limit)
    with pytest.raises(InvalidJob, match="a concurrency limit must be an int"):
        queue.put("a", unique_key="k", unique_until="started", concurrency=(("task:sync", 0),))
    assert queue.stats()["total"] == 0
