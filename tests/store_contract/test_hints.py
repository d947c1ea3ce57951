"""Waking consumers: what ``Store.hints`` tells about the operations that make a job claimable."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from queue_max_django.engine.stores.base import Store
from tests.store_contract.conftest import LEASE, T0, claim, put


def hinted(store: Store, operation: Callable[[], object], shard: int = 0) -> None:
    before = store.hints.mark()
    operation()
    changed = store.hints.changed_since(before, store.hints.mark())
    assert changed is None or shard in changed, changed


@pytest.mark.sc_hints
@pytest.mark.sc_hints_marks
def test_operations_that_make_a_job_claimable_hint_its_shard(store: Store) -> None:
    hinted(store, lambda: put(store, T0, "first"))
    [held] = claim(store, T0)
    hinted(store, lambda: store.release(T0, held.job_id, held.token))
    [held] = claim(store, T0)
    hinted(store, lambda: store.fail(T0, held.job_id, held.token, ("e", "E", None), T0, False))
    claim(store, T0)
    hinted(store, lambda: store.recover_expired(T0 + 2 * LEASE))
    put(store, T0, "later", ready_at=T0 + 5)
    hinted(store, lambda: store.promote_due(None, T0 + 2 * LEASE))
    last = store.shards - 1
    hinted(store, lambda: put(store, T0, "there", shard=last, queue="empty"), last)  # it leads its queue


@pytest.mark.sc_hints_close
def test_close_wakes_waiters_and_later_waits_return_at_once(store: Store) -> None:
    store.hints.changed()
    store.hints.close()
    started = time.monotonic()
    store.hints.wait(5.0)
    assert time.monotonic() - started < 2.0
