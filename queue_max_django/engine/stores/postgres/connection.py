"""Connections of the PostgreSQL store: one per thread, opened on first use, reopened after a failure,
closed when its thread ends.

psycopg 3 is imported here only (the ``postgres`` extra): ``load_psycopg()`` says which extra to install
when it is missing. A store runs each operation as one transaction on the calling thread's connection
(``Connections.transaction``); no transaction stays open between operations, so nothing is held while a
task runs.

A thread's connection lives as long as the thread (or until ``close_thread()``, or the store's
``close()``): the thread-local that holds it is dropped by Python when the thread ends, and a finalizer then
closes the connection, so the threads of a pool that come and go (a worker's ``--autoscale``, a web
server's request threads, ``asyncio.to_thread``) leave no connection behind them.

Nothing outlives a transaction on the server but what the connection's startup parameters set, so the
store works through a pooler that hands each transaction to any server connection (PgBouncer in
transaction mode) when it prepares no statements: ``prepare_threshold=None`` (psycopg prepares a statement
run ``PREPARE_THRESHOLD`` times on a connection, which such a pooler loses or clashes with before
PgBouncer 1.21) and no LISTEN (``hints.py``).

When the server cannot be reached the operation raises ``StoreUnavailable`` (nothing was written); when it
drops the connection during an operation, ``StoreError`` (the ``psycopg`` error chained): a write whose
commit was not confirmed is never retried here, since it may have committed, so nothing is written twice
and nothing is lost silently. The next operation reconnects, waiting between attempts (``RECONNECT_DELAYS``)
so that a restarting server is not hammered. A connection the server closed while it sat idle between
operations (a restart, a failover, an idle timeout) is seen before it is used (``_Held.hung_up``: one poll of
its socket) and replaced, so the operation runs on a new one instead of failing.

A thread may lend the store its own connection for a while (``Connections.borrowed``: Django's, inside the
caller's open transaction): the store's operations of that thread then run in the caller's transaction,
so they see the jobs it wrote and what they write commits or rolls back with it (a test inside Django's
``TestCase``; the store's opening and a task's limits on a first enqueue inside ``transaction.atomic()``,
which then need no second server connection behind a pooler). A borrowed connection is never closed,
committed or dropped by the store; a transaction of the store's on it is a savepoint (``Borrowed``), so
that one that fails leaves the caller's transaction usable.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigurationError, QueueClosed, StoreError, StoreUnavailable
from ...forks import add_open_probe, fork_generation
from .prepared import Session, Statement

RECONNECT_DELAYS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0)  # seconds before each try to reconnect, then the last
CONNECT_TIMEOUT = 10  # seconds
ENDING_STATES = ("08", "57P")
"""SQLSTATE prefixes of an error with which the server ends the session (a connection exception; an
administrator's or a crash's shutdown): the operation may have committed before it came, and the connection
is gone, however psycopg marks it."""
PREPARE_THRESHOLD = 5  # psycopg's default: a statement run this often on a connection is prepared
POOL_WAIT_TIMEOUT = "query_wait_timeout"
"""PgBouncer's error when a client's statement waited that long for a server connection: it never reached
the server."""

_made: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # the store's connections -> where
add_open_probe(lambda: [f"a PostgreSQL connection to {where}" for conn, where in list(_made.items())
                        if not conn.closed])  # fmt: skip


def load_psycopg() -> Any:
    """The psycopg module, or ``ConfigurationError`` saying how to install it."""
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigurationError(
            "the PostgreSQL store needs psycopg 3: install this package with its postgres extra "
            "(pip install '<checkout or wheel>[postgres]'), or psycopg[binary]>=3.2"
        ) from exc
    return psycopg


def display_url(url: str) -> str:
    """``url`` without its password, for logs and ``info()``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class _ThreadState(threading.local):
    """A thread's state in ``Connections``: its connection (``held``), the caller's connection it lent the
    store (``lent``), the cursor kept on a caller's connection (``caller``). The class's None values are
    every thread's until it sets its own, so reading one is a plain attribute read (a ``getattr`` with a
    default that misses raises and catches inside: dearer, on every operation)."""

    held: _Held | None = None
    lent: Borrowed | None = None
    caller: Any = None


class _Held:
    """A thread's connection, as its thread-local holds it: when the thread ends, Python drops the
    thread's locals, and the finalizer registered on this object closes the connection."""

    __slots__ = ("__weakref__", "_poller", "conn", "cursor", "session")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.cursor: Any = None  # made on first use (Connections.runner)
        self.session: Session | None = None  # made on first use (Connections.first_row)
        self._poller: Any = None

    def hung_up(self) -> bool:
        """Whether the server has ended the connection while it sat idle between operations: its socket is
        readable. Between this store's operations the server has nothing to say (these connections LISTEN
        to nothing), so anything to read is its goodbye (``FATAL: terminating connection``) or the end of
        the stream; the rare message of another kind (a setting reported after a configuration reload)
        costs a needless reconnect, never an error. One ``poll()`` that does not wait, on a poller of the
        connection's socket kept from one call to the next."""
        poller = self._poller
        if poller is None:
            try:
                fd = self.conn.pgconn.socket
            except Exception:  # closed or broken already
                return True
            poller = self._poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))


def savepoint(conn: Any) -> Any:
    """``conn.transaction()`` as a savepoint inside the caller's open transaction, never a commit of it.
    A caller's connection outside autocommit whose transaction has not begun yet (Django's ``atomic()``
    before its first statement) reads as idle, and psycopg makes the block its outermost transaction then,
    COMMITting at its end: what the block wrote would outlive a rollback of the caller's. So the caller's
    transaction is begun first (one round trip, only in that case)."""
    if conn.info.transaction_status.name == "IDLE":
        conn.execute("SELECT 1")
    return conn.transaction()


def server_bound(conn: Any, cursor: Any, threshold: int | None) -> Callable[[str, Any], Any]:
    """How the store runs its statements on a caller's connection (a put in the caller's transaction): on a
    cursor of it that binds on the server (``cursor``: Django's cursors bind on the client, so each put
    would send its SQL as new text, which the server parses and plans every time, at more than the cost of
    running it), prepared once they ran ``threshold`` times on that connection (psycopg counts them and
    keeps the prepared statements per connection), or never with ``threshold`` None (behind a transaction
    pooler). A caller's connection with a ``prepare_threshold`` of its own keeps it; one with None, as
    Django's are made, prepares only these statements: the store's threshold is set while one runs, so
    that none of the caller's own is prepared or counted. psycopg forgets the prepared statements at a
    rollback of the connection (``DEALLOCATE ALL``: a round trip) and prepares them again when due."""
    if threshold is None:
        return functools.partial(cursor.execute, prepare=False)

    def execute(sql: str, params: Any) -> Any:
        if conn.prepare_threshold is not None:
            return cursor.execute(sql, params)
        conn.prepare_threshold = threshold
        try:
            return cursor.execute(sql, params)
        finally:
            conn.prepare_threshold = None

    return execute


class Borrowed:
    """A caller's connection as the store's operations use it while it is lent (``Connections.borrowed``):
    its statements bind on the server, as on the store's own connections (Django's cursors bind on the
    client), and ``transaction()`` is a savepoint inside the caller's transaction, never a commit of it."""

    def __init__(self, raw: Any, cursor_class: Any, prepare: bool | None) -> None:
        self.raw = raw
        self._cursor_class = cursor_class
        self._prepare = prepare

    def execute(self, query: Any, params: Any = None) -> Any:
        return self._cursor_class(self.raw).execute(query, params, prepare=self._prepare)

    def transaction(self) -> Any:
        return savepoint(self.raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class Connections:
    """Per-thread psycopg connections to one database (``conninfo``: a URL or key=value string).

    ``transaction()`` gives the calling thread's connection inside one transaction; ``connection()`` the
    connection outside any (for LISTEN, or reads in autocommit). ``prepare_threshold``: psycopg's (None:
    never prepare a statement on the server, for PgBouncer in transaction mode)."""

    def __init__(
        self,
        conninfo: str,
        *,
        application_name: str = "queue_max",
        prepare_threshold: int | None = PREPARE_THRESHOLD,
    ) -> None:
        self.psycopg = load_psycopg()
        self.conninfo = conninfo
        self.application_name = application_name
        self.prepare_threshold = prepare_threshold
        self._local = _ThreadState()
        self._all: dict[Any, weakref.finalize[Any, Any]] = {}  # thread connection -> its closer
        self._lock = threading.Lock()
        self._generation = fork_generation()
        self._pid = os.getpid()
        self._failures = 0
        self._closed = False
        self.errors = (self.psycopg.OperationalError, self.psycopg.InterfaceError)

    def connect(self, *, autocommit: bool = True) -> Any:
        """A new connection of this store's (the caller owns it)."""
        try:
            conn = self.psycopg.connect(
                self.conninfo,
                autocommit=autocommit,
                connect_timeout=CONNECT_TIMEOUT,
                application_name=self.application_name,
                prepare_threshold=self.prepare_threshold,
            )
        except self.psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot connect to the PostgreSQL store at {display_url(self.conninfo)}: {exc}"
            ) from exc
        _made[conn] = display_url(self.conninfo)  # open_stores() lists it while it is open
        return conn

    def connection(self) -> Any:
        """This thread's connection (opened, or reopened after a failure, on first use)."""
        if self._generation != fork_generation():
            self._after_fork()
        lent = self._local.lent
        if lent is not None:
            return lent
        held = self._local.held
        if held is not None and not held.conn.closed:
            if not held.hung_up():
                return held.conn
            self._drop(held.conn)  # the server ended it while idle (a restart): nothing was sent on it
        if self._closed:
            raise StoreError("the PostgreSQL store is closed")
        delay = RECONNECT_DELAYS[min(self._failures, len(RECONNECT_DELAYS) - 1)]
        if delay:
            time.sleep(delay)
        try:
            conn = self.connect()
        except StoreError:
            self._failures += 1
            raise
        self._failures = 0
        held = _Held(conn)
        closer = weakref.finalize(held, self._thread_ended, conn, self._pid)
        closer.atexit = False  # at exit the process's sockets close with it
        with self._lock:
            if self._closed:  # close() ran meanwhile: it cannot have seen this one
                closer.detach()
                conn.close()
                raise StoreError("the PostgreSQL store is closed")
            self._all[conn] = closer
        self._local.held = held
        return conn

    def runner(self, conn: Any) -> Any:
        """What runs one statement on ``conn``, this thread's connection (``connection()``): a cursor of
        it kept from one statement to the next, or ``conn`` itself when it is lent (``borrowed``). A new
        psycopg cursor (``conn.execute`` makes one) finds again how to send each parameter's type: a
        quarter of a single put's CPU in this process, which a kept cursor spends once."""
        held = self._local.held
        if held is None or held.conn is not conn:
            return conn
        cursor = held.cursor
        if cursor is None:
            cursor = held.cursor = conn.cursor()
        return cursor

    def first_row(self, conn: Any, statement: Statement, params: Any) -> tuple[Any, ...]:
        """``statement`` run once on ``conn``, this thread's connection (``connection()``), outside a
        transaction -> its first row: through libpq, prepared once per connection (``prepared.py``); on
        the connection's cursor when it is lent (``borrowed``), or a value is one not given to libpq here."""
        held = self._local.held
        if held is not None and held.conn is conn:
            session = held.session
            if session is None:
                session = held.session = Session(conn, self.psycopg, self.prepare_threshold is not None)
            row = session.first_row(statement, params)
            if row is not None:
                return row
        return tuple(self.runner(conn).execute(statement.sql, params).fetchone())

    def caller_cursor(self, conn: Any) -> Any:
        """A cursor of ``conn``, a caller's connection, that binds on the server; kept for this thread's
        next statement on the same connection (``runner``'s reason), until one on another."""
        kept = self._local.caller
        if kept is not None and kept.connection is conn:
            return kept
        cursor = self._local.caller = self.psycopg.Cursor(conn)
        return cursor

    def lent(self) -> Borrowed | None:
        """The caller's connection that this thread lent the store (``borrowed``), or None."""
        lent: Borrowed | None = self._local.lent
        return lent

    @contextlib.contextmanager
    def borrowed(self, conn: Any) -> Iterator[None]:
        """Inside the block, this thread's operations run on ``conn`` (a psycopg connection inside an
        open transaction of the caller's: Django's in ``transaction.atomic()``), not on the store's own."""
        if conn.autocommit:
            raise StoreError("a connection lent to the store must be inside a transaction (not autocommit)")
        previous = self._local.lent
        prepare = None if self.prepare_threshold is not None else False
        self._local.lent = Borrowed(conn, self.psycopg.Cursor, prepare)
        try:
            yield
        finally:
            self._local.lent = previous

    def close_thread(self) -> None:
        """Close this thread's connection now (a thread that is done with the store; the next operation
        of this thread opens a new one)."""
        held = self._local.held
        if held is not None:
            self._drop(held.conn)

    def thread_connections(self) -> int:
        """How many threads' connections are open (for tests and figures)."""
        with self._lock:
            return len(self._all)

    def _thread_ended(self, conn: Any, pid: int) -> None:
        """A thread that held ``conn`` ended: close it (never in a forked child: the parent's socket)."""
        if pid != os.getpid():
            return
        with self._lock:
            self._all.pop(conn, None)
        with contextlib.suppress(Exception):
            conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """This thread's connection inside one transaction, committed when the block ends without error.
        A lost connection raises ``StoreError`` (and is dropped: the next call reconnects)."""
        conn = self.connection()
        with self.guard(conn), conn.transaction():
            yield conn

    @contextlib.contextmanager
    def guard(self, conn: Any, *, drop: bool = True) -> Iterator[None]:
        """psycopg's errors inside the block as ``StoreError`` (chained). A lost connection is dropped
        (``drop``: it is one of this store's) so that the next operation reconnects."""
        try:
            yield
        except self.psycopg.Error as exc:
            if self._closed:  # close() ended the connection under this operation: the queue's close wins
                raise QueueClosed("the PostgreSQL store was closed during the operation") from exc
            self._raise_as_store_error(conn, exc, drop)

    def _raise_as_store_error(self, conn: Any, exc: Exception, drop: bool) -> NoReturn:
        where = display_url(self.conninfo)
        if POOL_WAIT_TIMEOUT in str(exc):  # the pooler never gave the statement a server connection
            if drop:
                self._drop(conn)
            raise StoreUnavailable(
                f"the PostgreSQL store at {where} got no server connection from the pooler within its "
                f"query_wait_timeout (PgBouncer); nothing was written. Every server connection of the pool "
                f"was busy: if this thread holds one in an open transaction (transaction.atomic() on the "
                f"store's alias), the store waited for this thread itself: give the pool a server "
                f"connection more than the transactions that may be open at once, or a reserve pool "
                f"(docs/howto/postgresql.md, 'A pool of one server connection')"
            ) from exc
        if not isinstance(exc, self.errors):
            raise StoreError(f"the PostgreSQL store at {where} refused an operation: {exc}") from exc
        state = getattr(exc, "sqlstate", None) or ""
        ending = state.startswith(ENDING_STATES)  # the server said it is ending the session
        if not ending and not getattr(conn, "broken", True) and not conn.closed:
            # The server answered (a deadlock, a serialization failure, a cancel): the statement was rolled
            # back and the connection is fine.
            raise StoreError(f"the PostgreSQL store at {where} rolled an operation back: {exc}") from exc
        if drop:
            self._drop(conn)
        raise StoreError(
            f"the PostgreSQL store at {where} failed during an operation, which may or may not have "
            f"committed: {exc}"
        ) from exc

    def run(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(conn)`` in one transaction of this thread's connection."""
        with self.transaction() as conn:
            return fn(conn)

    def _drop(self, conn: Any) -> None:
        if isinstance(conn, Borrowed):
            return  # the caller's: theirs to close
        with contextlib.suppress(Exception):
            conn.close()
        with self._lock:
            closer = self._all.pop(conn, None)
        if closer is not None:
            closer.detach()
        held = self._local.held
        if held is not None and held.conn is conn:
            self._local.held = None

    def _after_fork(self) -> None:
        """A forked child must not use its parent's sockets: forget them (never close: the parent's)."""
        with self._lock:
            closers, self._all = list(self._all.values()), {}
        for closer in closers:
            closer.detach()
        self._local = _ThreadState()
        self._generation = fork_generation()
        self._pid = os.getpid()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all = list(self._all.items()), {}
        for _conn, closer in conns:
            closer.detach()
        if self._generation != fork_generation():
            return
        for conn, _closer in conns:
            with contextlib.suppress(Exception):
                conn.close()
