"""Waking idle consumers, in this process and in others, without polling LMDB in a tight loop.

After a commit that makes a job claimable, the producer writes one byte to the store's ``wake`` file. A
consumer with nothing to do waits on an inotify watch of that file (Linux), so it wakes within tens of
microseconds of a put from any process and burns no CPU while idle. A wake-up is only a hint: the consumer
re-checks the store, and every wait is bounded so a lost hint costs at most the wait's timeout. Where inotify
is not available the waiter falls back to polling with backoff (0.5 ms doubling to 50 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import threading
import time

_IN_MODIFY = 0x00000002
_IN_CLOEXEC = 0o2000000
_IN_NONBLOCK = 0o4000


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


class Waker:
    """One per ``Queue``: ``notify()`` after a commit; ``wait(timeout)`` in a consumer thread."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._local = threading.local()
        self._fds: set[int] = set()
        self._write_fd: int | None = None
        self._closed = False
        self._pid = os.getpid()

    # -- producer side

    def notify(self) -> None:
        fd = self._write_fd
        if fd is None or self._pid != os.getpid():
            fd = self._open_writer()
            if fd is None:
                return
        with contextlib.suppress(OSError):  # a hint only: consumers' bounded waits cover a lost one
            os.pwrite(fd, b"\x01", 0)

    def _open_writer(self) -> int | None:
        with self._lock:
            if self._closed:
                return None
            if self._pid != os.getpid():
                self._reset_after_fork()
            if self._write_fd is None:
                try:
                    self._write_fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError:
                    return None
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
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except (OSError, ValueError):  # closed under us by close()
            return
        if ready:
            self._drain(fd)

    def changed(self) -> bool:
        """Did a hint arrive since this thread last waited or asked? True the first time a thread asks (its
        watch starts now: nothing before is known) and whenever hints are unavailable. Consumes the hints."""
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None or self._local.pid != os.getpid():
            self._watch_fd()
            return True
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if data:
            self._drain(fd)
        return True

    def _watch_fd(self) -> int | None:
        fd: int | None = getattr(self._local, "fd", None)
        if fd is not None and self._local.pid == os.getpid():
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
        self._local.fd = new_fd
        self._local.pid = os.getpid()
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
        self._local = threading.local()
        self._pid = os.getpid()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            fds, self._fds = self._fds, set()
            write_fd, self._write_fd = self._write_fd, None
        if self._pid != os.getpid():
            return
        with contextlib.suppress(OSError):  # wake our own waiters so they see the close
            if write_fd is None:
                write_fd = os.open(self._path, os.O_WRONLY | os.O_CLOEXEC)
            os.pwrite(write_fd, b"\x01", 0)
            os.close(write_fd)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
