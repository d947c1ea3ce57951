"""Waking idle consumers, in this process and in others, without polling LMDB in a tight loop.

After a commit that makes a job claimable, the producer writes 8 bytes to the store's ``wake`` file: a value
never written before, in the slot of the shard that changed (slot 0 when it could be any shard). A consumer
with nothing to do waits on an inotify watch of that file (Linux), so it wakes within tens of microseconds of
a put from any process and burns no CPU while idle. A busy consumer reads the slots (one ``pread``) to learn
which shards it must look at again, instead of asking every shard. A wake-up is only a hint: the consumer
re-checks the store, and every wait is bounded so a lost hint costs at most the wait's timeout. Where inotify
is not available the waiter falls back to polling with backoff (0.5 ms doubling to 50 ms).

Order matters, and both sides keep it: a producer writes its slot after its commit, and the write raises the
inotify event; a consumer consumes the events first and reads the slots after. A slot read too early for a
commit is followed by that commit's event, so the consumer looks again.

A consumer reads the slots through a shared read-only mapping of the file (the page cache a ``pwrite`` fills
is the page the mapping shows), so a busy consumer learns what changed without a system call: it compares
the slots with what it saw when it last asked. Only a consumer about to sleep touches the inotify watch: it
drains the events, compares the slots once more (a hint written after its last look is seen there), and
then waits on the watch (a hint written after that comparison raises an event). The file is sized to all
its slots when first opened, so the mapping never reaches past its end.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import mmap
import os
import select
import struct
import threading
import time

from ...forks import fork_generation

_IN_MODIFY = 0x00000002
_IN_CLOEXEC = 0o2000000
_IN_NONBLOCK = 0o4000
SLOT = 8  # bytes per slot: slot 0 for "any shard", then one per shard
_SLOT_VALUE = struct.Struct("<Q")
# Shared by every Waker of the process (two Queues on one store must not write the same values), from a
# random start (a process that gets a dead one's pid must not repeat its values either).
_SERIAL = itertools.count(int.from_bytes(os.urandom(5), "big"))


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


def watch(path: str) -> int | None:
    """A new non-blocking inotify descriptor that becomes readable when ``path`` is written to, or None
    where inotify is not available. The caller owns (and closes) it."""
    if _LIBC is None:
        return None
    fd = int(_LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        return None
    if _LIBC.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
        os.close(fd)
        return None
    return fd


_SLOT_BITS = SLOT * 8
_SLOT_MASK = (1 << _SLOT_BITS) - 1


def changed_shards(old: bytes | None, new: bytes | None) -> list[int] | None:
    """The shards whose slot differs between two ``slots()`` readings (0-based shard indexes), or None when
    any shard may have changed: slot 0 was written, or a reading is missing or of another length (a slot
    first written lengthens the file). The changed slots are the non-zero 8-byte groups of old XOR new."""
    if old is None or new is None or len(old) != len(new):
        return None
    diff = int.from_bytes(old, "little") ^ int.from_bytes(new, "little")
    if not diff:
        return []
    if diff & _SLOT_MASK:
        return None
    low = ((diff & -diff).bit_length() - 1) // _SLOT_BITS
    high = (diff.bit_length() - 1) // _SLOT_BITS
    if low == high:
        return [low - 1]
    return [slot - 1 for slot in range(low, high + 1) if diff >> (slot * _SLOT_BITS) & _SLOT_MASK]


def _map_slots(fd: int, size: int) -> mmap.mmap | None:
    """A shared read-only mapping of the wake file's ``size`` bytes, the file first grown to that size
    (zeros: a slot never written), or None where that fails (then the slots are read with ``pread``)."""
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)  # only ever grows: another process's slots are never cut
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    except (OSError, ValueError):
        return None


class Waker:
    """One per ``Queue``: ``notify(shard)`` after a commit; ``wait(timeout)`` in a consumer thread, and
    ``slots()`` to see which shards were notified since an earlier ``slots()``."""

    def __init__(self, path: str, shards: int) -> None:
        self._path = path
        self._size = SLOT * (shards + 1)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._fds: set[int] = set()
        self._write_fd: int | None = None
        self._map: mmap.mmap | None = None  # the slots, read without a system call (None: pread them)
        self._closed = False
        self._pid = os.getpid()
        self._generation = fork_generation()

    def watch(self) -> int | None:
        """A new non-blocking descriptor that becomes readable when a hint arrives (an inotify watch of the
        wake file), for an event loop's ``add_reader``; None where inotify is not available. The caller
        reads it empty after each wake-up and closes it."""
        return watch(self._path)

    # -- producer side

    def notify(self, shard: int | None = None) -> None:
        """Something in ``shard`` (None: in any shard) may have become claimable: wake the waiters and mark
        the slot. The value written is unique to this process and write (pid, then a serial number), so a
        reader comparing slots never mistakes a new hint for one it has seen."""
        fd = self._write_fd
        if fd is None or self._generation != fork_generation():
            fd = self._open_writer()
            if fd is None:
                return
        value = _SLOT_VALUE.pack((self._pid << 40 | next(_SERIAL) & 0xFF_FFFF_FFFF) & 0xFFFF_FFFF_FFFF_FFFF)
        try:  # noqa: SIM105 (contextlib.suppress costs half a microsecond here, on every put that wakes)
            os.pwrite(fd, value, 0 if shard is None else SLOT * (shard + 1))
        except OSError:
            pass  # a hint only: consumers' bounded waits cover a lost one

    def slots(self) -> bytes | None:
        """The slots as they are now (shorter while no hint reached the last slots), or None when the file
        cannot be read: then nothing can be known unchanged. Call after ``changed()``, never before: see
        the module's note on order."""
        fd = self._write_fd
        if fd is None or self._generation != fork_generation():
            fd = self._open_writer()
            if fd is None:
                return None
        mapped = self._map
        if mapped is not None:
            try:
                return mapped[:]
            except ValueError:  # closed by close() under us
                return None
        try:
            return os.pread(fd, self._size, 0)
        except OSError:
            return None

    mark = slots  # the hints protocol's name: an opaque reading to compare a later one with
    changed_since = staticmethod(changed_shards)

    def _open_writer(self) -> int | None:
        with self._lock:
            if self._closed:
                return None
            if self._generation != fork_generation():
                self._reset_after_fork()
            if self._write_fd is None:
                try:
                    fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError:
                    return None
                self._map = _map_slots(fd, self._size)
                self._write_fd = fd
            return self._write_fd

    # -- consumer side

    def wait(self, timeout: float) -> None:
        """Return when a hint arrives or ``timeout`` seconds pass, whichever is first."""
        if timeout <= 0:
            return
        fd = self._watch_fd()
        if fd is None:
            self._poll_wait(timeout)
            return
        local = self._local
        if self._map is not None:
            # The events of hints this thread already saw in the slots, then the slots once more: a hint
            # since the last look ends the wait now; one after this comparison raises an event.
            self._drain(fd)
            now = self.slots()
            if now is None or now != getattr(local, "seen", None):
                local.seen = now
                return
        try:  # poll, not select: a descriptor numbered above 1023 (a busy process) is fine
            ready = local.poller.poll(timeout * 1000)
        except (OSError, ValueError):  # closed under us by close()
            return
        if ready:
            self._drain(fd)

    def changed(self) -> bool:
        """Did a hint arrive since this thread last waited or asked? True the first time a thread asks (its
        watch starts now: nothing before is known) and whenever hints are unavailable. Consumes the hints."""
        local = self._local
        fd: int | None = getattr(local, "fd", None)
        if fd is None or local.generation != fork_generation():
            self._watch_fd()
            local.seen = self.slots()
            return True
        mapped = self._map
        if mapped is not None:  # no system call: the slots as they are, against what this thread saw
            try:
                now = mapped[:]
            except ValueError:  # closed under us
                return True
            if now == local.seen:
                return False
            local.seen = now
            return True
        if not local.poller.poll(0):  # no syscall error path: cheaper than a read that fails with EAGAIN
            return False
        try:
            data = os.read(fd, 4096)
        except OSError:
            return True
        if len(data) == 4096:  # there may be more: consume it all (usually one 16-byte event is there)
            self._drain(fd)
        return True

    def _watch_fd(self) -> int | None:
        fd: int | None = getattr(self._local, "fd", None)
        if fd is not None and self._local.generation == fork_generation():
            return fd
        if self._closed:
            return None
        new_fd = watch(self._path)
        if new_fd is None:
            return None
        with self._lock:
            if self._closed:
                os.close(new_fd)
                return None
            self._fds.add(new_fd)
        poller = select.poll()
        poller.register(new_fd, select.POLLIN)
        self._local.poller = poller
        self._local.fd = new_fd
        self._local.generation = fork_generation()
        return new_fd

    @staticmethod
    def _drain(fd: int) -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 4096):
                pass

    def _poll_wait(self, timeout: float) -> None:
        step = getattr(self._local, "step", 0.0005)
        time.sleep(min(step, timeout))
        self._local.step = min(step * 2, 0.05)

    def reset_poll(self) -> None:
        """After finding work, the next fallback poll starts short again."""
        self._local.step = 0.0005

    # -- lifecycle

    def _reset_after_fork(self) -> None:
        # Inherited descriptors belong to the parent's waiters; forget them (do not close: the numbers
        # might be reused) and start afresh in this process.
        self._fds = set()
        self._write_fd = None
        self._map = None  # the parent's mapping is still valid here, but it is the parent's to close
        self._local = threading.local()
        self._pid = os.getpid()
        self._generation = fork_generation()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            fds, self._fds = self._fds, set()
            write_fd, self._write_fd = self._write_fd, None
            mapped, self._map = self._map, None
        if self._generation != fork_generation():
            return
        if mapped is not None:
            with contextlib.suppress(BufferError, ValueError):
                mapped.close()
        with contextlib.suppress(OSError):  # wake our own waiters so they see the close
            if write_fd is None:
                write_fd = os.open(self._path, os.O_WRONLY | os.O_CLOEXEC)
            os.pwrite(write_fd, b"\x01", 0)
            os.close(write_fd)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
