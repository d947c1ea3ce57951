"""Several processes on one store: hand-over between processes, exactly-once claims, recovery after a kill,
fork safety, stale reader slots, map growth, waking idle consumers, durable group commits.

Real processes (fresh interpreters started by tests/engine/procs.py, or os.fork where fork itself is under
test) and real SIGKILL; nothing is mocked. Every wait is bounded generously (the machine is shared) and every
test stays short.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from queue_max_django.engine import Queue, QueueEmpty, State, StoreFull
from queue_max_django.engine.forks import fork_generation
from queue_max_django.engine.stores.lmdb.meta import WAKE_FILE
from queue_max_django.engine.stores.lmdb.wake import SLOT

from . import procs
from .locations import StoreLocation
from .probes import LmdbProbe
from .procs import Children, finish, kill, opened, read_lines, wait_for

pytestmark = pytest.mark.contract


def _fork(child: Callable[[], None]) -> int:
    """os.fork() (this process has a store open and threads running: exactly what is under test); the
    child runs ``child()`` and leaves with os._exit: 0 if it returned, 1 if it raised."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, fork() may deadlock"
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            child()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _wait_child(pid: int) -> int:
    deadline = time.monotonic() + procs.CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


# ------------------------------------------------------------------------------------------ RFC-MP-01


@pytest.mark.rfc_mp_01
def test_job_put_by_one_process_is_got_by_another(location: StoreLocation, children: Children) -> None:
    """RFC-MP-01: a job put by one process is got by another process, in both directions."""
    with opened(location) as q:
        job_id = q.put({"hello": "child"})
        child = children.start(procs.get_one, location)
        assert child.recv() == [job_id, {"hello": "child"}]
        finish(child)
        job = q.job(job_id)
        assert job is not None and job.state is State.DONE and job.result == "acked by a child"

        child = children.start(procs.put_one, location, {"hello": "parent"})
        put_id = child.recv()
        finish(child)
        record = q.get(timeout=10)
        assert (record.job_id, record.payload) == (put_id, {"hello": "parent"})
        record.ack()
        assert q.stats()["done"] == 2
        assert q.verify() == []


@pytest.mark.rfc_mp_01
def test_job_put_by_one_instance_is_got_by_another_in_the_same_process(location: StoreLocation) -> None:
    """RFC-MP-01: two Queue instances on one store in one process see each other's jobs; closing one leaves
    the other working."""
    with opened(location) as first:
        second = location.open_queue()
        job_id = first.put("from the first")
        record = second.get(timeout=0)
        assert (record.job_id, record.payload) == (job_id, "from the first")
        record.ack()
        other_id = second.put("from the second")
        second.close()
        record = first.get(timeout=0)
        assert record.job_id == other_id
        record.ack()
        assert first.stats()["done"] == 2
        assert first.verify() == []


# ------------------------------------------------------------------------------------------ RFC-MP-02


@pytest.mark.slow
@pytest.mark.rfc_mp_02
def test_concurrent_consumers_ack_every_job_exactly_once(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """RFC-MP-02: 3 consumer processes drain 3,000 jobs while 2 producer processes put them (singles and
    put_many); every job is acked exactly once and nothing is left over."""
    singles, batches, batch_size = 300, 24, 50
    per_producer = singles + batches * batch_size
    total = 2 * per_producer
    with opened(location, shards=4) as q:
        consumers = [
            children.start(procs.drain, location, str(tmp_path / f"acked-{n}"), total) for n in range(3)
        ]
        producers = [
            children.start(
                procs.put_jobs, location, str(tmp_path / f"put-{n}"), f"p{n}", singles, batches, batch_size
            )
            for n in range(2)
        ]
        for process in producers + consumers:
            finish(process)

        put = [int(word) for n in range(2) for line in read_lines(tmp_path / f"put-{n}") for word in line]
        acked = Counter(int(line[0]) for n in range(3) for line in read_lines(tmp_path / f"acked-{n}"))
        assert len(put) == len(set(put)) == total
        assert set(acked) == set(put)
        assert [job_id for job_id, times in acked.items() if times != 1] == []
        stats = q.stats()
        assert (stats["done"], stats["total"]) == (total, total)
        assert stats["pending"] + stats["scheduled"] + stats["running"] + stats["failed"] == 0
        done = procs.all_jobs(q)
        assert {job.job_id for job in done} == set(put)
        assert all(job.state is State.DONE and job.attempts == 1 for job in done)
        assert q.verify() == []


# ------------------------------------------------------------------------------------- RFC-MP-03 / 04


def _holding(log: Path) -> list[list[str]] | None:
    lines = read_lines(log)
    return lines if lines and lines[-1] == ["holding"] else None


def _kill_holders(
    location: StoreLocation, tmp_path: Path, children: Children, lease_time: float
) -> list[int]:
    """Two processes claim 5 jobs each with a short lease, then are SIGKILLed. -> the held job ids."""
    holders = []
    for n in range(2):
        log = tmp_path / f"held-{n}"
        holders.append((children.start(procs.claim_and_hold, location, str(log), 5, lease_time), log))
    held: list[int] = []
    for process, log in holders:
        lines = wait_for(lambda log=log: _holding(log), what="the holder to claim its jobs")
        kill(process)
        held.extend(int(line[0]) for line in lines[:-1])
    deadline = max(float(line[1]) for _, log in holders for line in read_lines(log)[:-1])
    time.sleep(max(0.0, deadline - time.time()) + 0.05)  # every lease has now expired
    return held


@pytest.mark.slow
@pytest.mark.rfc_mp_03
def test_claim_index_matches_states_after_kill_and_recovery(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """RFC-MP-03: after holders are SIGKILLed and two processes recover, the claimable index matches the
    job states: verify() finds nothing, and draining gets exactly the pending jobs, once each."""
    with opened(location, shards=3) as q:
        ids = q.put_many(list(range(30)), partition_key="a") + [q.put(n) for n in range(30, 40)]
        held = _kill_holders(location, tmp_path, children, lease_time=0.3)
        assert len(set(held)) == 10
        assert q.stats()["running"] == 10

        recoverers = [
            children.start(procs.recover_once, location, str(tmp_path / f"rec-{n}")) for n in range(2)
        ]
        for process in recoverers:
            finish(process)
        counts = [int(read_lines(tmp_path / f"rec-{n}")[0][0]) for n in range(2)]
        assert sum(counts) == 10
        assert q.verify() == []
        stats = q.stats()
        assert (stats["pending"], stats["running"], stats["total"]) == (40, 0, 40)
        for job_id in held:
            job = q.job(job_id)
            assert job is not None and job.state is State.PENDING
            assert (job.retries, job.error_type) == (1, "LeaseExpired")

        pending = {job.job_id for job in q.jobs(State.PENDING, limit=100)}
        assert pending == set(ids)
        drained = []
        while True:
            try:
                record = q.get(timeout=0)
            except QueueEmpty:
                break
            drained.append(record.job_id)
            record.ack()
        assert sorted(drained) == sorted(ids)
        assert q.verify() == []


@pytest.mark.slow
@pytest.mark.rfc_mp_04
def test_recover_is_idempotent_across_instances(
    location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """RFC-MP-04: recover() run again, by another instance and another process, changes nothing: same
    stats, same job snapshots, no duplicate claimable entries."""
    with opened(location, shards=2) as q, opened(location) as other:
        ids = [q.put(n) for n in range(12)]
        held = _kill_holders(location, tmp_path, children, lease_time=0.3)
        assert q.recover() == len(held) == 10

        stats = q.stats()
        snapshots = [q.job(job_id) for job_id in ids]
        assert other.recover() == 0
        finish(children.start(procs.recover_once, location, str(tmp_path / "again")))
        assert read_lines(tmp_path / "again") == [["0"]]
        assert q.recover() == 0
        assert q.stats() == stats
        assert [q.job(job_id) for job_id in ids] == snapshots
        assert q.verify() == []
        got = []
        with pytest.raises(QueueEmpty):  # drain until empty
            while True:
                record = q.get(timeout=0)
                got.append(record.job_id)
                record.ack()
        assert sorted(got) == sorted(ids)


# ------------------------------------------------------------------------------------ INV-4: fork safety


@pytest.mark.inv_4
@pytest.mark.lmdb  # fork safety of the LMDB environments
def test_forked_child_can_use_the_parents_queue_object(store_path: Path) -> None:
    """inv_4: a child forked while the Queue is open uses the SAME Queue object (put, get, ack); the
    parent's queue keeps working and the store stays consistent."""
    read_fd, write_fd = os.pipe()
    with Queue(store_path, shards=2) as q:  # with its background thread: a realistic parent
        parent_job = q.put("parent's job", partition_key="one shard: FIFO")
        q.stats()

        def child() -> None:
            job_id = q.put("child's job", partition_key="one shard: FIFO")
            record = q.get(timeout=10)
            record.ack(result="done in the child")
            os.write(write_fd, json.dumps([job_id, record.job_id, q.stats()["done"]]).encode())

        pid = _fork(child)
        assert _wait_child(pid) == 0
        os.close(write_fd)
        child_put, child_got, child_done = json.loads(os.read(read_fd, 4096))
        os.close(read_fd)
        assert child_got == parent_job and child_done == 1
        job = q.job(parent_job)
        assert job is not None and job.state is State.DONE and job.result == "done in the child"

        record = q.get(timeout=0)
        assert record.job_id == child_put
        record.ack()
        q.put("after the fork")
        assert q.stats()["done"] == 2 and q.stats()["pending"] == 1
        assert q.verify() == []


@pytest.mark.inv_4
@pytest.mark.lmdb  # fork reopen of the LMDB environments
def test_forked_child_can_open_a_new_queue_on_the_same_path(store_path: Path) -> None:
    """inv_4: a child forked while the parent has the store open opens its own Queue on the same path."""
    with Queue(store_path, shards=2) as q:
        q.put("before")

        def child() -> None:
            with Queue(store_path) as own:
                record = own.get(timeout=10)
                record.ack()
                own.put("from the child")
                assert own.verify() == []

        assert _wait_child(_fork(child)) == 0
        record = q.get(timeout=0)
        assert record.payload == "from the child"
        record.ack()
        stats = q.stats()
        assert (stats["done"], stats["total"]) == (2, 2)
        assert q.verify() == []


@pytest.mark.inv_4
@pytest.mark.lmdb  # the wake file
def test_a_forked_child_marks_wake_slots_as_itself(store_path: Path) -> None:
    """inv_4: the serial numbers of wake hints continue identically in parent and child after a fork; the
    child's hints carry its own pid (it notices the fork by the fork generation, without asking the
    kernel for its pid on every put), so parent and child never write the same value."""
    read_fd, write_fd = os.pipe()
    with Queue(store_path, shards=1, do_recover=False, do_vacuum=False) as q:
        q.put("parent's")
        q.get(timeout=0).ack()
        parent_generation = fork_generation()

        def child() -> None:
            q.put("child's")  # leads the empty queue: a hint
            value = int.from_bytes((store_path / WAKE_FILE).read_bytes()[SLOT : 2 * SLOT], "little")
            os.write(write_fd, json.dumps([fork_generation(), value >> 40, os.getpid()]).encode())

        pid = _fork(child)
        assert _wait_child(pid) == 0
        os.close(write_fd)
        child_generation, hinted_by, child_pid = json.loads(os.read(read_fd, 4096))
        os.close(read_fd)
        assert child_generation == parent_generation + 1
        assert hinted_by == child_pid == pid != os.getpid()
        assert fork_generation() == parent_generation


# ------------------------------------------------------------------------------------ INV-4: stale readers


@pytest.mark.inv_4
@pytest.mark.lmdb  # LMDB reader slots
@pytest.mark.parametrize("environment", ["shard", "control"])
def test_stale_reader_slot_of_killed_process_is_reclaimed(
    store_path: Path, tmp_path: Path, children: Children, environment: str
) -> None:
    """inv_4: a process SIGKILLed while holding a read transaction leaves a stale reader slot, and
    reader_check() reclaims it: in a shard, and in the control data (rate limits, breakers, locks,
    workers), an environment of its own."""
    path = str(store_path)
    # No background upkeep here (sync_interval): its reader_check, every second, would race the one below
    # for the dead process's slot (CI lost that race once).
    with opened(path, shards=1, sync_interval=3600.0) as q:
        q.put("x")
        q.set_rate_limit("name:x", "10/s")
        assert q.reader_check() == 0
        ready = tmp_path / "ready"
        process = children.start(procs.hold_reader, path, str(ready), environment)
        wait_for(ready.exists, what="the reader to start")
        kill(process)
        assert q.reader_check() >= 1
        assert q.reader_check() == 0
        record = q.get(timeout=0)
        record.ack()
        assert q.try_acquire("name:x")
        assert q.verify() == []


# ------------------------------------------------------------------------------------ INV-4: map growth


@pytest.mark.slow
@pytest.mark.inv_4
@pytest.mark.lmdb  # LMDB map growth
def test_map_grows_while_two_processes_write_and_read(
    store_path: Path, tmp_path: Path, children: Children
) -> None:
    """inv_4: with the smallest map (1 MiB), two processes put 3,000 payloads of 2 KiB (the map must grow
    several times) while reading; every job is there and the store is consistent."""
    path = str(store_path)
    count, size = 1500, 2048
    with opened(path, shards=2, map_size=1 << 20) as q:
        process = children.start(procs.grow, path, str(tmp_path / "child"), "child", count, size)
        procs.grow(path, str(tmp_path / "parent"), "parent", count, size)
        finish(process)

        logged = {int(line[0]) for tag in ("child", "parent") for line in read_lines(tmp_path / tag)}
        assert len(logged) == 2 * count
        jobs = procs.all_jobs(q)
        assert {job.job_id for job in jobs} == logged
        for job in jobs:
            n = job.payload["n"]
            assert job.payload["blob"] == bytes([n % 256]) * size
        seen = Counter(job.payload["tag"] for job in jobs)
        assert seen == {"child": count, "parent": count}
        assert q.stats()["total"] == 2 * count
        assert (
            min(env.info()["map_size"] for env in LmdbProbe(q).environments()) >= 4 << 20
        )  # grew at least twice
        assert q.verify() == []


@pytest.mark.inv_4
@pytest.mark.lmdb  # LMDB map growth
def test_map_grows_while_threads_of_one_process_are_inside_transactions(store_path: Path) -> None:
    """inv_4: a map resize waits for every transaction of the process to leave and keeps new ones out
    (LMDB resizes only with no transaction open): 4 threads putting 2 KiB payloads and 2 threads
    claiming and acknowledging, on the smallest map, lose nothing and leave a consistent store."""
    count, size = 600, 2048
    errors: list[BaseException] = []
    with opened(store_path, shards=1, map_size=1 << 20) as q:

        def produce(tag: int) -> None:
            try:
                for n in range(count):
                    q.put({"tag": tag, "n": n, "blob": bytes([n % 256]) * size})
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        def consume() -> None:
            try:
                for _ in range(count):
                    q.get(timeout=procs.CHILD_TIMEOUT).ack()
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(tag,)) for tag in range(4)]
        threads += [threading.Thread(target=consume) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(procs.CHILD_TIMEOUT)
        assert errors == []
        stats = q.stats()
        assert (stats["total"], stats["done"], stats["pending"]) == (4 * count, 2 * count, 2 * count)
        assert (
            LmdbProbe(q).environments()[0].info()["map_size"] >= 8 << 20
        )  # grew at least three times meanwhile
        assert q.verify() == []


@pytest.mark.slow
@pytest.mark.inv_4
@pytest.mark.lmdb  # LMDB map growth
def test_store_opens_while_another_process_grows_the_map(
    store_path: Path, tmp_path: Path, children: Children
) -> None:
    """inv_4: a process can open the store while another one is growing its map (the first transaction
    after the open must follow the growth, not fail)."""
    path = str(store_path)
    with opened(path, shards=1, map_size=1 << 20) as q:
        q.put_many([b"x" * 2048] * 300)  # past 1 MiB: a new open maps exactly the data there is
        log = tmp_path / "opens"
        process = children.start(procs.open_repeatedly, path, str(log), 40)
        while process.is_alive() and q.stats()["total"] < 20_000:
            q.put(b"y" * 2048)
        finish(process)
        outcomes = read_lines(log)
        assert len(outcomes) == 40
        assert [line for line in outcomes if line[0] != "ok"] == []
        assert q.verify() == []


@pytest.mark.inv_4
@pytest.mark.lmdb  # LMDB map full
def test_hard_map_cap_raises_store_full_and_the_store_stays_readable(store_path: Path) -> None:
    """inv_4: map_size_max == map_size caps the store: put raises StoreFull once full, writes nothing, and
    the store stays readable."""
    with opened(store_path, shards=1, map_size=1 << 20, map_size_max=1 << 20) as q:
        ids = []
        with pytest.raises(StoreFull):  # fill until full
            for n in range(2000):
                ids.append(q.put({"n": n, "blob": b"x" * 2048}))
        assert 50 < len(ids) < 2000
        stats = q.stats()
        assert (stats["pending"], stats["total"]) == (len(ids), len(ids))
        with pytest.raises(StoreFull):
            q.put_many([{"blob": b"y" * 2048}] * 10)
        assert q.stats() == stats
        job = q.job(ids[0])
        assert job is not None and job.payload == {"n": 0, "blob": b"x" * 2048}
        assert q.verify() == []
        record = q.get(timeout=0)
        assert record.job_id == ids[0]


# ------------------------------------------------------------------------------------ wake-up


@pytest.mark.slow
@pytest.mark.rule_wake
def test_idle_consumer_in_another_process_wakes_quickly_and_idles_cheaply(
    location: StoreLocation, children: Children
) -> None:
    """rule_wake: a consumer blocked in get() in another process picks up a new job within a fraction of a
    second (its re-check period is 1 s, so this needs the wake-up), and burns almost no CPU while idle."""
    with opened(location) as q:
        process = children.start(procs.wake_consumer, location, 5, 1.0)
        kind, cpu, wall = process.recv()
        assert kind == "idle" and wall >= 0.9
        assert cpu < 0.2, f"an idle consumer used {cpu:.3f} s of CPU in {wall:.2f} s"
        latencies = []
        for n in range(5):
            assert process.recv() == ["ready"]
            time.sleep(0.2)  # the consumer is now blocked in get()
            sent = time.time()
            job_id = q.put({"n": n})
            kind, got_id, got_at = process.recv()
            assert (kind, got_id) == ("got", job_id)
            latencies.append(got_at - sent)
        finish(process)
        assert max(latencies) < 0.5, latencies
        assert statistics.median(latencies) < 0.1, latencies
        assert q.stats()["done"] == 5


# ------------------------------------------------------------------------------------ durable commits


@pytest.mark.slow
@pytest.mark.rule_durable
def test_sync_puts_from_many_threads_all_land(location: StoreLocation) -> None:
    """rule_durable: 16 threads x 50 sync=True puts (sharing group commits) all return unique ids, and every
    job is there after a reopen."""
    ids: list[list[int]] = [[] for _ in range(16)]
    errors: list[BaseException] = []
    with opened(location, shards=2, sync=True) as q:
        barrier = threading.Barrier(16)

        def work(n: int) -> None:
            try:
                barrier.wait(timeout=30)
                for i in range(50):
                    ids[n].append(q.put({"thread": n, "i": i}))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=procs.CHILD_TIMEOUT)
        assert errors == []
        assert q.verify() == []
    flat = [job_id for part in ids for job_id in part]
    assert len(flat) == len(set(flat)) == 800
    with opened(location) as again:
        assert again.stats()["total"] == again.stats()["pending"] == 800
        for n, part in enumerate(ids):
            for i, job_id in enumerate(part):
                job = again.job(job_id)
                assert job is not None and job.payload == {"thread": n, "i": i}
        assert again.verify() == []


@pytest.mark.rule_durable
def test_sync_put_many_from_threads_all_land(location: StoreLocation) -> None:
    """rule_durable: sync=True put_many calls from 8 threads each land whole, and survive a reopen."""
    results: dict[int, list[int]] = {}
    with opened(location, shards=3, sync=True) as q:

        def work(n: int) -> None:
            results[n] = q.put_many([[n, i] for i in range(100)])

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=procs.CHILD_TIMEOUT)
    assert sorted(results) == list(range(8))
    with opened(location) as again:
        for n, part in results.items():
            assert [again.job(job_id).payload for job_id in part] == [[n, i] for i in range(100)]  # type: ignore[union-attr]
        assert again.stats()["total"] == 800
        assert again.verify() == []
