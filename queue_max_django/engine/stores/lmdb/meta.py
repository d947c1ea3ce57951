"""The store's directory: its ``store.json`` (the layout version and the shard count, fixed when the store
is made), the shard folders, the control folder and the names of the files in it, and the wake file's
creation. Read and checked on every open: a mismatch is refused before anything is opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from dataclasses import dataclass

from ...errors import StoreError, StoreMismatch
from ...job import MAX_SHARDS
from .wake import SLOT

LAYOUT_VERSION = 1
DEFAULT_SHARDS = 6
META_FILE = "store.json"
LOCK_FILE = "store.lock"
OPEN_LOCK_FILE = "open.lock"  # shared flock while a process has the store open; exclusive to compact it
WAKE_FILE = "wake"
CONTROL_DIR = "control"

_SHARD_FOLDER = re.compile(r"shard-([0-9]{3})")


def shard_dir(root: str, shard: int) -> str:
    return os.path.join(root, f"shard-{shard:03d}")


@dataclass(frozen=True)
class StoreMeta:
    layout: int
    shards: int


def open_store_meta(root: str, shards: int | None) -> StoreMeta:
    """Create the store directory and its metadata, or read and check them. Refuses a mismatch: another
    shard count than ``shards``, or a ``store.json`` that disagrees with the shard folders on disk.

    A new store's shard folders are made before its ``store.json``, so that in a store with a
    ``store.json`` every shard folder exists (stores made by earlier versions may have none yet)."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        lock_fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreError(f"cannot create or open the store directory {root!r}: {exc}") from exc
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # serialises concurrent creators; released by close()
        meta_path = os.path.join(root, META_FILE)
        if os.path.exists(meta_path):
            meta = _read_meta(meta_path)
            _check_shard_folders(root, meta)
        else:
            count = DEFAULT_SHARDS if shards is None else shards
            meta = StoreMeta(layout=LAYOUT_VERSION, shards=count)
            _make_shard_folders(root, count)
            _write_meta(root, meta_path, meta)
        wake_path = os.path.join(root, WAKE_FILE)
        if not os.path.exists(wake_path):  # with every slot there from the start (see wake.py)
            fd = os.open(wake_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, bytes(SLOT * (meta.shards + 1)))
            finally:
                os.close(fd)
    except OSError as exc:
        raise StoreError(f"cannot initialise the store at {root!r}: {exc}") from exc
    finally:
        os.close(lock_fd)
    if meta.layout != LAYOUT_VERSION:
        raise StoreMismatch(
            f"the store at {root!r} has layout version {meta.layout}; this version of queue_max_django "
            f"reads layout {LAYOUT_VERSION}. Drain it with the version that wrote it, or use a new path."
        )
    if shards is not None and shards != meta.shards:
        raise StoreMismatch(
            f"the store at {root!r} has {meta.shards} shards, not {shards}. Open it with shards=None "
            f"(or shards={meta.shards}); to change the shard count, drain this store and start a new one at "
            f"another path."
        )
    return meta


def read_store_meta(root: str) -> StoreMeta | None:
    """What ``store.json`` of the store at ``root`` says, or None if there is no store there yet. Reads
    only: for checks that must not create anything. Raises ``StoreMismatch`` for a file that is not ours,
    or one that disagrees with the shard folders on disk."""
    meta_path = os.path.join(root, META_FILE)
    if not os.path.exists(meta_path):
        return None
    meta = _read_meta(meta_path)
    try:
        _check_shard_folders(root, meta)
    except OSError as exc:
        raise StoreError(f"cannot list the store directory {root!r}: {exc}") from exc
    return meta


def _read_meta(meta_path: str) -> StoreMeta:
    try:
        with open(meta_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (ValueError, OSError) as exc:  # ValueError: not JSON, or not UTF-8
        raise StoreMismatch(f"{meta_path} is not a queue_max_django store description: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreMismatch(f"{meta_path} is not a queue_max_django store description: not a JSON object")
    layout, shards = data.get("layout"), data.get("shards")
    if type(layout) is not int or layout < 1:
        raise StoreMismatch(f'{meta_path}: "layout" must be a layout version (an int >= 1), not {layout!r}')
    if type(shards) is not int or not 1 <= shards <= MAX_SHARDS:
        raise StoreMismatch(
            f'{meta_path}: "shards" must be an int from 1 to {MAX_SHARDS}, not {shards!r}. The shard count '
            f"is fixed when a store is made: restore the file, or move the store away and start a new one."
        )
    return StoreMeta(layout=layout, shards=shards)


def _shard_folders(root: str) -> dict[int, str]:
    """The ``shard-NNN`` folders in ``root``: index -> path."""
    found = {}
    with os.scandir(root) as entries:
        for entry in entries:
            match = _SHARD_FOLDER.fullmatch(entry.name)
            if match is not None and entry.is_dir(follow_symlinks=False):
                found[int(match.group(1))] = entry.path
    return found


def _check_shard_folders(root: str, meta: StoreMeta) -> None:
    """``StoreMismatch`` unless the shard folders on disk are those of ``meta.shards`` shards (or there are
    none yet: a store of an earlier version whose first open made none). An edited ``store.json`` would
    otherwise hide the jobs of the shards it leaves out, or route jobs by another count."""
    if meta.layout != LAYOUT_VERSION:
        return  # another layout: refused for that, whatever its folders
    present = set(_shard_folders(root))
    wanted = set(range(meta.shards))
    if not present or present == wanted:
        return
    extra, missing = sorted(present - wanted), sorted(wanted - present)
    found = [f"{_folder_list(extra)} {'is' if len(extra) == 1 else 'are'} there too"] if extra else []
    if missing:
        found.append(f"{_folder_list(missing)} {'is' if len(missing) == 1 else 'are'} missing")
    restore = "restore it"
    if present == set(range(max(present) + 1)):
        restore += f' ("shards": {max(present) + 1} matches the folders there)'
    raise StoreMismatch(
        f"the store at {root!r} does not match its {META_FILE}: that says {meta.shards} shards, but "
        f"{' and '.join(found)}. Nothing was opened. If {META_FILE} was edited, {restore}; a shard folder "
        f"that was removed held jobs that are lost."
    )


def _folder_list(indexes: list[int]) -> str:
    names = [f"shard-{index:03d}" for index in indexes[:5]]
    return ", ".join(names) + (f" and {len(indexes) - 5} more" if len(indexes) > 5 else "")


def _make_shard_folders(root: str, count: int) -> None:
    """The folders of a new store's ``count`` shards. Folders beyond them are removed if empty (an earlier
    creation that did not finish); one with data is a store whose ``store.json`` is missing: refused."""
    for index, path in sorted(_shard_folders(root).items()):
        if index >= count:
            try:
                os.rmdir(path)
            except OSError:
                raise StoreMismatch(
                    f"the directory {root!r} has no {META_FILE} but holds {os.path.basename(path)}, beyond "
                    f"the {count} shards asked for: it looks like a store whose {META_FILE} was removed. "
                    f"Restore that file, or open it with shards={max(_shard_folders(root)) + 1}."
                ) from None
    for index in range(count):
        private_dir(shard_dir(root, index))


def _write_meta(root: str, meta_path: str, meta: StoreMeta) -> None:
    tmp = meta_path + ".tmp"
    body = {"format": "queue_max_django", "layout": meta.layout, "shards": meta.shards}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)  # owner-only, as the rest
    with open(fd, "w", encoding="utf-8") as handle:
        json.dump(body, handle)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, meta_path)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def private_dir(path: str) -> None:
    """Create an environment's directory owner-only (0700). Left to py-lmdb, it would get the files' mode
    0600: no search bit, so that nobody but root could open the files inside. Earlier versions made such
    directories: give their owner the search bit back."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & stat.S_IXUSR:
        with contextlib.suppress(OSError):  # not ours to change: LMDB's open says what is wrong
            os.chmod(path, mode | stat.S_IXUSR)
