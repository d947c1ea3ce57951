"""The store's medium fails: the map reaches its hard cap, the data directory is read-only, the disk is
full, the store is opened with the wrong shard count. Each gives a clear error naming the store, and nothing
already stored is lost: checked on disk, after reopening (``verify()``, every acknowledged job there).

Read-only and full file systems are real mounts (a tmpfs, a read-only bind mount): tests run as root, whom
``chmod`` does not stop. Without permission to mount they skip, saying so; with ``CI=true`` they fail.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.engine import Queue, QueueError, State, StoreError, StoreFull, StoreMismatch
from tests.engine.conftest import open_queue
from tests.engine.probes import LmdbProbe
from tests.faults.system import read_only_bind, tmpfs
from tests.worker.conftest import BOUND, ROOT

# the LMDB store's medium: its map and its cap, the file system under its directory, its shard folders
pytestmark = pytest.mark.lmdb

BLOB = b"x" * 2048


def assert_all_there(path: Path, ids: list[int], **options: Any) -> None:
    """Reopen the store at ``path``: consistent, and every job in ``ids`` there with its payload."""
    with open_queue(path, **options) as q:
        assert q.verify() == []
        missing = [job_id for job_id in ids if q.job(job_id) is None]
        assert missing == [], f"{len(missing)} acknowledged job(s) lost"


# ------------------------------------------------------------------------------------------ the map


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[tuple[Queue, list[int]]]:
    """A one-shard store whose map cannot grow (1 MiB), filled until a put raised StoreFull."""
    q = open_queue(tmp_path / "store", shards=1, map_size=1 << 20, map_size_max=1 << 20)
    ids: list[int] = []
    with pytest.raises(StoreFull) as caught:
        for n in range(10_000):
            ids.append(q.put({"n": n, "blob": BLOB}))
    message = str(caught.value)
    assert "shard-000" in message and "map_size_max=1,048,576" in message
    assert 50 < len(ids) < 10_000
    yield q, ids
    q.close()


@pytest.mark.inv_4
def test_a_full_map_refuses_puts_and_stays_readable(capped: tuple[Queue, list[int]]) -> None:
    q, ids = capped
    stats = q.stats()
    for refused in (lambda: q.put({"blob": BLOB}), lambda: q.put_many([{"blob": BLOB}] * 20)):
        with pytest.raises(StoreFull):
            refused()
        assert q.stats() == stats  # nothing half-written
    assert stats["pending"] == stats["total"] == len(ids)
    assert [job.job_id for job in q.jobs(State.PENDING, limit=len(ids))] == ids
    assert q.job(ids[-1]).payload == {"n": len(ids) - 1, "blob": BLOB}
    assert q.verify() == []


@pytest.mark.inv_4
def test_a_full_map_still_takes_claims_acks_nacks_and_purges_then_puts_again(
    tmp_path: Path, capped: tuple[Queue, list[int]]
) -> None:
    """Finishing work must not need more room than the work took: claims, acks, nacks, releases and
    purges go through on a full map, and a purge makes room for new puts."""
    q, ids = capped
    record = q.get(0)
    record.ack({"ok": True})
    q.get(0).nack("no", permanent=True)
    q.get(0).release()
    records = q.get_many(5, 0)
    assert q.ack_many([(r, None) for r in records]) == {}
    assert q.purge(State.DONE) == 6
    assert q.purge(State.FAILED) == 1
    job_id = q.put({"blob": BLOB})
    q.close()
    kept = [i for i in ids if i not in {record.job_id, ids[1]} and i not in {r.job_id for r in records}]
    assert_all_there(tmp_path / "store", [*kept, job_id], map_size=1 << 20, map_size_max=1 << 20)


@pytest.mark.inv_4
def test_without_a_cap_the_map_grows_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_queue(path, shards=1, map_size=1 << 20) as q:
        ids = [q.put({"n": n, "blob": BLOB}) for n in range(2000)]  # about 4 MiB: past the first map
        assert LmdbProbe(q).environments()[0].info()["map_size"] >= 4 << 20
    assert_all_there(path, ids)


# ------------------------------------------------------------------------------------ read-only


def test_a_new_store_on_a_read_only_file_system_is_a_clear_store_error(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", size="1m", read_only=True) as mount:
        store = mount / "store"
        with pytest.raises(StoreError, match=str(store)) as caught:
            open_queue(store)
        assert "Read-only file system" in str(caught.value)
        assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.EROFS
        assert not store.exists()


def test_an_existing_store_mounted_read_only_is_a_clear_store_error_and_loses_nothing(tmp_path: Path) -> None:
    source = tmp_path / "data"
    with open_queue(source / "store", shards=2) as q:
        ids = [q.put({"n": n}) for n in range(20)]
        q.get(0).ack("done")
    with read_only_bind(source, tmp_path / "ro") as mount:
        with pytest.raises(StoreError, match=str(mount / "store")) as caught:
            open_queue(mount / "store")
        assert "Read-only file system" in str(caught.value)
    assert_all_there(source / "store", ids)


def data_dir_problems(data_dir: Path) -> list[checks.CheckMessage]:
    with override_settings(QUEUE_MAX={"DATA_DIR": data_dir}):
        return [m for m in checks.run_checks(tags=["queue_max_django"]) if m.id == "queue_max_django.E010"]


@pytest.mark.parametrize("populated", [False, True], ids=["empty", "populated"])
def test_the_system_check_reports_a_read_only_data_dir(tmp_path: Path, populated: bool) -> None:
    """E010 from the real file system: no mocked ``os.access`` (root passes permission bits, not EROFS)."""
    source = tmp_path / "data"
    source.mkdir()
    if populated:
        with open_queue(source / "store", shards=2) as q:
            q.put("x")
    with read_only_bind(source, tmp_path / "ro") as mount:
        messages = data_dir_problems(mount / "store")
        assert [m.msg for m in messages] == [
            f"QUEUE_MAX['DATA_DIR'] ({str(mount / 'store')!r}) is not writable: this process lacks read, "
            f"write or search permission on {str(mount / 'store') if populated else str(mount)!r}."
        ]
        conf.reset()
        with override_settings(QUEUE_MAX={"DATA_DIR": mount / "store"}), pytest.raises(StoreError):
            conf.get_queue()
    conf.reset()
    assert data_dir_problems(source / "store") == []


# ------------------------------------------------------------------------------------------ full disk


def fill(mount: Path) -> Path:
    """Write a file until the file system is full. -> the file (remove it to free the space)."""
    filler = mount / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_refuses_writes_clearly_loses_nothing_and_recovers(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", size="8m") as mount:
        store = mount / "store"
        q = open_queue(store, shards=2)
        try:
            ids = [q.put({"n": n, "blob": BLOB}) for n in range(50)]
            filler = fill(mount)
            refused = 0
            for n in range(200):  # LMDB reuses its free pages first; then the file must grow, and cannot
                try:
                    ids.append(q.put({"n": 1000 + n, "blob": BLOB * 4}))
                except StoreError as exc:
                    refused += 1
                    assert str(store) in str(exc) and "No space left on device" in str(exc)
                    assert not isinstance(exc, StoreFull)
            assert refused > 0
            for _ in range(3):  # every kind of write meets the same clear error, or goes through
                try:
                    q.put_many([{"blob": BLOB * 4}] * 20)
                except StoreError:
                    pass
                else:
                    raise AssertionError("a put_many of 160 KiB fit on a full disk")
            assert q.verify() == []
            stats = q.stats()
            assert stats["pending"] == stats["total"] == len(ids)

            filler.unlink()  # space again: the same Queue writes again
            ids.append(q.put({"after": True}))
            ids.extend(q.put_many([{"after": n} for n in range(20)]))
            record = q.get(0)
            record.ack("ok")
            assert q.verify() == []
        finally:
            q.close()
        assert_all_there(store, ids)


# ------------------------------------------------------------------------------------- shard count


def test_the_wrong_shard_count_is_refused_by_the_engine_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_queue(path, shards=2) as q:
        ids = [q.put(n) for n in range(10)]
    for shards in (1, 3, 6):
        with pytest.raises(StoreMismatch, match=f"has 2 shards, not {shards}"):
            open_queue(path, shards=shards)
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("shard-")) == ["shard-000", "shard-001"]
    assert_all_there(path, ids, shards=2)


def manage(store: Path, *args: str, shards: int) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
        "QUEUE_MAX_TEST_DATA_DIR": str(store),
        "QUEUE_MAX_TEST_SHARDS": str(shards),
        "QUEUE_MAX_TEST_MARKS": str(store.parent),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=BOUND,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command", [["queue_worker", "--burst", "--processes", "1"], ["queue_stats"], ["queue_check"]],
    ids=lambda c: c[0],
)  # fmt: skip
def test_the_wrong_shards_setting_stops_every_command_with_e011(tmp_path: Path, command: list[str]) -> None:
    store = tmp_path / "store"
    with open_queue(store, shards=2) as q:
        ids = [q.put({"args": [n], "kwargs": {}}, name="tests.testapp.tasks.echo") for n in range(5)]
    done = manage(store, *command, shards=3)
    assert done.returncode == 1
    assert "(queue_max_django.E011) QUEUE_MAX['SHARDS'] is 3, but the store at" in done.stderr
    assert "Traceback" not in done.stderr
    with open_queue(store) as q:
        assert q.shard_count == 2 and q.stats()["pending"] == 5  # the worker ran nothing
    assert_all_there(store, ids)


def test_delay_on_a_store_with_another_shard_count_raises_store_mismatch(tmp_path: Path) -> None:
    from tests.testapp import tasks

    store = tmp_path / "store"
    with open_queue(store, shards=2):
        pass
    conf.reset()
    try:
        with override_settings(QUEUE_MAX={"DATA_DIR": store, "SHARDS": 4}):
            with pytest.raises(StoreMismatch, match="has 2 shards, not 4") as caught:
                tasks.add.delay(1, 2)
            assert isinstance(caught.value, QueueError)
    finally:
        conf.reset()
    assert not (store / "shard-002").exists()
