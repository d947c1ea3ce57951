"""Offline compaction: a compacting copy of every LMDB environment of a store, swapped in for the original.

LMDB reuses freed pages but never shrinks its file, so a store that once held a million jobs keeps its size
when it is empty again. ``compact_store`` writes a copy of each environment (``Environment.copy(path,
compact=True)``: only the pages in use, renumbered) into a new directory beside the store, checks that
every database of the copy holds as many entries as the original's, and then exchanges the two directories
in one ``renameat2(RENAME_EXCHANGE)`` (or writes the copy to another path and leaves the store alone).

It refuses while any process has the store open: every process holds a shared ``flock`` on the store's
``open.lock`` while it has any environment of it open (env.py), and compaction takes it exclusively, with
``LOCK_NB``, for its whole run, so nobody can open the store in the middle either. As a second signal it
also refuses when an environment's reader table names a live process other than this one (a process of an
older version that takes no lock, for instance).

A failure at any step before the exchange removes the half-written copy and leaves the original exactly as it
was; the original is kept as a backup until the exchange has succeeded (and after it, on request). The copy
gets the owner, group and mode of each directory and file it copies, the store's folder included, so that a
folder made 0750 for a trusted group stays 0750.

A compaction killed (SIGKILL, a power cut) leaves its work directory ``.<name>.compacting-<pid>`` beside the
store: a half-written copy, or after the exchange the original. The next compaction removes it first (an
original it was asked to keep, ``-keep`` in the name, becomes the backup it would have been). It only ever
touches a work directory nobody holds: a compaction holds an exclusive ``flock`` on its work directory from
its creation, and on the store's directory (the original, once exchanged) until it has removed or renamed
it, and the kernel drops those locks with the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from typing import Any

import lmdb

from ...errors import StoreError, StoreMismatch
from .env import StoreInUse, lock_store_exclusive
from .meta import (
    CONTROL_DIR,
    LAYOUT_VERSION,
    META_FILE,
    OPEN_LOCK_FILE,
    WAKE_FILE,
    read_store_meta,
    shard_dir,
)

DATA_FILE = "data.mdb"
LOCK_DATA_FILE = "lock.mdb"
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
    removed: tuple[str, ...] = ()  # work directories of killed compactions, removed before this one
    recovered: tuple[str, ...] = ()  # originals a killed compaction was to keep, now backups at these paths

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
    there (it must not exist) and the store is left as it is. First removes what killed compactions left
    beside the target (``remove_abandoned_work``; the report lists it). Raises ``StoreInUse`` if any process
    has the store open, ``StoreError`` if there is no store at ``path`` or a step fails (the original is
    intact).
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
    keep = keep_backup and output is None
    work = os.path.join(parent, f".{base}{WORK_INFIX}{os.getpid()}{KEEP_SUFFIX if keep else ''}")
    lock_fd = lock_store_exclusive(root)
    copy_fd = original_fd = None  # flocks on the copy's directory and on the original's
    try:
        removed, recovered = remove_abandoned_work(target)
        backup = None
        try:
            os.mkdir(work, 0o700)
        except OSError as exc:  # never remove what this run did not make
            raise StoreError(f"cannot make the work directory {work!r}: {exc}") from exc
        try:
            copy_fd = _hold_dir(work)
            if output is None:
                original_fd = _hold_store_dir(root)  # held while the exchange moves it to ``work``
            envs = _copy_store(root, work, store_env_names(root, meta.shards))
            if output is not None:
                os.rename(work, target)
            else:
                _exchange(work, root)  # the store's path now holds the copy; ``work`` holds the original
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)  # the half-written copy; the original is untouched
            raise
        finally:
            if copy_fd is not None:  # the copy is the store now (or the output), or gone
                os.close(copy_fd)
        _fsync_dir(parent)
        if output is None:
            if keep_backup:
                backup = _backup_path(root)
                os.rename(work, backup)
                _fsync_dir(parent)
            else:
                shutil.rmtree(work)
    finally:
        if original_fd is not None:
            os.close(original_fd)
        os.close(lock_fd)
    return CompactReport(
        root, target, backup, tuple(envs), time.monotonic() - began, tuple(removed), tuple(recovered)
    )


WORK_INFIX = ".compacting-"  # a work directory is ``.<store name>.compacting-<pid>[-keep]``
KEEP_SUFFIX = "-keep"  # ... and ``-keep`` when the original is to be kept as a backup


def remove_abandoned_work(store: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """Remove the work directories that killed compactions left beside ``store`` (the path a compaction
    writes to), skipping any that a live compaction holds. A ``-keep`` one holding an original already
    swapped out (it has the ``open.lock`` every store has and a copy never has) is renamed to a backup
    instead. -> (the paths removed, the backups made). ``compact_store`` calls it holding the store's
    exclusive lock, so no compaction of that store is under way but one finishing after its exchange, which
    holds the directory it still has to remove."""
    parent, base = os.path.split(os.path.realpath(os.fspath(store)))
    pattern = re.compile(rf"\.{re.escape(base)}{re.escape(WORK_INFIX)}[0-9]+({re.escape(KEEP_SUFFIX)})?")
    removed: list[str] = []
    recovered: list[str] = []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return removed, recovered
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(parent, name)
        try:
            fd = _hold_dir(path)
        except (BlockingIOError, OSError):  # held by a live compaction, gone, or not a directory
            continue
        try:
            if match.group(1) and os.path.exists(os.path.join(path, OPEN_LOCK_FILE)):
                backup = _backup_path(os.path.join(parent, base))
                os.rename(path, backup)
                recovered.append(backup)
            else:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:
            continue  # not ours to remove (its owner's permissions): the next run tries again
        finally:
            os.close(fd)
        _fsync_dir(parent)
    return removed, recovered


def _hold_dir(path: str) -> int:
    """An fd of the directory ``path`` holding an exclusive ``flock`` on it; ``BlockingIOError`` if another
    process holds one. The lock belongs to the directory, so it follows it through a rename or exchange."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _hold_store_dir(root: str) -> int:
    try:
        return _hold_dir(root)
    except BlockingIOError:
        raise StoreInUse(
            f"another compaction of the store at {root!r} is still finishing: try again in a moment"
        ) from None


def _backup_path(root: str) -> str:
    """``<root>.pre-compact-<time>``, with ``-2``, ``-3``... if that exists already."""
    backup = f"{root}.pre-compact-{time.strftime('%Y%m%dT%H%M%S')}"
    candidate, number = backup, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{backup}-{number}"
    return candidate


def _same_access(source: str, dest: str) -> None:
    """Give ``dest`` the owner, group and mode of ``source`` (the owner only when run as root; the group when
    the owner may give it)."""
    info = os.stat(source)
    with contextlib.suppress(OSError):
        if (info.st_uid, info.st_gid) != (os.stat(dest).st_uid, os.stat(dest).st_gid):
            try:
                os.chown(dest, info.st_uid, info.st_gid)
            except PermissionError:
                os.chown(dest, -1, info.st_gid)
    os.chmod(dest, stat.S_IMODE(info.st_mode))  # after chown, which clears the set-id bits


def _copy_store(root: str, work: str, names: list[str]) -> list[EnvCompaction]:
    """Copy each environment and the store's files into ``work`` (which exists, 0700 while it fills), then
    give it the store directory's owner, group and mode."""
    done = []
    for name in names:
        done.append(_copy_env(name, os.path.join(root, name), os.path.join(work, name)))
    for name in (META_FILE, WAKE_FILE):
        source = os.path.join(root, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(work, name))
            _same_access(source, os.path.join(work, name))
            _fsync_file(os.path.join(work, name))
    _same_access(root, work)
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
    _same_access(os.path.join(source, DATA_FILE), data)
    _fsync_file(data)
    copy = _open_env(dest)
    try:
        after = env_usage(copy, dest)
    except lmdb.Error as exc:
        raise StoreError(f"the compacted copy of {source!r} cannot be read: {exc}") from exc
    finally:
        copy.close()
    lock = os.path.join(dest, LOCK_DATA_FILE)
    with contextlib.suppress(FileNotFoundError):
        if os.path.exists(os.path.join(source, LOCK_DATA_FILE)):
            _same_access(os.path.join(source, LOCK_DATA_FILE), lock)
        else:
            os.chmod(lock, 0o600)
    _same_access(source, dest)
    _fsync_dir(dest)
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
