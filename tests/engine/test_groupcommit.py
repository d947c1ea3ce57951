"""The durable mode's group commit (groupcommit.py), with a commit function that records each call: puts
that arrive while a commit is under way share the next one; a batch that fails is replayed one request at a
time, so each caller gets its own outcome; nobody returns before the commit holding its items returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from queue_max_django.engine.stores.lmdb.groupcommit import GroupCommitter

pytestmark = pytest.mark.lmdb  # the LMDB store's group commit

WAIT = 10.0


class Recorder:
    """A commit function: records each batch, returns one result per item, fails on items named "bad",
    and holds its first call until ``release`` is set (so that others queue up behind it)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished_at: dict[str, float] = {}

    def __call__(self, items: Sequence[str]) -> list[str]:
        if not self.batches:
            self.entered.set()
            assert self.release.wait(WAIT)
        self.batches.append(list(items))
        if "bad" in items:
            raise ValueError("bad item")
        now = time.monotonic()
        for item in items:
            self.finished_at[item] = now
        return [f"id-{item}" for item in items]


def submit_in_threads(committer: GroupCommitter[str, str], items: list[str]) -> tuple[dict, list]:
    results: dict[str, object] = {}
    threads = []
    for item in items:

        def run(item: str = item) -> None:
            try:
                results[item] = (committer.submit([item])[0], time.monotonic())
            except Exception as exc:
                results[item] = exc

        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)
    return results, threads


def wait_for_waiting(committer: GroupCommitter[str, str], count: int) -> None:
    deadline = time.monotonic() + WAIT
    while len(committer._waiting) < count:
        assert time.monotonic() < deadline, "the requests never queued up"
        time.sleep(0.001)


def queue_behind_a_held_commit(
    committer: GroupCommitter[str, str], commit: Recorder, items: list[str]
) -> tuple[dict, dict]:
    """Submit "first" (its commit is held), then ``items`` from their own threads; once all of them wait
    behind it, let the commit go. -> (the results of ``items``, the result of "first"), all threads done."""
    first, first_threads = submit_in_threads(committer, ["first"])
    assert commit.entered.wait(WAIT)
    results, threads = submit_in_threads(committer, items)
    wait_for_waiting(committer, len(items))
    commit.release.set()
    for thread in first_threads + threads:
        thread.join(WAIT)
    return results, first


def test_requests_that_arrive_during_a_commit_share_the_next_one() -> None:
    commit = Recorder()
    committer: GroupCommitter[str, str] = GroupCommitter(commit)
    others = [f"job{i}" for i in range(8)]
    results, first = queue_behind_a_held_commit(committer, commit, others)

    assert commit.batches == [["first"], others]
    assert {item: value[0] for item, value in results.items()} == {item: f"id-{item}" for item in others}
    for item, (_id, returned_at) in results.items():  # nobody returned before its commit did
        assert returned_at >= commit.finished_at[item]
    assert first["first"][0] == "id-first"
    assert not committer.forming


def test_a_failing_batch_is_replayed_one_request_at_a_time() -> None:
    commit = Recorder()
    committer: GroupCommitter[str, str] = GroupCommitter(commit)
    results, _first = queue_behind_a_held_commit(committer, commit, ["a", "bad", "b"])

    assert sorted(commit.batches[1]) == ["a", "b", "bad"]  # tried together first
    assert sorted(map(tuple, commit.batches[2:])) == [("a",), ("b",), ("bad",)]  # then one by one
    assert isinstance(results["bad"], ValueError)
    assert results["a"][0] == "id-a" and results["b"][0] == "id-b"


def test_batches_stay_under_the_size_limit() -> None:
    commit = Recorder()
    committer: GroupCommitter[str, str] = GroupCommitter(commit, max_batch=3)
    items = [f"job{i}" for i in range(7)]
    results, _first = queue_behind_a_held_commit(committer, commit, items)

    assert [len(batch) for batch in commit.batches[1:]] == [3, 3, 1]
    assert sorted(item for batch in commit.batches[1:] for item in batch) == sorted(items)
    assert all(results[item][0] == f"id-{item}" for item in items)


@pytest.mark.parametrize("threads", [1, 16])
def test_every_caller_gets_its_own_results_under_load(threads: int) -> None:
    calls = []

    def commit(items: Sequence[int]) -> list[int]:
        calls.append(len(items))
        return [item * 10 for item in items]

    committer: GroupCommitter[int, int] = GroupCommitter(commit)
    out: dict[int, int] = {}

    def producer(k: int) -> None:
        for i in range(200):
            n = k * 1000 + i
            out[n] = committer.submit([n])[0]

    pool = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(WAIT * 3)
    assert out == {n: n * 10 for n in out}
    assert len(out) == threads * 200 == sum(calls)
    assert not committer.forming
