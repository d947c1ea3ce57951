"""Offline compaction: a compacting copy of every LMDB environment of a store, swapped in for the original.

LMDB reuses freed pages but never shrinks its file, so a store that once held a million jobs keeps its size
when it is empty again. ``compact_store`` writes a copy of each environment (``Environment.copy(path,
compact=True)``: only the pages in use, renumbered) into a new directory beside the store, checks that
every database of the copy holds as many entries as the original's, and then exchanges the two directories
in one ``renameat2(RENAME_EXCHANGE)`` (or writes the copy to another path and leaves the store alone).

It refuses while any process has the store open: every process holds a shared ``flock`` on the store's
``open.lock`` while it has any environment of it open (store.py), and compaction takes it exclusively, with
``LOCK_NB``, for its whole run, so nobody can open the store in the middle either. As a second signal it
also refuses when an environment's reader table names a live process other than this one (a process of an
older version that takes no lock, for instance).

A failure at any step before the exchange removes the half-written copy and leaves the original exactly as it
was; the original is kept as a backup until the exchange has succeeded (and after it, on request).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import lmdb

from .errors import StoreError, StoreMismatch
from .store import (
    CONTROL_DIR,
    LAYOUT_VERSION,
    META_FILE,
    WAKE_FILE,
    StoreInUse,
    lock_store_exclusive,
    read_store_meta,
    shard_dir,
)

DATA_FILE = "data.mdb"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@dataclass(frozen=True)
class EnvUsage:
    """The size of one LMDB environment: its file, its pages, and the pages its B-trees use."""

    file_bytes: int
    page_size: int
    last_pgno: int  # the highest page number ever used: the file's high-water mark
    pages_used: int  # branch, leaf and overflow pages of the main and every named database, + 2 meta pages
    entries: dict[str, int]  # named database -> entries

    @property
    def pages_free(self) -> int:
        """Pages below the high-water mark that no B-tree uses: the freelist (and its own pages)."""
        return max(0, self.last_pgno + 1 - self.pages_used)


@dataclass(frozen=True)
class EnvCompaction:
    name: str  # "control", "shard-000", ...
    before: EnvUsage
    after: EnvUsage


@dataclass(frozen=True)
class CompactReport:
    path: str  # the store that was compacted
    output: str  # where the compacted store is now: ``path`` when compacted in place
    backup: str | None  # the original store, when it was kept
    envs: tuple[EnvCompaction, ...]
    seconds: float

    @property
    def bytes_before(self) -> int:
        return sum(env.before.file_bytes for env in self.envs)

    @property
    def bytes_after(self) -> int:
        return sum(env.after.file_bytes for env in self.envs)


def env_usage(env: Any, path: str | None = None) -> EnvUsage:
    """What ``env`` (an open ``lmdb.Environment``) uses; ``path``: its directory, for the file's size."""
    info = env.info()
    stat = env.stat()

    def pages(s: dict[str, int]) -> int:
        return int(s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"])

    used = 2 + pages(stat)  # two meta pages, and the main database (which names the others)
    entries: dict[str, int] = {}
    with env.begin() as txn:
        names = [bytes(key) for key, _value in txn.cursor()]
    for name in names:
        db = env.open_db(name, create=False)
        with env.begin() as txn:
            db_stat = txn.stat(db)
        used += pages(db_stat)
        entries[name.decode(errors="replace")] = int(db_stat["entries"])
    directory = path if path is not None else env.path()
    return EnvUsage(
        file_bytes=os.path.getsize(os.path.join(directory, DATA_FILE)),
        page_size=int(stat["psize"]),
        last_pgno=int(info["last_pgno"]),
        pages_used=used,
        entries=entries,
    )


def store_env_names(root: str, shards: int) -> list[str]:
    """The environment directories of a store (relative names), the control environment first."""
    names = [CONTROL_DIR] if os.path.isdir(os.path.join(root, CONTROL_DIR)) else []
    return names + [os.path.basename(shard_dir(root, index)) for index in range(shards)]


def compact_store(path: str | os.PathLike[str], *, output: str | os.PathLike[str] | None = None,
                  keep_backup: bool = False) -> CompactReport:  # fmt: skip
    """Compact the store at ``path`` offline. -> what it did, environment by environment.

    ``output=None``: in place (the compacted copy takes the store's path; the original is deleted, or with
    ``keep_backup`` renamed to ``<path>.pre-compact-<time>``). ``output=PATH``: the compacted copy is written
    there (it must not exist) and the store is left as it is. Raises ``StoreInUse`` if any process has the
    store open, ``StoreError`` if there is no store at ``path`` or a step fails (the original is intact).
    """
    began = time.monotonic()
    root = os.path.realpath(os.fspath(path))
    meta = read_store_meta(root)
    if meta is None:
        raise StoreError(f"there is no store at {root!r} (no {META_FILE})")
    if meta.layout != LAYOUT_VERSION:
        raise StoreMismatch(
            f"the store at {root!r} has layout {meta.layout}; this version reads layout {LAYOUT_VERSION}"
        )
    target = root if output is None else os.path.realpath(os.fspath(output))
    if output is not None and os.path.lexists(target):
        raise StoreError(f"the output path {target!r} exists: give a path that does not exist yet")
    parent, base = os.path.split(target)
    if not os.path.isdir(parent):
        raise StoreError(f"the directory {parent!r} (where the compacted store goes) does not exist")
    work = os.path.join(parent, f".{base}.compacting-{os.getpid()}")
    lock_fd = lock_store_exclusive(root)
    try:
        backup = None
        try:
            envs = _copy_store(root, work, store_env_names(root, meta.shards))
            if output is not None:
                os.rename(work, target)
            else:
                _exchange(work, root)  # the store's path now holds the copy; ``work`` holds the original
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)  # the half-written copy; the original is untouched
            raise
        _fsync_dir(parent)
        if output is None:
            if keep_backup:
                backup = f"{root}.pre-compact-{time.strftime('%Y%m%dT%H%M%S')}"
                os.rename(work, backup)
                _fsync_dir(parent)
            else:
                shutil.rmtree(work)
    finally:
        os.close(lock_fd)
    return CompactReport(root, target, backup, tuple(envs), time.monotonic() - began)


def _copy_store(root: str, work: str, names: list[str]) -> list[EnvCompaction]:
    os.mkdir(work, 0o700)
    done = []
    for name in names:
        done.append(_copy_env(name, os.path.join(root, name), os.path.join(work, name)))
    for name in (META_FILE, WAKE_FILE):
        source = os.path.join(root, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(work, name))
            os.chmod(os.path.join(work, name), 0o600)
            _fsync_file(os.path.join(work, name))
    _fsync_dir(work)
    return done


def _open_env(path: str) -> Any:
    try:
        return lmdb.open(path, subdir=True, readonly=True, create=False, lock=True, max_dbs=64,
                         max_spare_txns=0, readahead=False)  # fmt: skip
    except lmdb.Error as exc:
        raise StoreError(f"cannot open the LMDB environment {path!r}: {exc}") from exc


def _copy_env(name: str, source: str, dest: str) -> EnvCompaction:
    """One environment: refuse if a live process reads it, copy it compacted, check the copy."""
    env = _open_env(source)
    try:
        _refuse_live_readers(env, source)
        before = env_usage(env, source)
        os.mkdir(dest, 0o700)
        env.copy(dest, compact=True)
    except lmdb.Error as exc:
        raise StoreError(f"compacting {source!r} failed: {exc}") from exc
    finally:
        env.close()
    data = os.path.join(dest, DATA_FILE)
    os.chmod(data, 0o600)
    _fsync_file(data)
    _fsync_dir(dest)
    copy = _open_env(dest)
    try:
        after = env_usage(copy, dest)
    except lmdb.Error as exc:
        raise StoreError(f"the compacted copy of {source!r} cannot be read: {exc}") from exc
    finally:
        copy.close()
    with contextlib.suppress(FileNotFoundError):
        os.chmod(os.path.join(dest, "lock.mdb"), 0o600)
    if after.entries != before.entries:
        raise StoreError(
            f"the compacted copy of {source!r} differs from it: {after.entries} entries, not {before.entries}"
        )
    return EnvCompaction(name, before, after)


def _refuse_live_readers(env: Any, path: str) -> None:
    env.reader_check()  # clears the slots of dead processes
    table = env.readers()
    pids = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0].isdigit():
            pids.add(int(fields[0]))
    pids.discard(os.getpid())
    if pids:
        raise StoreInUse(
            f"{path!r} is being read by process(es) {sorted(pids)}: stop every process that uses the store, "
            f"then try again"
        )


def _exchange(a: str, b: str) -> None:
    """Swap two directories atomically (``renameat2(RENAME_EXCHANGE)``, Linux 3.15+)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise StoreError("this C library has no renameat2(): write the copy elsewhere (output=) instead")
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result != 0:
        errno = ctypes.get_errno()
        raise StoreError(
            f"cannot swap {a!r} and {b!r}: {os.strerror(errno)} (the original is intact at {b!r})"
        )


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
