"""rule_store_meta: store.json is checked against the shard folders on disk, and its values against their
types and ranges, when a store is opened (and when it is only read: checks, compaction). Nothing is opened
or changed on a mismatch."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import Queue, State
from queue_max_django.engine.errors import StoreMismatch
from queue_max_django.engine.stores.lmdb.compact import compact_store
from queue_max_django.engine.stores.lmdb.meta import read_store_meta
from tests.engine.conftest import FakeClock, open_queue

pytestmark = pytest.mark.lmdb  # store.json and the shard folders


def _store_with_jobs(path: Path, clock: FakeClock, shards: int = 6, jobs: int = 60) -> None:
    with open_queue(path, clock, shards=shards) as q:
        q.put_many(list(range(jobs // shards)), partition_key=0)
        for shard in range(shards):
            q.put_many_to_shard(shard, list(range(jobs // shards)))


def _snapshot(path: Path) -> dict[str, Any]:
    """Names, sizes and store.json of the store directory: what a refused open must leave as it was."""
    return {
        "names": sorted(os.listdir(path)),
        "meta": (path / "store.json").read_bytes() if (path / "store.json").exists() else None,
        "sizes": {
            n: os.path.getsize(path / n / "data.mdb")
            for n in os.listdir(path)
            if (path / n / "data.mdb").exists()
        },
    }


def _edit(path: Path, **changes: Any) -> None:
    meta = json.loads((path / "store.json").read_text())
    meta.update(changes)
    (path / "store.json").write_text(json.dumps(meta))


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.parametrize(
    ("shards", "message"),
    [
        (
            4,
            "that says 4 shards, but shard-004, shard-005 are there too. Nothing was opened. If store.json "
            'was edited, restore it ("shards": 6 matches the folders there)',
        ),
        (5, "that says 5 shards, but shard-005 is there too."),
        (8, "that says 8 shards, but shard-006, shard-007 are missing."),
    ],
)
def test_a_shard_count_that_disagrees_with_the_folders_is_refused(
    tmp_path: Path, clock: FakeClock, shards: int, message: str
) -> None:
    """rule_store_meta: store.json edited from 6 shards to 4 or 5 (the jobs of the others would vanish from
    view) or to 8 (jobs would be routed by another count) raises StoreMismatch naming the folders; the same
    for a read-only look (read_store_meta, used by the system checks) and for compaction. Nothing on disk
    changes, and with store.json restored every job is there."""
    path = tmp_path / "store"
    _store_with_jobs(path, clock)
    _edit(path, shards=shards)
    before = _snapshot(path)

    for attempt in (
        lambda: open_queue(path, clock),
        lambda: open_queue(path, clock, shards=shards),
        lambda: read_store_meta(str(path)),
        lambda: compact_store(path),
    ):
        with pytest.raises(StoreMismatch) as caught:
            attempt()
        assert f"the store at {str(path)!r} does not match its store.json: {message}" in str(caught.value)
    assert _snapshot(path) == before

    _edit(path, shards=6)
    with open_queue(path, clock) as q:
        assert q.stats()["pending"] == 70 and q.verify() == []


@pytest.mark.contract
@pytest.mark.rule_store_meta
def test_a_missing_shard_folder_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """rule_store_meta: a shard folder removed from under a store raises StoreMismatch naming it (its jobs
    are gone); no folder is made in its place."""
    path = tmp_path / "store"
    _store_with_jobs(path, clock, shards=3)
    (path / "shard-001").rename(tmp_path / "elsewhere")
    with pytest.raises(StoreMismatch, match=r"that says 3 shards, but shard-001 is missing\. .*restore it;"):
        open_queue(path, clock)
    assert not (path / "shard-001").exists()


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (300, "300"), (-1, "-1"), ("6", "'6'"), (6.0, "6.0"), (True, "True"), (None, "None")],
    ids=repr,
)
def test_a_shard_count_of_the_wrong_type_or_range_is_refused(
    tmp_path: Path, clock: FakeClock, value: Any, shown: str
) -> None:
    """rule_store_meta: "shards" in store.json must be an int from 1 to 256: anything else raises
    StoreMismatch naming the value, on open and on a read-only look (it failed later with a ValueError, or
    int() made 6.5 into 6)."""
    path = tmp_path / "store"
    _store_with_jobs(path, clock, shards=2, jobs=4)
    _edit(path, shards=value)
    before = _snapshot(path)
    expected = rf'store\.json: "shards" must be an int from 1 to 256, not {shown}\.'
    with pytest.raises(StoreMismatch, match=expected):
        open_queue(path, clock)
    with pytest.raises(StoreMismatch, match=expected):
        read_store_meta(str(path))
    assert _snapshot(path) == before


@pytest.mark.contract
@pytest.mark.rule_store_meta
@pytest.mark.parametrize("value", ["1", 1.0, True, 0, None], ids=repr)
def test_a_layout_of_the_wrong_type_is_refused(tmp_path: Path, clock: FakeClock, value: Any) -> None:
    """rule_store_meta: "layout" must be an int >= 1 (a float or a str passed through int() before)."""
    path = tmp_path / "store"
    _store_with_jobs(path, clock, shards=2, jobs=4)
    _edit(path, layout=value)
    with pytest.raises(StoreMismatch, match=r'"layout" must be a layout version \(an int >= 1\)'):
        open_queue(path, clock)


@pytest.mark.contract
@pytest.mark.rule_store_meta
def test_a_new_store_has_its_shard_folders_before_its_store_json(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rule_store_meta: a store is made folders first, store.json last, so a process killed in between
    leaves no store.json and the next open makes the store again (the folders are checked only against a
    store.json). Simulated: the first open fails as it opens its first LMDB environment."""
    path = tmp_path / "store"
    import queue_max_django.engine.stores.lmdb.store as queue_module

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(queue_module.REGISTRY, "acquire", refuse)
        with pytest.raises(OSError, match="killed"):
            Queue(path, shards=3, do_recover=False, do_vacuum=False)
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("shard-")) == [
        "shard-000", "shard-001", "shard-002",
    ]  # fmt: skip
    assert json.loads((path / "store.json").read_text())["shards"] == 3
    with open_queue(path, clock) as q:
        assert q.shard_count == 3
        q.put("x")
        assert q.get(0).payload == "x"


@pytest.mark.contract
@pytest.mark.rule_store_meta
def test_empty_folders_of_an_unfinished_creation_are_tidied(tmp_path: Path, clock: FakeClock) -> None:
    """rule_store_meta: empty shard folders with no store.json (a creation killed before it wrote the file)
    do not stand in the way of a store with fewer shards: the empty extra ones are removed."""
    path = tmp_path / "store"
    path.mkdir()
    for index in range(8):
        (path / f"shard-{index:03d}").mkdir()
    with open_queue(path, clock, shards=2) as q:
        assert q.shard_count == 2
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("shard-")) == ["shard-000", "shard-001"]


@pytest.mark.contract
@pytest.mark.rule_store_meta
def test_shard_data_without_a_store_json_is_not_opened_with_fewer_shards(
    tmp_path: Path, clock: FakeClock
) -> None:
    """rule_store_meta: a store whose store.json was removed, opened with fewer shards than its folders
    (shards=None means 6), raises StoreMismatch: the jobs of the shards beyond would vanish from view. With
    the count of its folders it opens, and its jobs are there."""
    path = tmp_path / "store"
    _store_with_jobs(path, clock, shards=8, jobs=16)
    (path / "store.json").unlink()
    with pytest.raises(StoreMismatch, match=r"has no store\.json but holds shard-006.*shards=8"):
        open_queue(path, clock)
    assert not (path / "store.json").exists()
    with open_queue(path, clock, shards=8) as q:
        assert q.stats()["pending"] == 18
        assert len(q.jobs(State.PENDING, limit=100)) == 18
