"""A claimed job: ``heartbeat``, ``complete``, ``complete_many``, ``fail``, ``release``, ``save_metadata``,
and the claim token they check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_max_django.engine.breaker import BreakerPolicy
from queue_max_django.engine.errors import QueueCorrupted
from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.tokens import new_token
from tests.store_contract.conftest import LEASE, T0, claim, job, pack, put

ERROR = ("boom", "ValueError", "Traceback ...")

CALLS: dict[str, Callable[[Store, int, bytes], Any]] = {
    "heartbeat": lambda s, i, t: s.heartbeat(T0 + 5, i, t, LEASE),
    "complete": lambda s, i, t: s.complete(T0 + 5, i, t, pack("r"), False),
    "fail": lambda s, i, t: s.fail(T0 + 5, i, t, ERROR, None, False),
    "release": lambda s, i, t: s.release(T0 + 5, i, t),
    "save_metadata": lambda s, i, t: s.save_metadata(T0 + 5, i, t, b'{"a": 1}'),
}


@pytest.mark.sc_token
@pytest.mark.parametrize("call", CALLS, ids=list(CALLS))
def test_a_token_that_no_longer_holds_the_job_writes_nothing(store: Store, call: str) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    with pytest.raises(QueueCorrupted, match="held by another claim"):
        CALLS[call](store, job_id, new_token())
    store.complete(T0 + 1, job_id, held.token, None, False)
    before, counts = job(store, T0 + 2, job_id), store.counts()
    with pytest.raises(QueueCorrupted, match="not running"):
        CALLS[call](store, job_id, held.token)
    assert job(store, T0 + 2, job_id) == before and store.counts() == counts
    with pytest.raises(QueueCorrupted, match="no longer exists"):
        CALLS[call](store, 10**15 << 8, held.token)


@pytest.mark.sc_heartbeat
@pytest.mark.sc_token
def test_heartbeat_extends_the_lease_even_once_expired_until_recovery(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    expiry, cancel = store.heartbeat(T0 + LEASE + 5, job_id, held.token, 60.0)
    assert expiry == pytest.approx(T0 + LEASE + 65, abs=1e-6) and cancel is False
    assert job(store, T0, job_id).lease_until == pytest.approx(expiry, abs=1e-6)
    store.cancel(T0 + 70, job_id)
    assert store.heartbeat(T0 + 71, job_id, held.token, 60.0)[1] is True


@pytest.mark.sc_complete
def test_complete_makes_the_job_done_with_its_result(store: Store) -> None:
    [job_id] = put(store, T0, "x", metadata=b'{"m": 1}')
    [held] = claim(store, T0)
    store.complete(T0 + 3, job_id, held.token, pack({"ok": True}), False)
    done = job(store, T0 + 3, job_id)
    assert done.state is State.DONE and done.result == {"ok": True} and done.metadata == {"m": 1}
    assert done.finished_at == pytest.approx(T0 + 3, abs=1e-6) and done.lease_until is None
    assert (store.counts()["running"], store.counts()["done"]) == (0, 1)


@pytest.mark.sc_complete_many
def test_complete_many_skips_what_its_token_lost_and_completes_the_rest(store: Store) -> None:
    ids = put(store, T0, "a", "b", "c")
    held = claim(store, T0, limit=3)
    items = [(c.job_id, c.token, pack(c.payload)) for c in held]
    items[1] = (items[1][0], new_token(), None)
    skipped = store.complete_many(T0 + 1, items, False)
    assert list(skipped) == [ids[1]] and "held by another claim" in skipped[ids[1]]
    assert [job(store, T0, i).state for i in ids] == [State.DONE, State.RUNNING, State.DONE]
    assert store.complete_many(T0 + 2, [(ids[1], held[1].token, None)], False) == {}


@pytest.mark.sc_fail
def test_fail_charges_a_retry_and_goes_where_the_caller_decided(store: Store) -> None:
    store.control.set_breaker("queue:default", BreakerPolicy(threshold=1))
    now_id, later_id, dead_id = put(store, T0, "now", "later", "dead")
    held = {c.job_id: c for c in claim(store, T0, limit=3)}
    assert store.fail(T0 + 1, now_id, held[now_id].token, ERROR, T0 + 1, False) is State.PENDING
    assert store.fail(T0 + 1, later_id, held[later_id].token, ERROR, T0 + 50, False) is State.SCHEDULED
    assert store.fail(T0 + 1, dead_id, held[dead_id].token, ERROR, None, False) is State.FAILED
    for job_id in (now_id, later_id, dead_id):
        found = job(store, T0 + 1, job_id)
        assert found.retries == 1 and found.attempts == 1
        assert (found.error, found.error_type, found.traceback) == ERROR
        assert found.errors == (("ValueError", "boom"),)
    assert job(store, T0 + 1, later_id).eta == pytest.approx(T0 + 50, abs=1e-6)
    assert job(store, T0 + 1, dead_id).finished_at == pytest.approx(T0 + 1, abs=1e-6)
    counts = store.counts()
    assert (counts["pending"], counts["scheduled"], counts["failed"], counts["running"]) == (1, 1, 1, 0)
    assert store.control.state().breakers["queue:default"].breaker.failures == 0  # the caller's to charge


@pytest.mark.sc_fail
def test_a_job_retried_at_once_goes_behind_the_waiting_ones(store: Store) -> None:
    [first] = put(store, T0, "first")
    [waiting] = put(store, T0 + 1, "waiting")
    [held] = claim(store, T0 + 2)
    store.fail(T0 + 3, first, held.token, ERROR, T0 + 3, False)
    assert [c.job_id for c in claim(store, T0 + 4, limit=2)] == [waiting, first]


@pytest.mark.sc_release
def test_release_gives_the_job_back_uncharged_at_its_place(store: Store) -> None:
    first, second = put(store, T0, "first", "second")
    [held] = claim(store, T0 + 1)
    store.release(T0 + 2, first, held.token)
    back = job(store, T0 + 2, first)
    assert back.state is State.PENDING and (back.retries, back.attempts) == (0, 0)
    assert back.started_at is None and back.lease_until is None
    assert [c.job_id for c in claim(store, T0 + 3, limit=2)] == [first, second]


@pytest.mark.sc_release
def test_release_with_a_later_time_schedules_the_job(store: Store) -> None:
    [job_id] = put(store, T0, "x")
    [held] = claim(store, T0)
    store.release(T0 + 1, job_id, held.token, T0 + 30)
    back = job(store, T0 + 1, job_id)
    assert back.state is State.SCHEDULED and back.eta == pytest.approx(T0 + 30, abs=1e-6)
    assert back.retries == 0


@pytest.mark.sc_save_metadata
def test_save_metadata_replaces_the_running_jobs_metadata_only(store: Store) -> None:
    [job_id] = put(store, T0, "x", metadata=b'{"a": 1}')
    [held] = claim(store, T0)
    store.save_metadata(T0 + 1, job_id, held.token, b'{"b": 2}')
    found = job(store, T0 + 1, job_id)
    assert found.metadata == {"b": 2} and found.state is State.RUNNING
    store.save_metadata(T0 + 1, job_id, held.token, None)
    assert job(store, T0 + 1, job_id).metadata == {}
