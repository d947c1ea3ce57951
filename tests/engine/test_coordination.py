"""What the processes of one store tell each other: named locks and the worker registry.

The rules proved here: a lock has one holder at a time, across processes; its owner renews it (keeping
``since``); a holder that dies or stops renewing loses it when its ttl runs out; only the owner releases it,
and a released lock keeps its record, expired at the release, for ``last_lock_holder()``.
The worker registry keeps each worker's report (every field round-trips through the store), tells live from
dead workers by their ``stale_after`` on the injected clock, and is shared by every process of the store.
Bad names, owners, ids and ttls raise ``InvalidJob`` before anything is written.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import InvalidJob, LockHolder, Queue, WorkerInfo
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import StoreProbe
from tests.engine.procs import CHILD_TIMEOUT, Children, finish, kill, send, wait_for

Probe = Callable[[Queue], StoreProbe]
MakeQueue = Callable[..., Queue]

BAD_IDS: list[Any] = [
    "",
    None,
    7,
    b"bytes",
    "x" * 201,
    "\U0001f600" * 200,  # 200 characters, 800 bytes: past LMDB's key size
    "\ud800",  # a lone surrogate: not encodable
]


# ------------------------------------------------------------------------------------------ locks


def test_a_lock_has_one_holder_at_a_time(queue: Queue, clock: FakeClock) -> None:
    """A taken lock refuses every other owner until it is released; the holder is who took it."""
    assert queue.lock_holder("leader") is None
    assert queue.acquire_lock("leader", "a", 10)
    assert not queue.acquire_lock("leader", "b", 10)
    assert queue.lock_holder("leader") == LockHolder(owner="a", expires_at=clock.now + 10, since=clock.now)
    assert queue.acquire_lock("other", "b", 10), "locks of different names are independent"
    assert queue.release_lock("leader", "a")
    assert queue.lock_holder("leader") is None
    assert queue.acquire_lock("leader", "b", 10)
    assert queue.lock_holder("leader") == LockHolder(owner="b", expires_at=clock.now + 10, since=clock.now)


def test_the_owner_renews_its_lock_and_keeps_since(queue: Queue, clock: FakeClock) -> None:
    """Acquiring again as the owner extends the expiry from now and keeps ``since``; renewed in time, the
    lock is held for much longer than its ttl."""
    start = clock.now
    assert queue.acquire_lock("leader", "a", 10)
    for _ in range(5):
        clock.advance(8)
        assert not queue.acquire_lock("leader", "b", 10)
        assert queue.acquire_lock("leader", "a", 10)
        assert queue.lock_holder("leader") == LockHolder("a", clock.now + 10, start)
    assert clock.now - start == 40


def test_a_lock_is_free_after_its_ttl(queue: Queue, clock: FakeClock) -> None:
    """An unrenewed lock is free once its ttl ran out: lock_holder() says None and another owner takes it,
    with a ``since`` of its own."""
    assert queue.acquire_lock("leader", "a", 10)
    clock.advance(9.999)
    assert queue.lock_holder("leader") is not None
    assert not queue.acquire_lock("leader", "b", 10)
    clock.advance(0.001)
    assert queue.lock_holder("leader") is None
    assert queue.acquire_lock("leader", "b", 5)
    assert queue.lock_holder("leader") == LockHolder("b", clock.now + 5, clock.now)
    assert not queue.release_lock("leader", "a"), "the old owner cannot release it any more"


def test_a_lock_taken_again_after_it_expired_starts_a_new_since(queue: Queue, clock: FakeClock) -> None:
    """``since`` is when this owner took the lock: renewals keep it, but an owner that let it expire and
    takes it again starts a new tenure (before the fix it kept the old ``since``, as if it had held the lock
    all along, though lock_holder() said the lock was free in between)."""
    assert queue.acquire_lock("leader", "a", 10)
    clock.advance(30)
    assert queue.lock_holder("leader") is None
    assert queue.acquire_lock("leader", "a", 10)
    assert queue.lock_holder("leader") == LockHolder("a", clock.now + 10, clock.now)


def test_release_by_another_owner_does_nothing(queue: Queue, probe: Probe, clock: FakeClock) -> None:
    """release_lock() by someone who does not hold the lock returns False and changes nothing on disk."""
    assert queue.acquire_lock("leader", "a", 10)
    before = probe(queue).coordination_snapshot()
    assert not queue.release_lock("leader", "b")
    assert not queue.release_lock("nobody-holds-this", "a")
    assert not queue.release_lock("leader", 7)  # type: ignore[arg-type]
    assert probe(queue).coordination_snapshot() == before
    assert queue.lock_holder("leader") == LockHolder("a", clock.now + 10, clock.now)


def test_a_lock_survives_reopening_the_store(make_queue: MakeQueue) -> None:
    """A lock lives on disk, not in the Queue object: another Queue on the path sees it."""
    with make_queue() as q:
        assert q.acquire_lock("leader", "a", 60)
    with make_queue() as q:
        assert not q.acquire_lock("leader", "b", 60)
        holder = q.lock_holder("leader")
        assert holder is not None and holder.owner == "a"


def test_a_released_lock_keeps_its_record_expired_at_the_release(
    queue: Queue, probe: Probe, clock: FakeClock
) -> None:
    """release_lock() frees the lock at once but keeps its record, expired as of the release (before the fix
    it deleted it, and nobody could tell when the last holder let go): lock_holder() says None,
    last_lock_holder() says who held it and until when, and anyone takes it again with a new ``since``."""
    taken = clock.now
    assert queue.acquire_lock("leader", "a", 10)
    clock.advance(3)
    assert queue.release_lock("leader", "a")
    assert queue.lock_holder("leader") is None
    assert queue.last_lock_holder("leader") == LockHolder("a", clock.now, taken)
    before = probe(queue).coordination_snapshot()
    clock.advance(1)
    assert not queue.release_lock("leader", "a"), "released already: nothing to give up"
    assert probe(queue).coordination_snapshot() == before
    assert queue.acquire_lock("leader", "b", 10)
    assert queue.lock_holder("leader") == LockHolder("b", clock.now + 10, clock.now)
    assert queue.release_lock("leader", "b")
    assert queue.acquire_lock("leader", "b", 10), "its own released lock: a new tenure"
    assert queue.lock_holder("leader") == LockHolder("b", clock.now + 10, clock.now)


def test_releasing_an_expired_lease_changes_nothing(queue: Queue, probe: Probe, clock: FakeClock) -> None:
    """An owner whose lease ran out holds nothing: release_lock() says False and leaves the record (and its
    expiry, the last moment the owner held the lock) as it was."""
    taken = clock.now
    assert queue.acquire_lock("leader", "a", 10)
    clock.advance(30)
    before = probe(queue).coordination_snapshot()
    assert not queue.release_lock("leader", "a")
    assert probe(queue).coordination_snapshot() == before
    assert queue.last_lock_holder("leader") == LockHolder("a", taken + 10, taken)


def test_last_lock_holder_reads_the_record_held_or_expired(
    queue: Queue, probe: Probe, clock: FakeClock
) -> None:
    """last_lock_holder(): None for a lock nobody ever took; while held, what lock_holder() says; once the
    lease ran out, the expired record (lock_holder() says None); it reads only."""
    assert queue.last_lock_holder("leader") is None
    assert queue.acquire_lock("leader", "a", 10)
    assert (
        queue.last_lock_holder("leader")
        == queue.lock_holder("leader")
        == LockHolder("a", clock.now + 10, clock.now)
    )
    clock.advance(10)
    before = probe(queue).coordination_snapshot()
    assert queue.lock_holder("leader") is None
    assert queue.last_lock_holder("leader") == LockHolder("a", clock.now, clock.now - 10)
    assert probe(queue).coordination_snapshot() == before
    assert queue.last_lock_holder("other") is None


@pytest.mark.inv_7
@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_lock_names_and_owners_raise_before_writing(queue: Queue, probe: Probe, bad: Any) -> None:
    """inv_7: a lock name or owner that is not a str of 1 to 200 characters that fits a store key raises
    InvalidJob and writes nothing (before the fix, 200 emoji reached LMDB and failed there with
    MDB_BAD_VALSIZE, and a lone surrogate with UnicodeEncodeError)."""
    before = probe(queue).snapshot(), probe(queue).coordination_snapshot()
    with pytest.raises(InvalidJob):
        queue.acquire_lock(bad, "owner", 10)
    with pytest.raises(InvalidJob):
        queue.acquire_lock("name", bad, 10)
    with pytest.raises(InvalidJob):
        queue.lock_holder(bad)
    with pytest.raises(InvalidJob):
        queue.last_lock_holder(bad)
    with pytest.raises(InvalidJob):
        queue.release_lock(bad, "owner")
    assert (probe(queue).snapshot(), probe(queue).coordination_snapshot()) == before


@pytest.mark.inv_7
@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "10", None, True])
def test_bad_lock_ttls_raise_before_writing(queue: Queue, probe: Probe, ttl: Any) -> None:
    """inv_7: a ttl that is not a positive finite number raises InvalidJob; the lock stays free."""
    with pytest.raises(InvalidJob):
        queue.acquire_lock("leader", "a", ttl)
    assert queue.lock_holder("leader") is None
    assert probe(queue).coordination_snapshot() == []


def test_the_longest_names_fit(queue: Queue, clock: FakeClock) -> None:
    """The limits are what they say: 200 characters (even multi-byte ones that fit a key) work."""
    name = "é" * 200  # 400 bytes
    assert queue.acquire_lock(name, name, 10)
    assert queue.lock_holder(name) == LockHolder(name, clock.now + 10, clock.now)
    queue.report_worker(name, stale_after=5)
    assert [w.worker_id for w in queue.workers()] == [name]


def take_lock(location: StoreLocation, go_path: str, name: str, owner: str, ttl: float) -> None:
    """Child: say ready, wait for the go file, try to take the lock, send whether it did, then hold on
    (without renewing) until killed."""
    with location.open_queue() as q:
        send(["ready", os.getpid()])
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not os.path.exists(go_path) and time.monotonic() < deadline:
            time.sleep(0.001)
        send([owner, q.acquire_lock(name, owner, ttl)])
        time.sleep(CHILD_TIMEOUT)


@pytest.mark.slow
def test_processes_racing_for_a_lock_get_one_holder(
    make_queue: MakeQueue, location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """Four processes that try to take the same lock at the same instant: exactly one gets it, and every
    process (this one too) sees that owner."""
    with make_queue(clock=None) as q:
        go = tmp_path / "go"
        racers = [children.start(take_lock, location, str(go), "leader", f"p{n}", 60.0) for n in range(4)]
        children.together(go, racers)
        results = dict(child.recv() for child in racers)
        winners = [owner for owner, won in results.items() if won]
        assert len(winners) == 1, results
        holder = q.lock_holder("leader")
        assert holder is not None and holder.owner == winners[0]
        assert not q.acquire_lock("leader", "parent", 60)


@pytest.mark.slow
def test_a_dead_processs_lock_is_free_after_its_ttl(
    make_queue: MakeQueue, location: StoreLocation, tmp_path: Path, children: Children
) -> None:
    """A process that took a lock and was SIGKILLed keeps it until the ttl runs out, and not longer: then
    another process takes it."""
    with make_queue(clock=None):
        pass  # create the store first, so that the child only opens it
    go = tmp_path / "go"
    go.touch()
    holder = children.start(take_lock, location, str(go), "leader", "child", 30.0)
    assert holder.recv()[0] == "ready"
    assert holder.recv() == ["child", True]
    kill(holder)
    with make_queue(clock=None) as q:  # the wall clock: still held
        taken = q.lock_holder("leader")
        assert taken is not None and taken.owner == "child"
        assert not q.acquire_lock("leader", "parent", 30)
    with make_queue(clock=FakeClock(taken.expires_at)) as q:
        assert q.lock_holder("leader") is None
        assert q.acquire_lock("leader", "parent", 30)


# ------------------------------------------------------------------------------------------ workers


def test_a_worker_report_round_trips_every_field(queue: Queue, clock: FakeClock) -> None:
    """Every field of report_worker() is read back by workers() as given; last_heartbeat is now."""
    queue.report_worker(
        "w-1", stale_after=15, pid=4242, host="box", started_at=clock.now - 100, queues=("mail", "reports"),
        threads=8, current_jobs=(11, 12, 13), processed=500, failed=3,
    )  # fmt: skip
    assert queue.workers() == [
        WorkerInfo(
            worker_id="w-1",
            pid=4242,
            host="box",
            started_at=clock.now - 100,
            last_heartbeat=clock.now,
            stale_after=15.0,
            queues=("mail", "reports"),
            threads=8,
            current_jobs=(11, 12, 13),
            processed=500,
            failed=3,
        )
    ]


def test_a_worker_report_has_defaults(queue: Queue, clock: FakeClock) -> None:
    """Left out: this process's pid and host, started_at = the first report, every queue (None), one
    thread, no jobs, zero counts. A later report keeps the first started_at."""
    queue.report_worker("w", stale_after=10)
    first = clock.now
    clock.advance(3)
    queue.report_worker("w", stale_after=10, processed=7)
    (info,) = queue.workers()
    assert (info.pid, info.host) == (os.getpid(), socket.gethostname())
    assert (info.started_at, info.last_heartbeat) == (first, clock.now)
    assert (info.queues, info.threads, info.current_jobs, info.processed, info.failed) == (None, 1, (), 7, 0)


def test_workers_are_live_until_their_stale_after(queue: Queue, clock: FakeClock) -> None:
    """A worker is live while its last report is at most ``stale_after`` old; dead ones are listed only
    with include_dead; reporting again revives one. Workers come ordered by id."""
    queue.report_worker("slow", stale_after=60)
    queue.report_worker("fast", stale_after=5)
    assert [w.worker_id for w in queue.workers()] == ["fast", "slow"]
    clock.advance(5)
    assert [w.worker_id for w in queue.workers()] == ["fast", "slow"]
    clock.advance(0.001)
    assert [w.worker_id for w in queue.workers()] == ["slow"]
    assert [w.worker_id for w in queue.workers(include_dead=True)] == ["fast", "slow"]
    dead = queue.workers(include_dead=True)[0]
    assert not dead.alive(clock.now) and dead.last_heartbeat == clock.now - 5.001
    queue.report_worker("fast", stale_after=5)
    assert [w.worker_id for w in queue.workers()] == ["fast", "slow"]


def test_prune_forgets_dead_workers_only(queue: Queue, clock: FakeClock) -> None:
    """prune_workers() deletes the workers past their stale_after (-> how many) and keeps the live ones."""
    for n, stale_after in enumerate([1, 2, 100]):
        queue.report_worker(f"w{n}", stale_after=stale_after)
    assert queue.prune_workers() == 0
    clock.advance(1.5)
    assert queue.prune_workers() == 1
    assert [w.worker_id for w in queue.workers(include_dead=True)] == ["w1", "w2"]
    clock.advance(1)
    assert queue.prune_workers() == 1
    assert queue.prune_workers() == 0
    assert [w.worker_id for w in queue.workers(include_dead=True)] == ["w2"]


def test_remove_worker(queue: Queue) -> None:
    """remove_worker() deletes one worker (-> True), and says False for an unknown one."""
    queue.report_worker("a", stale_after=10)
    queue.report_worker("b", stale_after=10)
    assert queue.remove_worker("a")
    assert not queue.remove_worker("a")
    assert [w.worker_id for w in queue.workers(include_dead=True)] == ["b"]


def test_the_registry_is_on_disk(make_queue: MakeQueue) -> None:
    """Reports live in the store: a Queue opened later on the path reads them."""
    with make_queue() as q:
        q.report_worker("w", stale_after=10, threads=3, current_jobs=(1,))
    with make_queue() as q:
        (info,) = q.workers()
        assert (info.worker_id, info.threads, info.current_jobs) == ("w", 3, (1,))


@pytest.mark.inv_7
@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_worker_ids_raise_before_writing(queue: Queue, probe: Probe, bad: Any) -> None:
    """inv_7: a worker id that is not a str of 1 to 200 characters that fits a store key: InvalidJob."""
    with pytest.raises(InvalidJob):
        queue.report_worker(bad, stale_after=10)
    with pytest.raises(InvalidJob):
        queue.remove_worker(bad)
    assert probe(queue).coordination_snapshot() == []


@pytest.mark.inv_7
@pytest.mark.parametrize("stale_after", [0, -5, float("nan"), "10", None])
def test_bad_stale_after_raises_before_writing(queue: Queue, probe: Probe, stale_after: Any) -> None:
    """inv_7: stale_after must be a positive finite number."""
    with pytest.raises(InvalidJob):
        queue.report_worker("w", stale_after=stale_after)
    assert probe(queue).coordination_snapshot() == []


def report_and_exit(location: StoreLocation, worker_id: str) -> None:
    """Child: report itself as a worker (pid and host left to the defaults), then exit."""
    with location.open_queue() as q:
        q.report_worker(worker_id, stale_after=3600, queues=["default"], threads=2, current_jobs=[5],
                        processed=9, failed=1)  # fmt: skip
        send(os.getpid())


@pytest.mark.slow
def test_a_worker_report_is_visible_from_another_process(
    make_queue: MakeQueue, location: StoreLocation, children: Children
) -> None:
    """A report written by another process is read here with its pid and host, and pruned once stale."""
    with make_queue(clock=None) as q:
        child = children.start(report_and_exit, location, "child-worker")
        pid = child.recv()
        finish(child)
        (info,) = wait_for(q.workers, what="the child's report")
        assert (info.worker_id, info.pid, info.host) == ("child-worker", pid, socket.gethostname())
        assert (info.queues, info.threads, info.current_jobs, info.processed, info.failed) == (
            ("default",),
            2,
            (5,),
            9,
            1,
        )
    with make_queue(clock=FakeClock(info.last_heartbeat + 3600.001)) as q:
        assert q.workers() == []
        assert q.prune_workers() == 1
        assert q.workers(include_dead=True) == []
