"""The last transaction id read from an environment's meta pages (metapages.py) is py-lmdb's own
``info()["last_txnid"]``, in this process and after commits of another; a file that is not LMDB's format 1
gives no reader, and the environment asks py-lmdb instead."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from queue_max_django.engine import Queue, StoreError
from queue_max_django.engine.stores.lmdb.env import Env
from queue_max_django.engine.stores.lmdb.meta import CONTROL_DIR
from queue_max_django.engine.stores.lmdb.metapages import MAGIC, MetaPages
from tests.engine import procs
from tests.engine.procs import Children

pytestmark = pytest.mark.lmdb  # LMDB's meta pages


def lmdb_says(env: Env) -> int:
    return int(env.env.info()["last_txnid"])


@pytest.mark.parametrize("writemap", [False, True], ids=["default", "writemap"])
def test_the_meta_pages_give_the_last_commit_of_this_process(store_path: Path, writemap: bool) -> None:
    with Queue(store_path, shards=1, writemap=writemap, do_recover=False, do_vacuum=False) as q:
        env = q._store._shards[0].env
        assert env._meta is not None  # the fast reader is in use here (64-bit, LMDB format 1)
        seen = [env.last_txnid()]
        for n in range(40):
            q.put(n)
            if n % 3 == 0:
                q.get(0).ack()
            seen.append(env.last_txnid())
            assert seen[-1] == lmdb_says(env)
        assert seen == sorted(seen) and seen[-1] > seen[0]


def test_the_meta_pages_show_another_processs_commits_at_once(store_path: Path, children: Children) -> None:
    with Queue(store_path, shards=1, do_recover=False, do_vacuum=False) as q:
        env = q._store._shards[0].env
        control = q._store.control.env
        before, control_before = env.last_txnid(), control.last_txnid()
        child = children.start(procs.put_one, str(store_path), "from the child")
        child.recv()
        procs.finish(child)
        assert env.last_txnid() == lmdb_says(env) > before
        q.set_rate_limit("queue:default", "100/s")
        assert control.last_txnid() == lmdb_says(control) > control_before


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\0" * 8192,
        b"\0" * 16 + struct.pack("=II", MAGIC, 1) + b"\0" * 24,  # both metas needed: too short
        b"\0" * 16 + struct.pack("=II", MAGIC, 2) + b"\0" * 8192,  # another format version
    ],
    ids=["empty", "zeros", "short", "format-2"],
)
def test_a_file_that_is_not_lmdb_format_1_gives_no_reader(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "data.mdb").write_bytes(content)
    assert MetaPages.open(str(tmp_path)) is None
    assert MetaPages.open(str(tmp_path / "missing")) is None


def test_an_environment_without_the_reader_asks_lmdb(store_path: Path) -> None:
    with Queue(store_path, shards=1, do_recover=False, do_vacuum=False) as q:
        env = q._store._shards[0].env
        reader, env._meta = env._meta, None
        try:
            q.put("x")
            assert env.last_txnid() == lmdb_says(env)
        finally:
            env._meta = reader
        assert (store_path / CONTROL_DIR / "data.mdb").exists()


def test_reading_a_closed_environment_is_a_store_error(store_path: Path) -> None:
    q = Queue(store_path, shards=1, do_recover=False, do_vacuum=False)
    env = q._store._shards[0].env
    reader = env._meta
    assert reader is not None
    q.close()  # the last Queue: the environment and its mapping are closed
    env._meta = reader  # as a thread that had read the attribute just before close() would hold it
    with pytest.raises(StoreError, match="cannot read"):
        env.last_txnid()
