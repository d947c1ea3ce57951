"""Waking idle consumers of a PostgreSQL store: LISTEN/NOTIFY, with a bounded polling fallback.

A write that may make a job claimable (a put whose job leads its queue, a retry, a release, a requeue,
recovery, promotion) sends one ``NOTIFY`` on the store's channel inside its transaction, delivered at commit
(PostgreSQL folds identical notifications of one transaction into one). Each process that waits for work
has one listener thread with its own connection (``LISTEN``); every notification bumps a counter and wakes
the waiting threads (and the descriptors handed out by ``watch()``, for ``AsyncQueue``).

A hint is only a hint: consumers re-check the store, and every wait is bounded (the Queue's
``MAX_IDLE_WAIT``), so a lost notification costs at most one idle re-check. Without a listener (``listen``
False: behind PgBouncer in transaction mode, which drops LISTEN; or while the listener reconnects) the store
is in poll-only mode: ``changed()`` always says "maybe", and ``wait()`` sleeps with a backoff from 5 ms to
``poll_interval``.

NOTIFY serialises committing transactions on the server (it takes a lock to keep notifications in commit
order), so with many concurrent writers it costs throughput: ``notify=False`` turns sending off and leaves
consumers to the polling fallback.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ...forks import fork_generation

CHANNEL = "queue_max"
POLL_START = 0.005  # seconds: the first poll-only wait after work was found, doubled up to poll_interval


class PgHints:
    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        listen: bool = True,
        notify: bool = True,
        poll_interval: float = 1.0,
        channel: str = CHANNEL,
    ) -> None:
        self._connect = connect  # a new autocommit connection of the store's
        self.listen = listen
        self.sends = notify  # whether the store's writes NOTIFY (read by the store)
        self.channel = channel
        self._poll_interval = poll_interval
        self._count = 0
        self._listening = False  # the listener holds a live LISTEN connection
        self._cond = threading.Condition()
        self._local = threading.local()
        self._pipes: dict[int, int] = {}  # watch() read end -> write end
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self._closed = False
        self._generation = fork_generation()

    # -- the listener

    def _ensure_listener(self) -> None:
        if self._generation != fork_generation():
            self._after_fork()
        if self._thread is not None or not self.listen or self._closed:
            return
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._listen_loop, name="queue-max-listen", daemon=True
                )
                self._thread.start()

    def _listen_loop(self) -> None:
        delay = 0.05
        while not self._closed:
            try:
                conn = self._connect()
            except Exception:  # the server is away: poll-only until it is back
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            try:
                conn.execute(f'LISTEN "{self.channel}"')
                self._conn = conn
                self._listening = True
                self._bump()  # what happened while nobody listened is unknown: look again
                while not self._closed:
                    for _note in conn.notifies(timeout=0.2, stop_after=1):
                        self._bump()
            except Exception:
                pass  # lost the connection (or closed by close()): reconnect, unless closing
            finally:
                self._listening = False
                self._conn = None
                with contextlib.suppress(Exception):
                    conn.close()

    def _bump(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()
            pipes = list(self._pipes.items())
        for read_fd, write_fd in pipes:
            try:
                os.write(write_fd, b"\x01")
            except BlockingIOError:
                pass  # full: the reader has a wake-up pending already
            except OSError:  # the reader closed its end
                with self._cond:
                    self._pipes.pop(read_fd, None)
                with contextlib.suppress(OSError):
                    os.close(write_fd)

    # -- the hints protocol

    def changed(self) -> bool:
        """Did a notification arrive since this thread last asked? True when it cannot be known (first
        call of a thread, poll-only mode, the listener reconnecting). Consumes them."""
        self._ensure_listener()
        if not self._listening:
            return True
        local = self._local
        seen = getattr(local, "seen", None)
        count = self._count
        local.seen = count
        return seen is None or seen != count

    def mark(self) -> Any:
        self._ensure_listener()
        return self._count if self._listening else None

    @staticmethod
    def changed_since(old: Any, new: Any) -> list[int] | None:
        if old is None or new is None:
            return None
        return [] if old == new else [0]

    def wait(self, timeout: float) -> None:
        if timeout <= 0:
            return
        self._ensure_listener()
        if not self._listening:
            step = getattr(self._local, "step", POLL_START)
            time.sleep(min(step, timeout))
            self._local.step = min(step * 2, self._poll_interval)
            return
        seen = getattr(self._local, "seen", None)
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._count != seen or not self._listening, timeout)

    def reset_poll(self) -> None:
        self._local.step = POLL_START

    def watch(self) -> int | None:
        self._ensure_listener()
        if not self.listen:
            return None
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        with self._cond:
            self._pipes[read_fd] = write_fd
        return read_fd

    def local(self) -> None:
        """This process made a job claimable: its own consumers know at once (the NOTIFY its statement sent
        reaches the listener only later, and other processes only)."""
        self._bump()

    def notify(self, shard: int | None = None) -> None:
        """Send a hint now, outside any transaction (the store's writes send theirs inside their own)."""
        if not self.sends:
            return
        with contextlib.suppress(Exception):
            conn = self._connect()
            try:
                conn.execute(f'NOTIFY "{self.channel}"')
            finally:
                conn.close()

    @property
    def listening(self) -> bool:
        """A listener holds a live LISTEN connection (False: poll-only, for now or for good)."""
        return self._listening

    # -- lifecycle

    def _after_fork(self) -> None:
        self._thread = None
        self._conn = None
        self._listening = False
        self._pipes = {}
        self._cond = threading.Condition()
        self._local = threading.local()
        self._generation = fork_generation()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            pipes, self._pipes = list(self._pipes.values()), {}
        if self._generation != fork_generation():
            return
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.cancel_safe() if hasattr(conn, "cancel_safe") else conn.cancel()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)
        for write_fd in pipes:
            with contextlib.suppress(OSError):
                os.write(write_fd, b"\x01")
                os.close(write_fd)
