"""Waking idle consumers of an in-memory store: a counter and a condition variable of its ``Space``.

Every write that may make a job claimable bumps the space's counter and notifies its condition while it
holds the space's lock (``Space.hint``), so a consumer that compared the counter under that lock and then
waits on the condition cannot miss it. Each ``MemoryStore`` handle has its own ``MemoryHints`` (what each
thread saw last, the descriptors handed to event loops, closed or not) over the shared space.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from .space import Space


class MemoryHints:
    def __init__(self, space: Space) -> None:
        self._space = space
        self._local = threading.local()
        self._pipes: dict[int, int] = {}  # watch() read end -> write end
        self._closed = False

    def changed(self) -> bool:
        """Did a hint arrive since this thread last waited or asked? True the first time. Consumes them."""
        count = self._space.hint_count
        seen = getattr(self._local, "seen", None)
        self._local.seen = count
        return seen != count

    def mark(self) -> Any:
        return self._space.hint_count

    @staticmethod
    def changed_since(old: Any, new: Any) -> list[int] | None:
        """One shard: none hinted, or shard 0."""
        if old is None or new is None:
            return None
        return [] if old == new else [0]

    def wait(self, timeout: float) -> None:
        if timeout <= 0 or self._closed:
            return
        space = self._space
        seen = getattr(self._local, "seen", None)
        with space.hinted:
            space.hinted.wait_for(lambda: self._closed or space.hint_count != seen, timeout)

    def reset_poll(self) -> None:
        """Nothing: there is no polling to shorten."""

    def watch(self) -> int | None:
        """A non-blocking pipe's read end, written to at every hint (for ``AsyncQueue``)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        with self._space.lock:
            self._pipes[read_fd] = write_fd
            self._space.watchers.add(self)
        return read_fd

    def notify(self, shard: int | None = None) -> None:
        with self._space.lock:
            self._space.hint()

    def poke(self) -> None:
        """Write to every descriptor ``watch`` handed out (``Space.hint`` calls it, under the lock)."""
        for read_fd, write_fd in list(self._pipes.items()):
            try:
                os.write(write_fd, b"\x01")
            except BlockingIOError:
                pass  # full: the reader has a wake-up pending already
            except OSError:  # the reader closed its end
                self._pipes.pop(read_fd, None)
                with contextlib.suppress(OSError):
                    os.close(write_fd)

    def close(self) -> None:
        space = self._space
        with space.hinted:
            self._closed = True
            space.hinted.notify_all()
            pipes, self._pipes = list(self._pipes.values()), {}
        for write_fd in pipes:
            with contextlib.suppress(OSError):
                os.write(write_fd, b"\x01")
                os.close(write_fd)
