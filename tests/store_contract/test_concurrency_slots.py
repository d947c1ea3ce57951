"""Concurrency limits under racing claimers, a limit changed between puts, a job's slot given back by each
way a job ends (a job claimed again included), and a requeued dead letter limited again
(``engine/stores/contract/concurrency.py``), on every store. On PostgreSQL a running job holds a slot row of
each key (``postgres/limitslots.py``) that whatever ends it frees lazily: these are the cases where a slot
could leak or be counted twice."""

from __future__ import annotations

import random
import threading
import time

import pytest

from queue_max_django.engine.cancels import CancelOutcome
from queue_max_django.engine.job import CANCELLED, State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.tokens import new_token
from tests.store_contract.conftest import LEASE, T0, claim, job
from tests.store_contract.test_concurrency import lclaim, lput

BOOM = ("boom", "E", None)


class Holder:
    """Claims limited jobs and keeps their tokens, to end them by id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.tokens: dict[int, bytes] = {}

    def take(self, now: float) -> int:
        """A limited claim that must take a job. -> its id."""
        taken = lclaim(self.store, now).claimed
        assert taken is not None
        self.tokens[taken.job_id] = taken.token
        return taken.job_id

    def full(self, now: float) -> bool:
        return lclaim(self.store, now).claimed is None

    def complete(self, now: float, job_id: int) -> None:
        self.store.complete(now, job_id, self.tokens.pop(job_id), None, False)

    def fail(self, now: float, job_id: int, error: tuple[str, str, None], retry_at: float | None) -> None:
        self.store.fail(now, job_id, self.tokens.pop(job_id), error, retry_at, False)


@pytest.mark.sc_concurrency_count
def test_a_job_claimed_again_holds_one_slot_and_a_cancel_gives_its_slot_back(store: Store) -> None:
    held = Holder(store)
    a, b, c, d = lput(store, T0, "a", "b", "c", "d", limits=[("task:t", 2)])
    assert [held.take(T0), held.take(T0)] == [a, b]
    held.fail(T0, a, BOOM, T0 + 1)  # a retry, due in a second: behind c and d
    assert held.take(T0) == c and held.full(T0)  # a's slot came back: b and c run
    held.complete(T0, c)
    assert held.take(T0 + 1) == d and held.full(T0 + 1)
    held.complete(T0 + 1, b)
    assert held.take(T0 + 1) == a and held.full(T0 + 1)  # a again, with a new token: one slot, not two
    assert store.concurrency.running() == {"task:t": 2}
    # a cancel of a running job: its holder ends it as cancelled, and its slot is free again
    assert store.cancel(T0, a) is CancelOutcome.REQUESTED
    assert held.full(T0)
    held.fail(T0, a, ("cancelled", CANCELLED, None), None)
    [e] = lput(store, T0 + 1, "e", limits=[("task:t", 2)])
    assert held.take(T0 + 1) == e and held.full(T0 + 1)
    # a waiting job cancelled held no slot; a running one's lease expiring gives its slot back
    f, g = lput(store, T0 + 2, "f", "g", limits=[("task:t", 2)])
    assert store.cancel(T0 + 2, f) is CancelOutcome.REMOVED
    held.complete(T0 + 2, e)
    assert held.take(T0 + 2) == g and held.full(T0 + 2)
    assert sorted(r.job_id for r in store.recover_expired(T0 + 2 + LEASE + 1)) == sorted([d, g])
    assert store.concurrency.running() == {}
    assert sorted([held.take(T0 + 100), held.take(T0 + 100)]) == sorted([d, g])
    assert held.full(T0 + 100)
    assert store.verify() == []


@pytest.mark.sc_concurrency_claim
def test_a_limit_lowered_after_jobs_were_put_holds_the_new_jobs_until_fewer_run(store: Store) -> None:
    held = Holder(store)
    old = lput(store, T0, *range(4), limits=[("task:t", 3)])
    assert [held.take(T0) for _ in range(3)] == old[:3] and held.full(T0)
    new = lput(store, T0 + 1, "n1", "n2", limits=[("task:t", 1)])  # a deploy lowered the limit to 1
    held.complete(T0 + 1, old[0])
    assert held.take(T0 + 1) == old[3]  # put under the limit of 3: two others run
    held.complete(T0 + 1, old[1])
    held.complete(T0 + 1, old[2])
    assert held.full(T0 + 1)  # one runs: a job limited to 1 waits
    held.complete(T0 + 1, old[3])
    assert held.take(T0 + 2) == new[0] and held.full(T0 + 2)
    # raised again: the jobs put with the larger limit start beside the one running
    more = lput(store, T0 + 3, "m1", "m2", "m3", limits=[("task:t", 3)])
    held.complete(T0 + 3, new[0])
    assert held.take(T0 + 3) == new[1]  # the group's next job first, alone under its limit of 1
    assert held.take(T0 + 3) == more[0] and held.take(T0 + 3) == more[1] and held.full(T0 + 3)
    assert store.concurrency.running() == {"task:t": 3}
    assert store.verify() == []


@pytest.mark.sc_concurrency_requeue
def test_a_requeued_dead_letter_is_limited_again(store: Store) -> None:
    held = Holder(store)
    a, b = lput(store, T0, "a", "b", limits=[("queue:default", 5), ("task:t", 1)])
    assert held.take(T0) == a
    held.fail(T0, a, BOOM, None)  # no retry left: a dead letter
    assert job(store, T0, a).state is State.FAILED
    assert held.take(T0) == b
    assert store.requeue(T0 + 1, a)
    assert job(store, T0 + 1, a).state is State.PENDING
    assert claim(store, T0 + 2, limit=10) == []  # still limited: only the limited claim starts it
    assert store.head(0, T0 + 2, None).limited
    assert held.full(T0 + 2)  # b holds task:t's one slot
    assert store.concurrency.waiting() == {"default\x1ftask:t": 1}
    held.complete(T0 + 2, b)
    assert held.take(T0 + 3) == a and held.full(T0 + 3)
    assert store.concurrency.running() == {"queue:default": 1, "task:t": 1}
    assert store.verify() == []


@pytest.mark.sc_concurrency_claim
def test_racing_claimers_never_pass_a_limit_and_all_jobs_run(store: Store) -> None:
    """Six threads (on PostgreSQL each with its own connection) claim and complete jobs of one task
    limit of 3 at once, in batches of 1 to 3; a job counts as running from before its claim returns until
    after its completion is asked for, and the store's own count is read after each claim."""
    limit, total, threads = 3, 240, 6
    ids = set(lput(store, T0, *range(total), limits=[("task:t", limit)]))
    lock = threading.Lock()
    running: set[int] = set()
    done: set[int] = set()
    peaks: list[int] = []
    errors: list[BaseException] = []
    deadline = time.monotonic() + 60

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while time.monotonic() < deadline:
                with lock:
                    if len(done) == total:
                        return
                outcome = store.concurrency.claim(0, T0, None, LEASE, new_token(), f"w{seed}", None,
                                                  rng.randint(1, 3))  # fmt: skip
                stored = sum(store.concurrency.running().values())
                with lock:
                    running.update(c.job_id for c in outcome.claimed)
                    peaks.append(max(len(running), stored))
                if not outcome.claimed:
                    time.sleep(0.001)
                    continue
                time.sleep(rng.random() * 0.003)
                for c in outcome.claimed:
                    with lock:  # before the completion: what is counted here runs in the store
                        running.discard(c.job_id)
                    store.complete(T0, c.job_id, c.token, None, False)
                    with lock:
                        done.add(c.job_id)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=claimer, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(90)
    assert errors == []
    assert done == ids, f"{len(done)} of {total} done"
    assert max(peaks) <= limit
    assert max(peaks) == limit  # the claims did run side by side
    assert store.concurrency.running() == {}
    assert store.verify() == []


@pytest.mark.sc_concurrency_claim
@pytest.mark.sc_concurrency_batch
def test_a_batch_of_one_group_takes_what_its_limit_leaves_in_claim_order(store: Store) -> None:
    ids = lput(store, T0, *range(5), limits=[("task:t", 3)])
    first = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 10)
    assert [c.job_id for c in first.claimed] == ids[:3] and first.waiting
    assert store.concurrency.running() == {"task:t": 3}
    assert store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 10).claimed == []
    store.complete(T0, ids[0], first.claimed[0].token, None, False)
    again = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 10)
    assert [c.job_id for c in again.claimed] == [ids[3]]
    # a job put under a lower limit of the key, next in line: the batch stops at it (two run already)
    store.complete(T0, ids[1], first.claimed[1].token, None, False)
    [lower] = lput(store, T0 + 1, "x", limits=[("task:t", 2)])
    taken = store.concurrency.claim(0, T0 + 2, None, LEASE, new_token(), "w1", None, 10)
    assert [c.job_id for c in taken.claimed] == [ids[4]] and taken.waiting
    assert store.concurrency.running() == {"task:t": 3}
    assert job(store, T0 + 2, lower).state is State.PENDING
    assert store.verify() == []


@pytest.mark.sc_concurrency_turns
@pytest.mark.sc_concurrency_batch
def test_a_batch_over_several_groups_goes_round_them(store: Store) -> None:
    a = lput(store, T0, "a1", "a2", "a3", "a4", limits=[("task:t:A", 9)])
    b = lput(store, T0 + 1, "b1", "b2", "b3", limits=[("task:t:B", 9)])
    c = lput(store, T0 + 2, "c1", "c2", "c3", limits=[("task:t:C", 2)])
    outcome = store.concurrency.claim(0, T0 + 3, None, LEASE, new_token(), "w1", None, 7)
    assert [x.job_id for x in outcome.claimed] == [a[0], b[0], c[0], a[1], b[1], c[1], a[2]]
    assert outcome.waiting
    # then C is held by its limit of 2, and A's and B's last jobs start, one a claim
    order = [lclaim(store, T0 + 5).claimed for _ in range(3)]
    assert sorted(x.job_id for x in order if x is not None) == sorted([a[3], b[2]])
    assert store.concurrency.running() == {"task:t:A": 4, "task:t:B": 3, "task:t:C": 2}
    assert store.verify() == []
