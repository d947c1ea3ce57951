"""Tags: ``Store.tagged_jobs`` and the tag index (``engine/stores/contract/tags.py``), on every store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_max_django.engine.job import State
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.stores.contract.uniqueness import HOLD_STARTED, ON_DUPLICATE_REPLACE, UniqueRule
from queue_max_django.engine.tags import TAGS_KEY
from tests.store_contract.conftest import T0, claim, job, put


def tagged(*tags: str, **metadata: Any) -> bytes:
    return json.dumps({**metadata, TAGS_KEY: sorted(tags)}).encode()


def find(store: Store, *tags: str, **where: Any) -> list[int]:
    options: dict[str, Any] = {"state": None, "queue": None, "name": None, "after": None, "limit": 100}
    return [found.job_id for found in store.tagged_jobs(T0, tags, **{**options, **where})]


def index_entries(store: Store, tag: str) -> int:
    """How many entries the store's own tag index holds for ``tag`` (stray ones too)."""
    if store.kind == "memory":
        return len(store.space.tags.get(tag, []))  # type: ignore[attr-defined]
    if store.kind == "lmdb":
        prefix = tag.encode() + b"\x00"
        total = 0
        for shard in store._shards:  # type: ignore[attr-defined]

            def count(txn: Any, shard: Any = shard) -> int:
                cursor = txn.cursor(db=shard.tags)
                n, found = 0, cursor.set_range(prefix)
                while found and cursor.key().startswith(prefix):
                    n, found = n + 1, cursor.next()
                return n

            total += shard.env.read(count)
        return total
    # PostgreSQL keeps its GIN index with the rows: a row that is gone is in no index.
    row = store.one(  # type: ignore[attr-defined]
        "SELECT (SELECT count(*) FROM qm_jobs WHERE (metadata -> '_tags') @> %(t)s::jsonb) "
        "+ (SELECT count(*) FROM qm_finished WHERE (metadata -> '_tags') @> %(t)s::jsonb)",
        {"t": json.dumps([tag])},
    )
    return int(row[0])


@pytest.mark.sc_tags_stored
def test_tags_read_back_with_the_job_in_every_state_and_a_save_keeps_them(store: Store) -> None:
    [job_id] = put(store, T0, "a", metadata=tagged("order:42", "tenant:acme", note="x"))
    assert job(store, T0, job_id).tags == ("order:42", "tenant:acme")
    [held] = claim(store, T0)
    running = job(store, T0, job_id)
    assert running.state is State.RUNNING and running.tags == ("order:42", "tenant:acme")
    store.save_metadata(T0, job_id, held.token, json.dumps({"note": "y"}).encode())
    saved = job(store, T0, job_id)
    assert saved.metadata["note"] == "y" and saved.tags == ("order:42", "tenant:acme")
    store.complete(T0, job_id, held.token, None, False)
    assert job(store, T0, job_id).tags == ("order:42", "tenant:acme")
    assert find(store, "order:42") == [job_id]


@pytest.mark.sc_tags_list
@pytest.mark.sc_tags_index
def test_a_listing_by_tag_finds_its_jobs_newest_first_across_shards_with_the_filters(store: Store) -> None:
    shards = store.shards
    a = put(store, T0, "a", "b", metadata=tagged("order:42"))  # a batch: all indexed at once
    b = put(store, T0 + 1, "c", metadata=tagged("order:42", "vip"), queue="mail", name="app.send",
            shard=shards - 1)  # fmt: skip
    other = put(store, T0 + 2, "d", metadata=tagged("order:43"))
    put(store, T0 + 3, "e")  # no tags
    put(store, T0 + 4, "f", metadata=json.dumps({"order": 42}).encode())  # metadata without tags
    everything = sorted(a + b, reverse=True)
    assert find(store, "order:42") == everything
    assert find(store, "order:43") == other and find(store, "nope") == []
    assert find(store, "order:42", "vip") == b and find(store, "vip", "order:42") == b
    assert find(store, "order:42", queue="mail") == b and find(store, "order:42", name="app.send") == b
    assert find(store, "order:42", queue="default") == sorted(a, reverse=True)
    [held] = claim(store, T0 + 5, shard=shards - 1, queues=("mail",))
    assert find(store, "order:42", state=State.RUNNING) == b
    assert find(store, "order:42", state=State.PENDING) == sorted(a, reverse=True)
    store.complete(T0 + 5, held.job_id, held.token, None, False)
    assert (
        find(store, "order:42", state=State.DONE) == b and find(store, "order:42", state=State.RUNNING) == []
    )
    assert find(store, "order:42", limit=2) == everything[:2]


@pytest.mark.sc_tags_paging
def test_pages_by_tag_go_on_from_the_last_id_even_when_that_job_is_gone(store: Store) -> None:
    ids = sorted(put(store, T0, *range(7), metadata=tagged("t")), reverse=True)
    first = find(store, "t", limit=3)
    assert first == ids[:3]
    assert store.delete(T0, first[-1], None)
    assert find(store, "t", limit=3, after=first[-1]) == ids[3:6]
    assert find(store, "t", limit=3, after=ids[5]) == ids[6:]
    assert find(store, "t", after=ids[-1]) == []


@pytest.mark.sc_tags_index
def test_removed_jobs_leave_the_tag_index(store: Store) -> None:
    deleted, purged, cancelled = (put(store, T0, "x", metadata=tagged("gone"))[0] for _ in range(3))
    [kept] = put(store, T0 + 10, "y", metadata=tagged("gone"))
    [vacuumed] = put(store, T0, "z", metadata=tagged("gone"), queue="done")
    [held] = claim(store, T0, queues=("done",))
    store.complete(T0, vacuumed, held.token, None, False)
    assert index_entries(store, "gone") == 5
    assert store.delete(T0, deleted, None)
    assert store.purge(T0 + 5, State.PENDING, T0 + 1) == 2  # purged and cancelled (both enqueued at T0)
    assert store.vacuum(T0 + 20, T0 + 1, 0.0) == 1
    assert find(store, "gone") == [kept] and index_entries(store, "gone") == 1
    assert cancelled not in find(store, "gone") and purged not in find(store, "gone")


@pytest.mark.sc_tags_index
def test_a_replacing_duplicate_gives_the_waiting_job_its_tags_in_the_index_too(store: Store) -> None:
    rule = UniqueRule(b"sync:1", HOLD_STARTED, 0, ON_DUPLICATE_REPLACE)
    [first] = put(store, T0, "a", unique=rule, metadata=tagged("old", "kept"))
    [again] = put(store, T0 + 1, "b", unique=rule, metadata=tagged("new", "kept"))
    assert again == first and job(store, T0, first).tags == ("kept", "new")
    assert find(store, "old") == [] and find(store, "new") == [first] and find(store, "kept") == [first]
    assert index_entries(store, "old") == 0
    assert store.delete(T0 + 2, first, None)
    assert (index_entries(store, "new"), index_entries(store, "kept")) == (0, 0)
