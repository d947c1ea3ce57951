"""Offline compaction (stores/lmdb/compact.py) and the lifetime lock that makes it safe (env.py).

Every test compares the store on disk byte for byte before and after (``dump_store``, plus the control
environment), and the refusals are proven against real processes that hold the store open.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import lmdb
import pytest

from queue_max_django.engine import Queue, StoreError
from queue_max_django.engine.stores.lmdb import compact as compact_module
from queue_max_django.engine.stores.lmdb.compact import compact_store
from queue_max_django.engine.stores.lmdb.env import StoreInUse, lock_store_exclusive
from tests.engine.conftest import FakeClock, dump_store, open_queue
from tests.engine.procs import CHILD_TIMEOUT, Children, kill, send, wait_for

pytestmark = pytest.mark.lmdb  # offline compaction of LMDB files

BIG = "x" * 3000  # a payload over 1 KiB lives in the payloads database


def hold_open(path: str) -> None:
    """Child: open the store, say so, and keep it open until killed."""
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        q.stats()
        send({"ready": os.getpid()})
        time.sleep(CHILD_TIMEOUT)


def read_without_lock(shard_path: str) -> None:
    """Child: what a process that takes no lifetime lock looks like (an older version): a raw LMDB open of
    one shard holding a read transaction."""
    env = lmdb.open(shard_path, subdir=True, max_dbs=16, readonly=True)
    txn = env.begin()
    txn.stat()
    send({"ready": os.getpid()})
    time.sleep(CHILD_TIMEOUT)


def compact_and_pause(path: str, pause_after: str, go: str, keep_backup: bool) -> None:
    """Child: a real compaction of ``path`` that stops (says so, then waits for the file ``go``) after the
    third environment was copied (``"copy"``: a half-written copy beside the store) or just after the
    exchange (``"exchange"``: the original beside the store, at the sync of the store's parent directory
    that follows it), so that the parent can SIGKILL it there or look around while it is alive."""
    real_copy, real_exchange, real_fsync_dir = (
        compact_module._copy_env,
        compact_module._exchange,
        compact_module._fsync_dir,
    )
    copied, exchanged = [], []

    def pause() -> None:
        send({"paused": os.getpid()})
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)

    def copy_env(name: str, source: str, dest: str) -> Any:
        done = real_copy(name, source, dest)
        copied.append(name)
        if pause_after == "copy" and len(copied) == 3:
            pause()
        return done

    def exchange(a: str, b: str) -> None:
        real_exchange(a, b)
        exchanged.append(b)

    def fsync_dir(directory: str) -> None:
        real_fsync_dir(directory)
        if pause_after == "exchange" and exchanged == [os.path.join(directory, "store")]:
            exchanged.append("paused")
            pause()

    compact_module._copy_env = copy_env  # type: ignore[assignment]
    compact_module._exchange = exchange  # type: ignore[assignment]
    compact_module._fsync_dir = fsync_dir  # type: ignore[assignment]
    report = compact_store(path, keep_backup=keep_backup)
    send({"backup": report.backup})


def access(root: Path) -> dict[str, tuple[int, int, int]]:
    """(owner, group, mode) of the store's directory and of everything in it but the lock files that
    opening the store makes (``store.lock``, ``open.lock``)."""
    paths = [root, *(p for p in root.rglob("*") if p.name not in ("store.lock", "open.lock"))]
    return {
        str(p.relative_to(root)): (p.lstat().st_uid, p.lstat().st_gid, stat.S_IMODE(p.lstat().st_mode))
        for p in paths
    }


def everything(q: Queue) -> dict[Any, Any]:
    """Every key and value of every shard and of the control environment."""
    out: dict[Any, Any] = dict(dump_store(q))
    env = q._store.control.env
    with env.env.begin() as txn:
        for name, db in env.dbs.items():
            out["control", name] = list(txn.cursor(db=db))
    return out


def file_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*/data.mdb"))


def churned_store(path: Path, clock: FakeClock) -> dict[Any, Any]:
    """A store whose files hold many freed pages, and jobs in every state but running. -> its contents."""
    with open_queue(path, clock) as q:
        for _round in range(4):
            for _batch in range(30):
                q.put_many([{"n": n, "pad": "p" * 300} for n in range(100)])
            while True:
                records = q.get_many(64, timeout=0) if q.stats()["pending"] else []
                if not records:
                    break
                q.ack_many([(record, {"ok": True}) for record in records])
            clock.advance(10)
            q.vacuum(older_than=0)
        q.put({"big": BIG}, priority=5, name="kept.big")
        q.put({"later": 1}, delay=3600, queue="other")
        done = q.put({"done": 1})
        failed = q.put({"failed": 1}, max_retries=0)
        q.put_many([{"waiting": n} for n in range(50)], priority=-3)
        q.put({"once": 1}, unique_key="tick-1")
        record = q.claim(done)
        assert record is not None
        record.ack({"result": [1, 2]})
        record = q.claim(failed)
        assert record is not None
        record.nack(ValueError("no"))
        q.set_rate_limit("queue:other", 100)
        q.acquire_lock("scheduler", "me", 30)
        assert q.verify() == []
        return everything(q)


def test_compaction_shrinks_the_files_and_keeps_every_byte(store_path: Path, clock: FakeClock) -> None:
    before = churned_store(store_path, clock)
    size_before = file_bytes(store_path)

    report = compact_store(store_path)

    size_after = file_bytes(store_path)
    assert size_after < size_before / 4, (size_before, size_after)
    assert (report.bytes_before, report.bytes_after) == (size_before, size_after)
    assert [env.name for env in report.envs] == ["control"] + [f"shard-{i:03d}" for i in range(6)]
    for env in report.envs:
        assert env.after.entries == env.before.entries
        assert env.after.last_pgno + 1 <= env.before.pages_used  # nothing but the pages in use
    assert report.backup is None and report.output == str(store_path)
    assert sorted(p.name for p in store_path.parent.iterdir()) == ["store"]  # no copy or backup left over
    with open_queue(store_path, clock) as q:
        assert everything(q) == before
        assert q.verify() == []
        stats = q.stats()
        assert (stats["pending"], stats["scheduled"], stats["done"], stats["failed"]) == (52, 1, 1, 1)
        failed = q.dead_letters()
        assert [job.payload for job in failed] == [{"failed": 1}] and failed[0].error_type == "ValueError"
        record = q.get(timeout=0)
        assert record.payload == {"big": BIG}  # priority order and the large payload survived
        record.ack()
        assert q.verify() == []
    assert oct(store_path.stat().st_mode & 0o777) == "0o700"
    assert all(f.stat().st_mode & 0o077 == 0 for f in store_path.glob("*/*.mdb"))


def test_unique_keys_survive(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock) as q:
        first = q.put({"once": 1}, unique_key="tick-1")
    compact_store(store_path)
    with open_queue(store_path, clock) as q:
        assert q.put({"once": 2}, unique_key="tick-1") == first
        assert q.stats()["total"] == 1


def test_output_leaves_the_store_alone_and_keep_backup_keeps_the_original(
    store_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    before = churned_store(store_path, clock)
    raw = {p.name: p.read_bytes() for p in store_path.glob("shard-000/data.mdb")}

    report = compact_store(store_path, output=tmp_path / "copy")

    assert report.output == str(tmp_path / "copy") and report.backup is None
    assert {p.name: p.read_bytes() for p in store_path.glob("shard-000/data.mdb")} == raw
    with open_queue(tmp_path / "copy", clock) as q:
        assert everything(q) == before and q.verify() == []
    with pytest.raises(StoreError, match="exists"):
        compact_store(store_path, output=tmp_path / "copy")

    report = compact_store(store_path, keep_backup=True)

    assert report.backup is not None and Path(report.backup).parent == tmp_path
    with open_queue(Path(report.backup), clock) as q:
        assert everything(q) == before  # the original, as it was
    with open_queue(store_path, clock) as q:
        assert everything(q) == before


def test_refuses_while_another_process_has_the_store_open(
    store_path: Path, clock: FakeClock, children: Children
) -> None:
    before = churned_store(store_path, clock)
    holder = children.start(hold_open, str(store_path))
    holder.recv()
    size = file_bytes(store_path)

    with pytest.raises(StoreInUse, match="open in another process"):
        compact_store(store_path)

    assert file_bytes(store_path) == size
    assert sorted(p.name for p in store_path.parent.iterdir()) == ["store"]
    holder.close()  # SIGKILL: the kernel drops its lock with it
    compact_store(store_path)
    with open_queue(store_path, clock) as q:
        assert everything(q) == before


def test_refuses_while_this_process_has_it_open(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock) as q:
        q.put({"n": 1})
        with pytest.raises(StoreInUse):
            compact_store(store_path)
        q.put({"n": 2})  # still working
    compact_store(store_path)  # closed: now it may


def test_refuses_a_live_reader_that_holds_no_lock(
    store_path: Path, clock: FakeClock, children: Children
) -> None:
    """The reader table is the second signal: a process of an older version takes no lifetime lock."""
    churned_store(store_path, clock)
    reader = children.start(read_without_lock, str(store_path / "shard-002"))
    pid = reader.recv()["ready"]

    with pytest.raises(StoreInUse, match=str(pid)):
        compact_store(store_path)

    assert sorted(p.name for p in store_path.parent.iterdir()) == ["store"]


def test_no_process_can_open_the_store_while_it_is_compacted(store_path: Path, clock: FakeClock) -> None:
    with open_queue(store_path, clock) as q:
        q.put({"n": 1})
    fd = lock_store_exclusive(str(store_path))  # what compaction holds for its whole run
    try:
        with pytest.raises(StoreInUse, match="being compacted"):
            Queue(store_path)
    finally:
        os.close(fd)
    with open_queue(store_path, clock) as q:
        assert q.stats()["pending"] == 1


@pytest.mark.parametrize("where", ["copy", "check", "swap"])
def test_a_failure_midway_leaves_the_original_intact(
    store_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    before = churned_store(store_path, clock)
    raw = {str(p): p.read_bytes() for p in sorted(store_path.glob("*/data.mdb"))}
    real_copy, real_usage = compact_module._copy_env, compact_module.env_usage
    calls = []

    def failing_copy(name: str, source: str, dest: str) -> Any:
        calls.append(name)
        done = real_copy(name, source, dest)
        if where == "copy" and len(calls) == 4:
            raise OSError(28, "No space left on device")  # after a file was written: a full disk
        return done

    def lossy_usage(env: Any, path: str | None = None) -> Any:
        usage = real_usage(env, path)
        if path is not None and ".compacting-" in path and path.endswith("shard-001"):
            return replace(usage, entries={**usage.entries, "jobs": usage.entries["jobs"] - 1})
        return usage

    def failing_exchange(a: str, b: str) -> None:
        raise StoreError(f"cannot swap {a!r} and {b!r}: Invalid argument")

    monkeypatch.setattr(compact_module, "_copy_env", failing_copy)
    if where == "check":
        monkeypatch.setattr(compact_module, "env_usage", lossy_usage)
    if where == "swap":
        monkeypatch.setattr(compact_module, "_exchange", failing_exchange)

    with pytest.raises((OSError, StoreError)):
        compact_store(store_path)

    assert sorted(p.name for p in store_path.parent.iterdir()) == ["store"]  # the half-written copy is gone
    assert {str(p): p.read_bytes() for p in sorted(store_path.glob("*/data.mdb"))} == raw
    with open_queue(store_path, clock) as q:
        assert everything(q) == before and q.verify() == []


def test_no_store_no_compaction(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store"):
        compact_store(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_the_store_keeps_the_owner_group_and_mode_of_every_file_and_folder(
    store_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """A DATA_DIR the deployment made 0750 for a trusted group stays 0750 (it was reset to 0700), and every
    file and folder of the store keeps the owner, group and mode it had, the output copy's too."""
    churned_store(store_path, clock)
    chosen = {".": 0o750, "store.json": 0o640, "shard-000": 0o750, "shard-000/data.mdb": 0o640}
    for name, mode in chosen.items():
        (store_path / name).chmod(mode)
    owned_by_others = os.geteuid() == 0  # as root, give the store another owner and group too
    if owned_by_others:
        for path in [store_path, *store_path.rglob("*")]:
            os.chown(path, 4321, 8765)
    before = access(store_path)
    assert before["."][2] == 0o750 and before["shard-000/data.mdb"][2] == 0o640

    compact_store(store_path, output=tmp_path / "copy")
    compact_store(store_path)

    assert access(store_path) == before
    assert access(tmp_path / "copy") == before
    if owned_by_others:
        assert before["shard-001/data.mdb"][:2] == (4321, 8765)
    with open_queue(store_path, clock) as q:
        assert q.verify() == []
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o750  # opening it changes nothing either


def test_a_compaction_killed_mid_copy_leaves_a_copy_that_the_next_run_removes(
    store_path: Path, clock: FakeClock, tmp_path: Path, children: Children
) -> None:
    before = churned_store(store_path, clock)
    raw = {str(p): p.read_bytes() for p in sorted(store_path.glob("*/data.mdb"))}
    child = children.start(compact_and_pause, str(store_path), "copy", str(tmp_path / "go"), False)
    pid = child.recv()["paused"]
    work = tmp_path / f".store.compacting-{pid}"
    assert sorted(p.name for p in work.iterdir()) == ["control", "shard-000", "shard-001"]

    # alive: the store is locked, and its half-written copy is not anybody else's to remove
    with pytest.raises(StoreInUse):
        compact_store(store_path)
    assert compact_module.remove_abandoned_work(store_path) == ([], [])
    assert work.is_dir()

    kill(child)  # a real SIGKILL in the middle of the copy

    assert sorted(p.name for p in tmp_path.iterdir()) == [f".store.compacting-{pid}", "store"]
    assert {str(p): p.read_bytes() for p in sorted(store_path.glob("*/data.mdb"))} == raw
    report = compact_store(store_path)
    assert report.removed == (str(work),) and report.recovered == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    with open_queue(store_path, clock) as q:
        assert everything(q) == before and q.verify() == []


@pytest.mark.parametrize("keep_backup", [False, True], ids=["no-backup", "keep-backup"])
def test_a_compaction_killed_after_the_exchange_leaves_the_original_that_the_next_run_settles(
    store_path: Path, clock: FakeClock, tmp_path: Path, children: Children, keep_backup: bool
) -> None:
    """Killed between the exchange and removing (or keeping) the original: the store is the compacted copy,
    and the next run removes the original, or makes it the backup that was asked for."""
    before = churned_store(store_path, clock)
    child = children.start(compact_and_pause, str(store_path), "exchange", str(tmp_path / "go"), keep_backup)
    pid = child.recv()["paused"]
    kill(child)
    work = f".store.compacting-{pid}{'-keep' if keep_backup else ''}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [work, "store"]
    with open_queue(store_path, clock) as q:
        assert everything(q) == before  # the store is the compacted copy already

    report = compact_store(store_path)

    assert len(report.removed) == (not keep_backup) and len(report.recovered) == keep_backup
    if keep_backup:
        backup = Path(report.recovered[0])
        assert backup.name.startswith("store.pre-compact-")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([backup.name, "store"])
        with open_queue(backup, clock) as q:
            assert everything(q) == before  # the original, as it was
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    with open_queue(store_path, clock) as q:
        assert everything(q) == before and q.verify() == []


def test_a_compaction_still_finishing_keeps_its_original_while_the_next_one_runs(
    store_path: Path, clock: FakeClock, tmp_path: Path, children: Children
) -> None:
    """Once exchanged, the store is free to open and compact again while the first compaction still has to
    turn its original into the backup: the second run must leave that original alone."""
    before = churned_store(store_path, clock)
    go = tmp_path / "go"
    child = children.start(compact_and_pause, str(store_path), "exchange", str(go), True)
    pid = child.recv()["paused"]

    report = compact_store(store_path)

    assert report.removed == () and report.recovered == ()
    assert (tmp_path / f".store.compacting-{pid}-keep").is_dir()
    go.touch()
    backup = Path(child.recv()["backup"])
    wait_for(lambda: not child.is_alive(), what="the first compaction to end")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["go", backup.name, "store"])
    with open_queue(backup, clock) as q:
        assert everything(q) == before
