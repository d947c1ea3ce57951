"""One LMDB environment per shard per process, and the process-wide registry that shares them.

LMDB forbids opening an environment twice in one process and breaks if a handle is used across ``fork``.
So every environment lives in one process-wide registry, keyed by its real path and shared (reference
counted) by every ``Queue`` of the process; a child process never touches its parent's handles and opens its
own on first use. Map growth (``MapFullError``) and other processes' growth (``MapResizedError``) are handled
here, behind a gate that keeps every transaction of this process out while the map is resized.

While a process has any environment of a store open, it holds a shared ``flock`` on the store's
``open.lock`` (taken with the first environment, dropped with the last): the offline compaction
(compact.py) takes it exclusively, so it can tell for sure that no process is using the store, and no
process can open the store while it is being compacted. The store's directory and ``store.json`` are
``meta.py``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import lmdb

from ...errors import QueueError, StoreError, StoreFull
from ...forks import add_open_probe
from .meta import OPEN_LOCK_FILE, private_dir
from .metapages import MetaPages

DB_NAMES = (
    "jobs",  # job id -> record (msgpack array); and the shard's counters under the largest key
    "payloads",  # job id -> packed payload, for payloads too big to keep inside the record
    # One index per state; each key ends with the job id, and its entry count is the state's count.
    "ready",  # pending: (queue, NUL, flipped priority, ready time, id), in claim order
    "sched",  # scheduled: (eta, id)
    "lease",  # running: (lease expiry, id)
    "done_at",  # done: (finished time, id)
    "failed",  # failed: id
    "unique",  # a put's unique key -> (job id, when): an enqueue that must happen once (periodic ticks)
    "cancels",  # job id -> when a cancel was requested: a running job marked "cancel requested"
    "workflows",  # workflow heads and nodes (workflows.py): a workflow lives in one shard, with its jobs
    "turns",  # concurrency limits: the groups' turns, and the jobs running per limit key (turns.py)
    "tags",  # (tag, NUL, job id) -> nothing: the jobs of each tag (tagged.py, engine/tags.py)
)
CONTROL_DB_NAMES = (
    "limits",  # limit key -> (rate, bucket state): token buckets shared by every process
    "breakers",  # breaker key -> (policy, breaker state)
    "locks",  # lock name -> (owner, expiry, since): leases such as the periodic scheduler's leadership
    "workers",  # worker id -> its last report (see coordination.py)
    "samples",  # unix minute -> a sample of the store-wide counters (see history.py)
    "pauses",  # (queue, NUL, task) -> a pause in force (see pauses.py)
    "schedules",  # schedule name -> a kept schedule (see schedules.py)
)

T = TypeVar("T")
WRITE_WAIT_NOTICED = 20e-6  # a write transaction's begin() slower than this waited for another writer


@dataclass(frozen=True)
class EnvOptions:
    map_size: int
    map_size_max: int | None
    sync: bool
    writemap: bool


class _Gate:
    """Many transactions at once, or one map resize alone (LMDB: resize only with no transaction open in
    the process). This is on every transaction, so entering and leaving take no lock: a transaction appends a
    token to ``_inside`` and then reads ``_resizing``; a resize sets ``_resizing`` and then waits for
    ``_inside`` to empty. Under CPython's GIL those steps are atomic and happen in program order, so either
    the transaction sees the resize coming (and backs out to wait for it) or the resize sees the transaction
    (and waits for it to leave)."""

    def __init__(self) -> None:
        self._inside: list[None] = []
        self._resizing = False
        self._resize_lock = threading.Lock()  # one resize at a time
        self._open = threading.Event()
        self._open.set()

    def enter(self) -> None:
        inside = self._inside
        while True:
            inside.append(None)
            if not self._resizing:
                return
            inside.pop()
            self._open.wait()

    def leave(self) -> None:
        self._inside.pop()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._resize_lock:
            self._open.clear()
            self._resizing = True
            try:
                while self._inside:  # transactions of other threads finishing: resizes are rare
                    time.sleep(0.0001)
                yield
            finally:
                self._resizing = False
                self._open.set()


def put_reserve(map_size_max: int) -> int:
    """Bytes of a capped map that puts leave free for finishing jobs: a tenth, at least 256 KiB."""
    return max(map_size_max // 10, 256 << 10)


class Env:
    """One shard's LMDB environment in this process, with its named databases and map management."""

    def __init__(self, path: str, options: EnvOptions, db_names: tuple[str, ...] = DB_NAMES) -> None:
        self.path = path
        self.options = options
        self.pid = os.getpid()
        self.refs = 0
        self._gate = _Gate()
        # Write transactions that waited for the write lock (another thread or process was writing here):
        # consumers move to another shard when theirs is contended. A hint: increments may race.
        self.waited_writes = 0
        self._meta: MetaPages | None = None
        try:
            private_dir(path)
        except OSError as exc:
            raise StoreError(f"cannot create the LMDB environment's directory {path!r}: {exc}") from exc
        try:
            self.env = self._open(path, options)
            self.env.reader_check()  # reclaim slots of readers SIGKILLed while holding a transaction
            # Named databases are opened once, before any other transaction of this process (LMDB rule).
            while True:
                try:
                    with self.env.begin(write=True) as txn:
                        self.dbs = {name: self.env.open_db(name.encode(), txn=txn) for name in db_names}
                    break
                except lmdb.MapResizedError:
                    self.env.set_mapsize(0)  # another process grew the map since we opened: adopt its size
            page_size = int(self.env.stat()["psize"])
        except lmdb.Error as exc:
            raise StoreError(f"cannot open the LMDB environment {path!r}: {exc}") from exc
        # With a hard cap, puts stop short of it (``put_reserve``): finishing the jobs already there (claims,
        # acks, nacks, purges) needs free pages too, since LMDB copies every page a transaction changes.
        limit = options.map_size_max
        self.put_limit_pages = None if limit is None else (limit - put_reserve(limit)) // page_size
        self._meta = MetaPages.open(path)  # the meta pages exist: the transaction above committed

    def pages_in_use(self, txn: Any) -> int:
        """Pages the named databases hold in ``txn`` (free pages and LMDB's own few not counted)."""
        total = 0
        for db in self.dbs.values():
            stat = txn.stat(db)
            total += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
        return total

    @staticmethod
    def _open(path: str, options: EnvOptions) -> Any:
        for _attempt in range(100):
            try:
                return lmdb.open(
                    path,
                    subdir=True,
                    map_size=options.map_size,
                    max_dbs=16,
                    max_readers=1024,
                    max_spare_txns=0,  # py-lmdb #346: no cached read transactions that could cross a fork
                    sync=options.sync,
                    metasync=options.sync,
                    writemap=options.writemap,
                    map_async=False,
                    readahead=False,
                    lock=True,
                    mode=0o600,
                )
            except lmdb.MapResizedError:
                continue  # another process grew the map between LMDB's open and its first read: again
        raise StoreError(f"cannot open {path!r}: its map kept growing under us (100 attempts)")

    def write(self, fn: Callable[[Any], T], *, durable: bool = False) -> T:
        """Run ``fn(txn)`` in one write transaction and commit; abort on any exception (which propagates).

        ``durable``: the commit is on disk (fdatasync) before this returns, even if this environment was
        opened without ``sync``. Grows the map and retries on ``MapFullError``; follows another process's
        growth on ``MapResizedError``. Any other ``lmdb.Error`` becomes a ``StoreError``.
        """
        gate = self._gate
        while True:
            gate.enter()
            try:
                began = time.perf_counter()
                with self.env.begin(write=True) as txn:
                    if time.perf_counter() - began > WRITE_WAIT_NOTICED:
                        self.waited_writes += 1
                    result = fn(txn)
                if durable and not self.options.sync:
                    self.env.sync(True)
                return result
            except lmdb.MapFullError:
                recover = self._grow
            except lmdb.MapResizedError:
                recover = self._follow_resize
            except lmdb.Error as exc:
                raise StoreError(f"LMDB write failed in {self.path!r}: {exc}") from exc
            finally:
                gate.leave()
            recover()

    def read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(txn)`` in one short read transaction."""
        gate = self._gate
        while True:
            gate.enter()
            try:
                with self.env.begin(write=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                pass
            except lmdb.Error as exc:
                raise StoreError(f"LMDB read failed in {self.path!r}: {exc}") from exc
            finally:
                gate.leave()
            self._follow_resize()

    def _grow(self) -> None:
        with self._gate.exclusive():
            current = self.env.info()["map_size"]
            limit = self.options.map_size_max
            if limit is not None and current >= limit:
                raise StoreFull(
                    f"the shard at {self.path!r} is full: its map reached map_size_max={limit:,} bytes"
                )
            new_size = current * 2 if limit is None else min(current * 2, limit)
            try:
                self.env.set_mapsize(new_size)
            except lmdb.Error as exc:
                raise StoreError(f"cannot grow the map of {self.path!r} to {new_size:,}: {exc}") from exc

    def _follow_resize(self) -> None:
        with self._gate.exclusive():
            try:
                self.env.set_mapsize(0)  # adopt the size another process set
            except lmdb.Error as exc:
                raise StoreError(f"cannot follow the map growth of {self.path!r}: {exc}") from exc

    def last_txnid(self) -> int:
        """The id of the last transaction any process committed here: equal ids, equal contents. Read from
        the meta pages (``metapages.py``: a tenth of the time of py-lmdb's ``info()``) where possible."""
        try:
            meta = self._meta
            if meta is not None:
                return meta.txnid()
            return int(self.env.info()["last_txnid"])
        except (lmdb.Error, ValueError) as exc:  # ValueError: the mapping was closed under us (close())
            raise StoreError(f"cannot read {self.path!r}: {exc}") from exc

    def reader_check(self) -> int:
        try:
            return int(self.env.reader_check())
        except lmdb.Error as exc:
            raise StoreError(f"reader_check failed in {self.path!r}: {exc}") from exc

    def sync(self) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.sync(True)

    def close(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None
        with contextlib.suppress(lmdb.Error):
            self.env.close()


class StoreInUse(StoreError):
    """The store is being compacted (``queue_compact``), or, for the compaction, some process has it open.
    Wait for the compaction to finish, or stop the processes that use the store, and try again."""


def _lock_open_file(root: str, operation: int) -> int:
    """An fd of ``<root>/open.lock`` holding ``flock(operation | LOCK_NB)``; ``StoreInUse`` if it is taken.

    A compaction swaps the whole directory: if the file we locked is no longer the one at the path, we
    locked the old store's, so we look again."""
    path = os.path.join(root, OPEN_LOCK_FILE)
    for _attempt in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            try:  # a read-only directory: flock works on a read-only descriptor too
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                raise StoreError(f"cannot open {path!r}: {exc}") from exc
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            locked, current = os.fstat(fd), os.stat(path)
        except BlockingIOError:
            os.close(fd)
            if operation == fcntl.LOCK_SH:
                raise StoreInUse(
                    f"the store at {root!r} is being compacted (queue_compact); open it again once that "
                    f"has finished"
                ) from None
            raise StoreInUse(
                f"the store at {root!r} is open in another process (or in this one): stop every worker, "
                f"web server and shell that uses it, then try again"
            ) from None
        except OSError:
            os.close(fd)
            continue  # the file went away (the directory was swapped): look again
        if (locked.st_dev, locked.st_ino) == (current.st_dev, current.st_ino):
            return fd
        os.close(fd)
    raise StoreError(f"cannot lock {path!r}: the store directory kept changing under us")


def lock_store_exclusive(root: str) -> int:
    """Take ``<root>/open.lock`` exclusively (no process may have the store open, nor open it until the fd
    is closed). -> the fd; ``StoreInUse`` if any process, this one included, has the store open."""
    return _lock_open_file(root, fcntl.LOCK_EX)


@dataclass
class _OpenLock:
    fd: int
    pid: int
    refs: int = 0


class _Registry:
    """Process-wide: one ``Env`` per shard path. A forked child reopens its own (never the parent's).
    Also holds, per store directory with an environment open, the shared lock on its ``open.lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.envs: dict[str, Env] = {}
        self.open_locks: dict[str, _OpenLock] = {}

    def _hold_store(self, root: str) -> None:
        held = self.open_locks.get(root)
        if held is not None and held.pid != os.getpid():
            os.close(held.fd)  # the child's copy of an inherited fd: the parent's lock stays the parent's
            held = None
        if held is None:
            held = self.open_locks[root] = _OpenLock(_lock_open_file(root, fcntl.LOCK_SH), os.getpid())
        held.refs += 1

    def _drop_store(self, root: str) -> None:
        held = self.open_locks.get(root)
        if held is None or held.pid != os.getpid():
            return
        held.refs -= 1
        if held.refs <= 0:
            del self.open_locks[root]
            os.close(held.fd)

    def acquire(self, path: str, options: EnvOptions, db_names: tuple[str, ...] = DB_NAMES) -> Env:
        with self.lock:
            env = self.envs.get(path)
            if env is not None and env.pid != os.getpid():
                # Inherited across fork: close the child's copy (it holds no locks of its own) and reopen.
                env.close()
                env = None
            if env is None:
                root = os.path.dirname(path)
                self._hold_store(root)
                try:
                    env = Env(path, options, db_names)
                except BaseException:
                    self._drop_store(root)
                    raise
                self.envs[path] = env
            elif env.options.writemap != options.writemap:
                raise QueueError(
                    f"{path!r} is already open in this process with writemap={env.options.writemap}; "
                    f"every Queue of one store must use the same durability mode"
                )
            env.refs += 1
            return env

    def release(self, env: Env) -> None:
        with self.lock:
            if env.pid != os.getpid():
                return
            env.refs -= 1
            if env.refs <= 0 and self.envs.get(env.path) is env:
                del self.envs[env.path]
                env.close()
                self._drop_store(os.path.dirname(env.path))

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by another thread of the parent at fork time.
        self.lock = threading.Lock()


REGISTRY = _Registry()
os.register_at_fork(after_in_child=REGISTRY._after_fork_in_child)
add_open_probe(lambda: [f"the LMDB environment {path}" for path in list(REGISTRY.envs)])
