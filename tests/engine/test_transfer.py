"""``engine/transfer.py`` on every store kind: a store's jobs, pauses, limits and breakers moved to an
in-memory store and back, each job read the same by its id; the refusals, before anything is written."""

from __future__ import annotations

import pytest

from queue_max_django.engine import Queue, QueueEmpty
from queue_max_django.engine.schedulestate import StoredSchedule
from queue_max_django.engine.stores.memory.store import MemoryStore
from queue_max_django.engine.transfer import Refused, transfer_queues


def fill(queue: Queue) -> list[int]:
    ids = [
        queue.put({"n": 1}, priority=5, name="t.a", metadata={"k": [1, 2]}),
        queue.put({"n": 2}, delay=60, queue="mail"),
        queue.put({"n": 3}, max_retries=0),
    ]
    record = queue.claim(ids[2])
    assert record is not None
    record.nack(ValueError("dead"))
    queue.pause("mail", reason="down")
    queue.set_rate_limit("queue:mail", "5/s")
    return ids


def test_a_store_moves_to_memory_and_back_with_its_ids(queue: Queue) -> None:
    ids = fill(queue)
    before = {job_id: queue.job(job_id) for job_id in ids}
    with Queue(MemoryStore()) as memory:  # a store of its own
        report = transfer_queues(queue, memory, batch=2)
        assert (report.jobs, report.pauses, report.limits) == (3, 1, 1)
        assert report.moved == {"pending": 1, "scheduled": 1, "running": 0, "done": 0, "failed": 1}
        assert {job_id: memory.job(job_id) for job_id in ids} == before
        assert all(queue.job(job_id) is None for job_id in ids)
        assert [p.queue for p in memory.pauses()] == ["mail"]
        back = transfer_queues(memory, queue)  # into the store the jobs left: their ids are free there
        assert back.jobs == 3 and back.already_there == 0
    assert {job_id: queue.job(job_id) for job_id in ids} == before
    assert queue.verify() == []


def test_a_running_job_or_a_live_worker_refuses_the_move_and_a_dry_run_writes_nothing(queue: Queue) -> None:
    fill(queue)
    with Queue(MemoryStore()) as memory:  # a store of its own
        dry = transfer_queues(queue, memory, dry_run=True)
        assert dry.dry_run and dry.jobs == 3 and memory.stats()["total"] == 0
        assert memory.pauses() == [] and memory.rate_limits() == {}
        queue.put("runs")
        record = queue.get(timeout=0)
        with pytest.raises(Refused, match="running on the source"):
            transfer_queues(queue, memory)
        assert memory.stats()["total"] == 0
        record.ack()
        queue.report_worker("web-1:42", stale_after=60.0, pid=42, host="web-1")
        with pytest.raises(
            Refused, match=r"1 worker\(s\) are registered on the source.*web-1:42 \(pid 42 on web-1\)"
        ):
            transfer_queues(queue, memory)
        queue.remove_worker("web-1:42")
        with pytest.raises(Refused, match="same store"):
            transfer_queues(queue, queue)
        assert memory.stats()["total"] == 0


def test_a_limited_dead_letter_moved_and_requeued_is_limited_again(queue: Queue) -> None:
    """A dead letter keeps its limits through a move (to memory and back, on every store kind): requeued,
    it waits while its key's one slot is taken."""
    limit = (("task:t", 1),)
    dead = queue.put("dead", name="t", max_retries=0, concurrency=limit)
    record = queue.claim(dead)
    assert record is not None
    record.nack(ValueError("dead"))
    with Queue(MemoryStore()) as memory:  # a store of its own
        assert transfer_queues(queue, memory).jobs == 1
        assert transfer_queues(memory, queue).jobs == 1
    holder = queue.put("holder", name="t", concurrency=limit)
    running = queue.get(timeout=0)
    assert running is not None and running.job_id == holder
    assert queue.requeue(dead)
    with pytest.raises(QueueEmpty):  # the key's one slot is taken: the requeued job waits
        queue.get(timeout=0)
    running.ack()
    again = queue.get(timeout=0)
    assert again is not None and again.job_id == dead
    again.ack()


def test_kept_schedules_move_as_kept(queue: Queue) -> None:
    """A schedule kept in the store (issue 34) moves with the store, as it was kept: arguments, pause, who
    changed it last; a second move (a rerun) writes it again, the same."""
    made = StoredSchedule("nightly", "app.report", args=[1], interval=60.0, enabled=False, changed_by="ann")
    kept = queue.change_schedule("nightly", lambda _old: made)
    assert kept is not None
    with Queue(MemoryStore()) as memory:  # a store of its own
        report = transfer_queues(queue, memory)
        assert report.schedules == 1 and report.as_dict()["schedules"] == 1
        assert memory.schedules() == [kept]
        assert transfer_queues(queue, memory).schedules == 1  # a rerun
        assert memory.schedules() == [kept]
        assert transfer_queues(memory, queue, dry_run=True).schedules == 1


def test_tagged_jobs_are_found_by_their_tags_after_a_move(queue: Queue) -> None:
    """A job's tags move with it (in its metadata), and the target's tag index finds it (issue 34)."""
    tagged = queue.put("tagged", metadata={"_tags": ["order:42"]})
    queue.put("untagged")
    with Queue(MemoryStore()) as memory:  # a store of its own
        assert transfer_queues(queue, memory).jobs == 2
        assert [job.job_id for job in memory.tagged("order:42")] == [tagged]
        assert transfer_queues(memory, queue).jobs == 2
    assert [job.job_id for job in queue.tagged("order:42")] == [tagged]
