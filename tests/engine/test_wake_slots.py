"""The wake file's slots: every commit that can raise a queue head marks its shard's slot, and a consumer
re-reads only the shards whose slot changed. What must hold whoever writes: a consumer busy with one shard
never passes over a higher-priority job put into another shard by another ``Queue`` or another process."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from queue_max_django.engine import Queue, QueueEmpty
from queue_max_django.engine.job import shard_of
from queue_max_django.engine.stores.lmdb.meta import WAKE_FILE
from queue_max_django.engine.stores.lmdb.wake import SLOT
from tests.engine import procs
from tests.engine.conftest import FakeClock, open_queue
from tests.engine.procs import Children
from tests.engine.test_contract_records import partition_keys_for_distinct_shards

pytestmark = pytest.mark.lmdb  # the wake file and its slots are the LMDB store's


def slots_on_disk(path: Path, shards: int = 6) -> list[bytes]:
    data = (path / WAKE_FILE).read_bytes().ljust(SLOT * (shards + 1), b"\0")
    return [data[i : i + SLOT] for i in range(0, SLOT * (shards + 1), SLOT)]


def busy_on(home: str, producer: Queue, consumer: Queue, label: str = "low", priority: int = 0) -> None:
    """Two jobs in ``home``'s shard; ``consumer`` takes the first: its view now knows only that shard."""
    producer.put(f"{label} 1", priority=priority, partition_key=home)
    producer.put(f"{label} 2", priority=priority, partition_key=home)
    assert consumer.get(0).payload == f"{label} 1"


@pytest.mark.contract
@pytest.mark.rule_wake
def test_a_put_that_leads_its_queue_marks_only_its_shards_slot(
    store_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """rule_wake: a job that becomes its queue's head writes its own shard's slot on disk; one queued behind
    it writes nothing (no consumer can be waiting for it)."""
    key = partition_keys_for_distinct_shards(tmp_path, 1)[0]
    with open_queue(store_path, clock) as q:
        before = slots_on_disk(store_path)
        first = q.put("head", partition_key=key)
        after_head = slots_on_disk(store_path)
        q.put("behind", partition_key=key)
        after_behind = slots_on_disk(store_path)
        q.put("urgent", partition_key=key, priority=5)
        after_urgent = slots_on_disk(store_path)

    shard_slot = shard_of(first) + 1
    changed = [i for i in range(7) if before[i] != after_head[i]]
    assert changed == [shard_slot]
    assert after_behind == after_head
    assert [i for i in range(7) if after_behind[i] != after_urgent[i]] == [shard_slot]


@pytest.mark.contract
@pytest.mark.rule_wake
def test_two_queues_of_one_process_never_write_the_same_slot_value(store_path: Path, tmp_path: Path) -> None:
    """rule_wake: hints from two ``Queue`` objects in one process differ, or one would hide the other."""
    key = partition_keys_for_distinct_shards(tmp_path, 1)[0]
    values = []
    with open_queue(store_path) as a, open_queue(store_path) as b:
        for q in (a, b, a, b):
            job = q.put("x", partition_key=key)  # the queue is empty: this job leads it
            values.append(slots_on_disk(store_path)[shard_of(job) + 1])
            q.get(0).ack()
    assert len(set(values)) == 4


@pytest.mark.contract
@pytest.mark.rule_priority
def test_a_busy_consumer_sees_a_higher_priority_job_put_by_another_queue(
    store_path: Path, tmp_path: Path
) -> None:
    """rule_priority: the consumer's view of the other shards is refreshed by another Queue's hint."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path) as consumer, open_queue(store_path) as producer:
        busy_on(home, producer, consumer)
        producer.put("urgent", priority=50, partition_key=other)

        assert consumer.get(0).payload == "urgent"
        assert consumer.get(0).payload == "low 2"


@pytest.mark.contract
@pytest.mark.rule_priority
def test_a_busy_consumer_sees_a_higher_priority_job_put_by_another_process(
    store_path: Path, tmp_path: Path, children: Children
) -> None:
    """rule_priority: the same across processes: the child's put marks its shard's slot."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path) as consumer:
        busy_on(home, consumer, consumer)
        options = {"priority": 50, "partition_key": other}
        child = children.start(procs.put_one, str(store_path), "urgent", options)
        child.recv()
        procs.finish(child)

        assert consumer.get(0).payload == "urgent"
        assert consumer.get(0).payload == "low 2"


@pytest.mark.contract
@pytest.mark.rule_priority
def test_a_retry_or_release_in_another_queue_is_seen_by_a_busy_consumer(
    store_path: Path, tmp_path: Path
) -> None:
    """rule_priority: a nack (immediate retry) and a release raise a head too, and mark their shard."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path) as consumer, open_queue(store_path) as worker:
        worker.put("urgent", priority=50, partition_key=other)
        held = worker.get(0)
        busy_on(home, consumer, consumer)
        held.nack("try again", delay=0)
        assert consumer.get(0).payload == "urgent"

        again = worker.get(0)
        assert again.payload == "low 2"
        again.release()
        assert consumer.get(0).payload == "low 2"


@pytest.mark.contract
@pytest.mark.rule_priority
@pytest.mark.parametrize("order", [(20, 50), (50, 20)])
def test_a_busy_consumer_reads_every_shard_hinted_since_its_last_look(
    store_path: Path, tmp_path: Path, order: tuple[int, int]
) -> None:
    """rule_priority: with two shards hinted at once, both are read (the view only skips reading when one
    shard changed), whichever of them holds the higher priority."""
    home, first, second = partition_keys_for_distinct_shards(tmp_path, 3)
    with open_queue(store_path) as consumer, open_queue(store_path) as producer:
        busy_on(home, producer, consumer)
        producer.put(f"p{order[0]}", priority=order[0], partition_key=first)
        producer.put(f"p{order[1]}", priority=order[1], partition_key=second)

        assert [consumer.get(0).payload for _ in range(3)] == ["p50", "p20", "low 2"]


def test_a_store_whose_wake_file_is_short_still_serves_every_shard(store_path: Path, tmp_path: Path) -> None:
    """A wake file written by no hint yet (or by an older version: one byte) has no slots to compare:
    the consumer reads every shard instead of trusting a view it cannot check."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with Queue(store_path, do_recover=False, do_vacuum=False) as q:
        q.put("low", partition_key=home)
        (store_path / WAKE_FILE).write_bytes(b"\x01")
        assert q.get(0).payload == "low"
        q.put("urgent", priority=9, partition_key=other)
        (store_path / WAKE_FILE).write_bytes(b"\x02")
        assert q.get(0).payload == "urgent"


@pytest.mark.contract
@pytest.mark.rule_priority
def test_a_hinted_shard_holding_a_lower_priority_does_not_pass_over_a_higher_one(
    store_path: Path, tmp_path: Path
) -> None:
    """rule_priority: a consumer tries the one hinted shard first without reading it; a claim there that
    meets a lower priority than another shard's is declined, and the higher one is served."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path) as consumer, open_queue(store_path) as producer:
        busy_on(home, producer, consumer, "high", priority=5)
        producer.put("low", priority=0, partition_key=other)  # leads its (empty) queue there: a hint

        assert [consumer.get(0).payload for _ in range(2)] == ["high 2", "low"]


@pytest.mark.contract
@pytest.mark.rule_delay
def test_a_hinted_shard_whose_scheduled_job_came_due_serves_it(
    store_path: Path, tmp_path: Path, clock: FakeClock
) -> None:
    """rule_delay: the claim at a hinted shard reports its earliest ETA; one already due is promoted and
    served at once, in priority order, even though the consumer never read that shard's ETA."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path, clock) as consumer, open_queue(store_path, clock) as producer:
        busy_on(home, producer, consumer, "now")
        producer.put("later", priority=9, delay=5, partition_key=other)  # the earliest ETA there: a hint
        assert consumer.get(0).payload == "now 2"  # not due yet
        with pytest.raises(QueueEmpty):
            consumer.get(0)
        clock.advance(10)

        assert consumer.get(0).payload == "later"
        assert consumer.verify() == []


@pytest.mark.contract
@pytest.mark.rule_delay
def test_a_due_job_in_a_shard_hinted_after_the_clock_passed_its_eta_is_served_first(
    store_path: Path, tmp_path: Path, clock: FakeClock
) -> None:
    """rule_delay: the hint arrives, the consumer does not read the shard, and the job is already due
    when the consumer claims: the claim finds the due ETA, promotes it and takes it (priority 9 first)."""
    home, other = partition_keys_for_distinct_shards(tmp_path, 2)
    with open_queue(store_path, clock) as consumer, open_queue(store_path, clock) as producer:
        busy_on(home, producer, consumer, "now")
        producer.put("due", priority=9, delay=5, partition_key=other)
        clock.advance(10)

        assert [consumer.get(0).payload for _ in range(2)] == ["due", "now 2"]
        with pytest.raises(QueueEmpty):
            consumer.get(0)


def test_an_idle_get_in_a_process_with_many_descriptors_waits_without_spinning(store_path: Path) -> None:
    """rule_wake: the wait works when the watch's descriptor is numbered above 1023 (select() cannot take
    it): an idle get() sleeps through its timeout on little CPU, and a put from another thread wakes it."""
    spare: list[int] = []
    try:
        while not spare or spare[-1] < 1100:  # push the next descriptor numbers above select()'s limit
            spare.append(os.open(os.devnull, os.O_RDONLY))
        with open_queue(store_path) as q:
            cpu, started = time.process_time(), time.monotonic()
            with pytest.raises(QueueEmpty):
                q.get(timeout=0.3)
            assert time.monotonic() - started >= 0.29
            assert time.process_time() - cpu < 0.1  # it slept: a failing select() would spin

            threading.Timer(0.05, q.put, args=("late",)).start()
            assert q.get(timeout=5).payload == "late"
    finally:
        for fd in spare:
            os.close(fd)


def test_a_hint_written_after_a_consumers_last_look_ends_its_wait_at_once(store_path: Path) -> None:
    """A busy consumer reads the slots through a mapping and leaves the inotify events unread; before it
    sleeps it drains them and compares the slots once more, so a hint that came after its last look (its
    event among those drained) ends the wait instead of being lost until the wait's timeout."""
    with open_queue(store_path, FakeClock()) as producer, open_queue(store_path, FakeClock()) as consumer:
        waiter, writer = consumer._store.hints, producer._store.hints
        assert waiter.changed()  # the first ask starts this thread's watch
        assert not waiter.changed()
        writer.notify(2)  # after the consumer's last look
        returned = threading.Event()
        thread = threading.Thread(target=lambda: (waiter.wait(60), returned.set()))
        thread.start()
        thread.join(10)
        assert returned.is_set(), "the wait missed a hint written before it began"
        assert waiter.changed()  # the next look sees the shard that was hinted


def test_the_wake_file_is_sized_to_every_slot_when_first_opened(store_path: Path) -> None:
    """The slots are mapped: the file is grown to hold all of them (zeros: never written) before."""
    with open_queue(store_path, FakeClock()) as q:
        q.put("x")
        assert (store_path / WAKE_FILE).stat().st_size == SLOT * (q.shard_count + 1)
