"""The store is private to its owner: the data directory, every directory inside it and every file of it is
created owner-only (0700 directories, 0600 files), whatever the umask; and its owner, when not root, can
create and reopen it (root reads through permission bits, so that is tested with root's bypass dropped).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_max_django.engine import Queue
from tests.faults.system import as_plain_owner

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: any mode that is not owner-only must then come from the code, not from the umask."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def use_every_part(path: Path) -> None:
    """Open a store and touch every part of it: shards, the control store, the wake file."""
    with Queue(path, shards=2, do_recover=False, do_vacuum=False) as q:
        q.put("x")
        q.get(0).ack("done")
        q.set_rate_limit("*", "10/s")
        q.acquire_lock("leader", "me", 10.0)


@pytest.mark.inv_6
def test_every_directory_and_file_of_the_store_is_owner_only(tmp_path: Path, open_umask: None) -> None:
    store = tmp_path / "data" / "store"
    use_every_part(store)
    found = modes(store)
    for name in ["store.json", "store.lock", "wake", "shard-000/data.mdb", "shard-000/lock.mdb",
                 "shard-001/data.mdb", "control/data.mdb", "control/lock.mdb"]:  # fmt: skip
        assert name in found, f"{name} missing from the store: {sorted(found)}"
    wrong = {
        name: oct(mode)
        for name, mode in found.items()
        if mode != (0o700 if (store / name).is_dir() else 0o600)
    }
    assert wrong == {}, "not owner-only (0700 directories, 0600 files)"


@pytest.mark.inv_6
def test_an_existing_data_directory_is_used_and_its_insides_are_owner_only(
    tmp_path: Path, open_umask: None
) -> None:
    """A DATA_DIR the deployment made itself (mode chosen by it) keeps its mode; what the store creates
    inside it is owner-only."""
    store = tmp_path / "store"
    store.mkdir(mode=0o750)
    use_every_part(store)
    found = modes(store)
    assert found.pop(".") == 0o750
    assert {n: oct(m) for n, m in found.items() if m not in (0o700, 0o600)} == {}


PLAIN_OWNER_SCRIPT = textwrap.dedent(
    """
    import sys
    from queue_max_django.engine import Queue

    path = sys.argv[1]
    with Queue(path, shards=2, do_recover=False, do_vacuum=False) as q:
        job_id = q.put({"n": 1})
        q.set_rate_limit("*", "10/s")
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        record = q.get(0)
        assert record.job_id == job_id, record
        record.ack("ok")
        assert q.stats()["done"] == 1 and q.verify() == []
    print("ok")
    """
)


@pytest.mark.inv_6
def test_an_owner_without_root_powers_can_create_and_reopen_the_store(tmp_path: Path) -> None:
    """Owner-only must still let the owner in: a directory made 0600 (no search bit) would lock out every
    user but root. Run as this user with the capabilities that bypass permission bits dropped."""
    store = tmp_path / "store"
    command = as_plain_owner([sys.executable, "-c", PLAIN_OWNER_SCRIPT, str(store)])
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.inv_6
def test_a_store_whose_shard_directories_lack_the_search_bit_is_repaired_on_open(tmp_path: Path) -> None:
    """Stores made before the fix have 0600 shard directories: opening gives the owner the search bit."""
    store = tmp_path / "store"
    use_every_part(store)
    for shard in [store / "shard-000", store / "shard-001", store / "control"]:
        shard.chmod(0o600)
    with Queue(store, do_recover=False, do_vacuum=False) as q:
        assert q.stats()["done"] == 1
    assert {n: oct(m) for n, m in modes(store).items() if (store / n).is_dir() and m != 0o700} == {}
