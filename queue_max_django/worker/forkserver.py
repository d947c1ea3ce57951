"""The fork server: a small process that forks the worker processes, so that each starts in milliseconds
with the Django that ``queue_worker`` set up once, instead of starting Python and Django again (spawn).

``queue_worker`` forks it after Django is set up and before the command opens any store (a process that has a
store open is never forked: ``engine/forks.py``), with Django's database connections closed: it holds no LMDB
handle, no psycopg connection and no thread. ``ForkServer.start`` and each fork of a worker check that with
the engine's probes (``engine.forks.refuse_fork_with_store``) and refuse otherwise. The supervisor (the
command's process, which opens the store next) asks it over a socket pair for each worker process, at the
start and on every restart; it forks one, answers with its pid, reaps it when it ends and reports its exit
code (negative: the signal that killed it, as ``multiprocessing`` reports it), and kills one on request.

It ignores SIGTERM and SIGINT (a signal to the whole process group is the supervisor's to handle) and ends
when the supervisor closes its end of the socket pair, or dies: the socket then reads as closed. Its worker
processes then see that their parent is gone (they watch ``os.getppid()``, as a spawned one watches the
supervisor) and stop the way a SIGTERM stops them. Nothing outlives the supervisor for long.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from ..conf import teststore
from ..engine.errors import QueueError
from ..engine.forks import refuse_fork_with_store
from . import entry
from .options import WorkerOptions
from .tally import Tally

logger = logging.getLogger("queue_max_django.worker")

CHECK_PARENT_EVERY = 1.0  # seconds: the server also looks at its parent pid this often
ANSWER_WITHIN = 30.0  # seconds: a fork server that has not answered a request by then counts as gone
END_WITHIN = 5.0  # seconds the server gets to exit when told to, before it is killed


class ForkServerLost(QueueError):
    """The fork server is gone (killed): the supervisor starts its worker processes with spawn instead."""


class ForkedProcess:
    """The supervisor's handle on a worker process the fork server forked: the part of
    ``multiprocessing.Process`` that the supervisor uses (``pid``, ``exitcode``, ``is_alive``, ``kill``,
    ``join``). ``lost``: the fork server died before it reported this process's end."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.exitcode: int | None = None
        self.lost = False

    def is_alive(self) -> bool:
        self._server.poll()
        return self.exitcode is None and not self.lost

    def kill(self) -> None:
        if self.is_alive():
            self._server.kill(self.pid)

    def join(self) -> None:
        """Nothing to wait for: the fork server reaped it before it reported its end."""


class ForkServer:
    """The supervisor's side of the fork server."""

    def __init__(self, connection: Any, pid: int) -> None:
        self.connection = connection  # readable when the server reports something, or has gone
        self.pid = pid
        self.lost = False
        self._children: dict[int, ForkedProcess] = {}

    @classmethod
    def start(cls, stop_event: Any, tally: Tally) -> ForkServer:
        """Fork the fork server from this process, which must hold no store open (``StoreOpenAtFork``
        otherwise) and run no other thread (``RuntimeError``). Django's database connections are closed
        first. ``stop_event`` and ``tally`` (made before, in shared memory) are inherited by every worker
        process it forks."""
        refuse_fork_with_store("the fork server")
        if threading.active_count() > 1:
            names = ", ".join(thread.name for thread in threading.enumerate())
            raise RuntimeError(f"not forking the fork server from a process with several threads ({names})")
        from django.db import connections

        connections.close_all()
        ours, theirs = multiprocessing.Pipe(duplex=True)
        _flush_std()
        pid = os.fork()
        if pid == 0:  # the fork server
            code = 1
            try:
                ours.close()
                serve(theirs, stop_event, tally, os.getppid())
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        return cls(ours, pid)

    def launch(self, index: int, options: WorkerOptions) -> ForkedProcess:
        """A new worker process number ``index`` (``ForkServerLost`` when the server is gone)."""
        if self.lost:
            raise ForkServerLost("the fork server is gone")
        try:
            self.connection.send(("start", index, options))
            while True:
                if not self.connection.poll(ANSWER_WITHIN):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.pid, signal.SIGKILL)  # stuck: its children then stop by themselves
                    raise EOFError(f"no answer within {ANSWER_WITHIN:g} s")
                message = self.connection.recv()
                if message[0] == "started":
                    child = self._children[message[1]] = ForkedProcess(self, message[1])
                    return child
                if message[0] == "refused":
                    raise ForkServerLost(f"the fork server refused to fork: {message[1]}")
                self._handle(message)
        except (EOFError, OSError) as exc:
            self._lose()
            raise ForkServerLost(f"the fork server is gone: {exc or type(exc).__name__}") from None

    def kill(self, pid: int) -> None:
        """SIGKILL the worker process ``pid`` (the server does it: the pid is its child, not yet reaped)."""
        with contextlib.suppress(EOFError, OSError):
            self.connection.send(("kill", pid))

    def poll(self) -> None:
        """Read what the server reported (ends of worker processes) without waiting."""
        if self.lost:
            return
        try:
            while self.connection.poll(0):
                self._handle(self.connection.recv())
        except (EOFError, OSError):
            self._lose()

    def close(self) -> None:
        """End the server (its worker processes, if any are left, then stop as their parent is gone)."""
        if not self.lost:
            with contextlib.suppress(EOFError, OSError):
                self.connection.send(("end",))
        self.connection.close()
        self.lost = True
        deadline = time.monotonic() + END_WITHIN
        with contextlib.suppress(ChildProcessError):
            while not os.waitpid(self.pid, os.WNOHANG)[0]:  # it exits at once: reap it
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.01)

    def _handle(self, message: tuple[Any, ...]) -> None:
        if message[0] == "exited":
            child = self._children.pop(message[1], None)
            if child is not None:
                child.exitcode = message[2]

    def _lose(self) -> None:
        if not self.lost:
            self.lost = True
            logger.error("the fork server (pid %s) is gone; worker processes are started with spawn from now "
                         "on", self.pid)  # fmt: skip
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
        for child in self._children.values():
            child.lost = True
        self._children.clear()


# ---------------------------------------------------------------------------------------------- the server


def serve(conn: Any, stop_event: Any, tally: Tally, parent: int) -> None:
    """The fork server's loop: fork worker processes on request, report their ends, until the supervisor
    (pid ``parent``) says so or is gone."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    wake_read, wake_write = os.pipe()  # a SIGCHLD makes it readable: a worker process ended
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    gc.freeze()  # what Django loaded stays shared with the worker processes: no collection touches it
    children: set[int] = set()
    try:
        while os.getppid() == parent:
            ready = multiprocessing.connection.wait([conn, wake_read], timeout=CHECK_PARENT_EVERY)
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 512)
            _reap(conn, children)
            if conn not in ready:
                continue
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return  # the supervisor is gone
            if message[0] == "start":
                try:
                    refuse_fork_with_store("a worker process")
                except QueueError as exc:
                    conn.send(("refused", str(exc)))
                    continue
                pid = _fork_worker(conn, (wake_read, wake_write), message[2], message[1], stop_event, tally)
                children.add(pid)
                conn.send(("started", pid))
            elif message[0] == "kill" and message[1] in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(message[1], signal.SIGKILL)
            elif message[0] == "end":
                return
    except (BrokenPipeError, ConnectionResetError):
        return  # the supervisor is gone


def _reap(conn: Any, children: set[int]) -> None:
    """Report every worker process that ended."""
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            conn.send(("exited", pid, os.waitstatus_to_exitcode(status)))


def _fork_worker(
    conn: Any, wake: tuple[int, int], options: WorkerOptions, index: int, stop_event: Any, tally: Tally
) -> int:
    server = os.getpid()
    _flush_std()
    pid = os.fork()
    if pid:
        return pid
    _become_worker(conn, wake, options, index, stop_event, tally, server)


def _become_worker(
    conn: Any,
    wake: tuple[int, int],
    options: WorkerOptions,
    index: int,
    stop_event: Any,
    tally: Tally,
    server: int,
) -> NoReturn:
    """In the child just forked: let go of the server's descriptors and signal set-up, then work. SIGTERM
    stays ignored until the worker installs its own handler a moment later: a stop meanwhile reaches it
    through the supervisor's stop event."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.close()
        for fd in wake:
            os.close(fd)
        teststore.share_parent_dir()  # in a test run: the supervisor's store, not a new one
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    entry.run_and_exit(options, index, stop_event, server, tally)


def _flush_std() -> None:
    """What this process buffered for stdout and stderr goes out now, not once more from a child."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
