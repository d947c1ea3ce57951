"""``manage.py queue_compact``: shrinks the store's files, keeps every job, refuses while it is open."""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue
from tests.engine.conftest import dump_store
from tests.engine.procs import Children, kill
from tests.engine.test_compact import compact_and_pause, hold_open

Configure = Callable[..., override_settings]

pytestmark = pytest.mark.lmdb  # offline compaction of the LMDB store's files


def call(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def churn(path: Path) -> dict[object, object]:
    """Fill the store, drain and vacuum it (freed pages), leave a few jobs. -> its contents."""
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        for _batch in range(60):
            q.put_many([{"n": n, "pad": "p" * 300} for n in range(100)])
        while q.stats()["pending"]:
            q.ack_many([(record, None) for record in q.get_many(64, timeout=0)])
        q.vacuum(older_than=0)
        q.put_many([{"left": n} for n in range(20)], name="tests.kept")
        return dump_store(q)


def data_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*/data.mdb"))


@pytest.fixture
def data(tmp_path: Path, queue_max: Configure) -> Iterator[Path]:
    with queue_max():
        yield tmp_path / "store"


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    yield started
    started.kill_all()


def test_compacts_in_place_and_reports_the_sizes(data: Path) -> None:
    before = churn(data)
    size = data_bytes(data)

    out = call("queue_compact")

    assert data_bytes(data) < size / 4
    assert f"Compacted {data} in place:" in out
    lines = out.splitlines()
    assert lines[0].startswith("environment  KiB before  KiB after  pages before  pages in use")
    assert [line.split()[0] for line in lines[1:8]] == ["control"] + [f"shard-{i:03d}" for i in range(6)]
    with Queue(data) as q:
        assert dump_store(q) == before and q.verify() == []
    assert "consistent" in call("queue_check")


def test_json_output_and_another_path(data: Path, tmp_path: Path) -> None:
    before = churn(data)
    size = data_bytes(data)

    report = json.loads(call("queue_compact", "--json", "--output", str(tmp_path / "copy")))

    assert report["path"] == str(data) and report["output"] == str(tmp_path / "copy")
    assert report["bytes_before"] == size == data_bytes(data)  # the store itself is untouched
    assert report["bytes_after"] == data_bytes(tmp_path / "copy") < size / 4
    assert sum(env["entries"].get("ready", 0) for env in report["environments"].values()) == 20
    with Queue(tmp_path / "copy") as q:
        assert dump_store(q) == before


def test_keep_backup(data: Path, tmp_path: Path) -> None:
    before = churn(data)

    out = call("queue_compact", "--keep-backup")

    backups = sorted(tmp_path.glob("store.pre-compact-*"))
    assert len(backups) == 1 and f"The original store is kept at {backups[0]}." in out
    with Queue(backups[0]) as q:
        assert dump_store(q) == before


def test_refuses_while_a_queue_of_this_process_is_open(data: Path) -> None:
    churn(data)
    get_queue().stats()  # the process's own queue, as a web process would hold it
    size = data_bytes(data)

    with pytest.raises(CommandError, match="open in another process"):
        call("queue_compact")

    assert data_bytes(data) == size


def test_refuses_while_another_process_has_the_store_open(data: Path, children: Children) -> None:
    before = churn(data)
    holder = children.start(hold_open, str(data))
    holder.recv()

    with pytest.raises(CommandError, match="open in another process"):
        call("queue_compact")
    holder.close()
    call("queue_compact")
    with Queue(data) as q:
        assert dump_store(q) == before


def test_no_store_yet(data: Path) -> None:
    with pytest.raises(CommandError, match="no store"):
        call("queue_compact")
    assert not data.exists()


def test_an_existing_data_dir_keeps_its_mode(data: Path) -> None:
    """security.md: a DATA_DIR that already exists keeps its mode (compaction reset 0750 to 0700)."""
    churn(data)
    data.chmod(0o750)
    (data / "shard-003" / "data.mdb").chmod(0o640)

    call("queue_compact")

    assert stat.S_IMODE(data.stat().st_mode) == 0o750
    assert stat.S_IMODE((data / "shard-003" / "data.mdb").stat().st_mode) == 0o640
    assert stat.S_IMODE((data / "shard-002" / "data.mdb").stat().st_mode) == 0o600


def test_removes_what_a_killed_compaction_left_and_says_so(
    data: Path, tmp_path: Path, children: Children
) -> None:
    before = churn(data)
    child = children.start(compact_and_pause, str(data), "copy", str(tmp_path / "go"), False)
    pid = child.recv()["paused"]
    kill(child)  # SIGKILL mid-copy
    left = tmp_path / f".store.compacting-{pid}"
    assert left.is_dir()

    report = json.loads(call("queue_compact", "--json"))
    assert report["removed"] == [str(left)] and report["recovered_backups"] == []
    assert not left.exists()
    with Queue(data) as q:
        assert dump_store(q) == before

    child = children.start(compact_and_pause, str(data), "copy", str(tmp_path / "go"), False)
    pid = child.recv()["paused"]
    kill(child)
    out = call("queue_compact")
    assert f"Removed {tmp_path / f'.store.compacting-{pid}'}, left by a compaction that was killed." in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_a_store_that_cannot_be_compacted_offline_is_refused_before_anything_is_touched(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command asks the store's capability first: a store without ``offline_compact`` (the PostgreSQL
    store will be one) gets a command error, and its files stay as they are."""
    from queue_max_django.engine.stores.lmdb.store import LmdbStore

    churn(data)
    size = data_bytes(data)
    monkeypatch.setattr(LmdbStore, "offline_compact", False)

    with pytest.raises(CommandError, match="cannot be compacted offline: nothing was changed"):
        call("queue_compact")

    assert data_bytes(data) == size and not list(data.parent.glob("store.*"))
