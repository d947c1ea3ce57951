"""The worker registry: ``Store.locks``'s ``report_worker``, ``workers``, ``prune_workers``,
``remove_worker``."""

from __future__ import annotations

import os

import pytest

from queue_max_django.engine.stores.base import Store
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import T0


@pytest.mark.sc_workers_report
def test_a_report_round_trips_and_keeps_its_first_start(store: Store, clock: FakeClock) -> None:
    locks = store.locks
    locks.report_worker("w2", stale_after=5.0, pid=7, host="h", queues=("a", "b"), threads=3,
                        current_jobs=(1, 2), processed=4, failed=1)  # fmt: skip
    locks.report_worker("w1", stale_after=5.0)
    clock.advance(2)
    locks.report_worker("w1", stale_after=5.0)
    w1, w2 = locks.workers()
    assert (w1.worker_id, w1.pid, w1.started_at, w1.last_heartbeat) == ("w1", os.getpid(), T0, T0 + 2)
    assert (w2.pid, w2.host, w2.queues, w2.threads, w2.current_jobs) == (7, "h", ("a", "b"), 3, (1, 2))
    assert (w2.processed, w2.failed, w2.stale_after, w1.queues) == (4, 1, 5.0, None)
    clock.advance(4)  # w2 last reported 6 s ago
    assert [w.worker_id for w in locks.workers()] == ["w1"]
    assert [w.worker_id for w in locks.workers(include_dead=True)] == ["w1", "w2"]


@pytest.mark.sc_workers_prune
def test_prune_forgets_the_dead_and_remove_one(store: Store, clock: FakeClock) -> None:
    locks = store.locks
    locks.report_worker("old", stale_after=1.0)
    locks.report_worker("live", stale_after=60.0)
    clock.advance(2)
    assert locks.prune_workers() == 1 and locks.prune_workers() == 0
    assert [w.worker_id for w in locks.workers(include_dead=True)] == ["live"]
    assert locks.remove_worker("live") and not locks.remove_worker("live")
