"""Invariant 5, at the worst moments: a process SIGKILLed inside ``put_many``'s write transaction, with part
of the batch already written to it, leaves none of the batch behind; one killed at random moments while
writing big batches leaves each batch whole or absent, and every batch whose ``put_many`` returned whole.
Checked on disk after every kill, by a fresh ``Queue`` (``verify()``, counts, the batches themselves).

(tests/engine/test_crash.py kills a random mix of operations that includes small ``put_many`` calls; these
aim at ``put_many`` itself.)
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from queue_max_django.engine import State
from tests.engine.conftest import open_queue
from tests.engine.locations import StoreLocation, as_location
from tests.engine.procs import Children, kill
from tests.faults import crashprocs
from tests.faults.test_storage import assert_all_there

BATCH = 1000


def batches_on_disk(where: StoreLocation | Path, purged: int = 0) -> tuple[Counter[object], int]:
    """(jobs per batch label, total puts) of the store (its location, or an LMDB store's path), after
    checking it is consistent and that its total counts exactly the jobs there and the ``purged`` ones:
    nothing half-written."""
    with as_location(where).open_queue(retry_backoff=0) as q:
        assert q.verify() == []
        jobs = [job for state in State for job in q.jobs(state, limit=1_000_000)]
        stats = q.stats()
        assert len(jobs) == sum(stats[state.value] for state in State)
        assert stats["total"] == len(jobs) + purged
        return Counter(job.payload.get("batch") for job in jobs if isinstance(job.payload, dict)), stats[
            "total"
        ]


@pytest.mark.slow
@pytest.mark.inv_5
@pytest.mark.parametrize("sync", [False, True], ids=["default", "sync"])
@pytest.mark.lmdb  # the child stops inside LMDB's write transaction by patching Env.write and putmulti
def test_a_kill_inside_the_put_many_transaction_leaves_none_of_the_batch(
    tmp_path: Path, children: Children, sync: bool
) -> None:
    path = tmp_path / "store"
    with open_queue(path, shards=2) as q:
        before = q.put_many([{"batch": "before", "i": i} for i in range(10)])
    for stop_after in (0, 1, BATCH // 2, BATCH - 1):
        child = children.start(crashprocs.put_many_stopped_inside, str(path), BATCH, stop_after, sync)
        assert child.recv() == ["inside", stop_after]
        kill(child)
        seen, total = batches_on_disk(path)
        assert seen == Counter({"before": 10}), f"stopped after {stop_after} records: {seen}"
        assert total == 10
    with open_queue(path) as q:  # the writer lock a dead writer held is free again
        after = q.put_many([{"batch": "after", "i": i} for i in range(BATCH)])
    assert_all_there(path, [*before, *after])


@pytest.mark.slow
@pytest.mark.inv_5
def test_kills_at_random_moments_leave_every_big_batch_whole_or_absent(
    location: StoreLocation, children: Children
) -> None:
    rng = random.Random(5)
    returned: set[int] = set()
    purged = 0
    with location.open_queue(shards=2):
        pass
    for _round in range(6):
        child = children.start(crashprocs.put_many_forever, location, BATCH)
        assert child.recv() == ["ready"]
        time.sleep(rng.uniform(0.02, 0.2))  # a batch takes ~10 ms on LMDB, ~50 ms on PostgreSQL here
        kill(child)
        while True:  # what it said before the kill: batches whose put_many returned
            try:
                message = child.recv(timeout=0.01)
            except AssertionError:
                break
            if message[0] == "returned":
                returned.add(message[1])
        seen, _total = batches_on_disk(location, purged)
        sizes = {label: count for label, count in seen.items() if count != BATCH}
        assert sizes == {}, f"half-written batches: {sizes}"
        with location.open_queue(retry_backoff=0) as q:
            purged += q.purge(State.PENDING)  # next round starts empty (labels restart at 0)
        assert all(label in seen for label in returned), "a batch whose put_many returned was lost"
        returned.clear()
