"""Statements the store runs through libpq itself (psycopg's ``pgconn``) on its own connections: the single
put's, whose client CPU counts (issue 35: a ``.delay()`` outside a transaction).

A psycopg cursor adapts each parameter through its dumpers, keeps its prepared statements in a cache it
checks and rotates at every run, and makes a result object of rows and loaders: a third of a single put's
client CPU, for a statement whose parameters are always of the same few types. Here a ``Statement`` is
the same SQL with ``$n`` placeholders, prepared by name once per server session (``Session.prepared``)
and run by that name (``send_query_prepared``): each value sent as text (bytes in binary), its type the
one the server infers from where it stands (a column, a comparison: what psycopg's typed parameters are
cast to), and the row read as text by the statement's own decoders.

With ``prepare_threshold`` None (a transaction pooler: ``connection.py``) nothing is prepared: the SQL goes
with each run as an unnamed statement (``send_query_params``), as psycopg's ``prepare=False`` sends it.

A prepared statement lives as long as its server session: a new connection prepares it again (its
``Session`` is new). psycopg may drop it within the session: it sends ``DEALLOCATE ALL`` when a transaction
of its own rolls back, or after a ``DROP``/``ALTER``, while it holds prepared statements of its own. A run
of a statement the server no longer knows fails with ``invalid_sql_statement_name`` before doing anything,
outside any transaction (these connections are in autocommit, and the store runs a ``Statement`` only
outside its transactions): it is prepared again and run once more.

A value of a type not listed in ``encode`` (an ``int`` subclass, a ``Decimal``), or a text with a NUL
(libpq would cut it there), sends the statement through the connection's cursor instead, as before, so
nothing psycopg would send or refuse is treated otherwise here."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
COMMAND_OK, TUPLES_OK = 1, 2  # psycopg.pq.ExecStatus
UNKNOWN_STATEMENT = b"26000"  # invalid_sql_statement_name: the server no longer has it


def text_bool(value: bytes) -> bool:
    return value == b"t"


class Statement:
    """One statement of the store's, run by name on its own connections (``Session.first_row``).
    ``sql``: psycopg's form (``%(name)s`` placeholders), which the cursor runs where this cannot;
    ``decoders``: one per column of the row, from its text (None: the column is not read)."""

    __slots__ = ("decoders", "name", "names", "query", "sql")

    def __init__(self, name: str, sql: str, decoders: Sequence[Callable[[bytes], Any] | None]) -> None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in names:
                names.append(key)
            return f"${names.index(key) + 1}"

        query = PLACEHOLDER.sub(number, sql)
        if "%" in query:
            raise ValueError(f"statement {name!r} has a placeholder other than %(name)s: {query!r}")
        self.name = name.encode()
        self.sql = sql
        self.query = query.encode()
        self.names = tuple(names)
        self.decoders = tuple(decoders)


def encode(
    statement: Statement, params: Mapping[str, Any], encoding: str
) -> tuple[list[Any], list[int]] | None:
    """The values of ``params`` in ``statement``'s order, as libpq sends them, and their formats (0: text,
    1: binary, for bytes); None if one is of another type, or a text with a NUL."""
    values: list[Any] = []
    formats: list[int] = []
    for key in statement.names:
        value = params[key]
        kind = type(value)
        if kind is str:
            if "\x00" in value:  # libpq would cut a text value at its NUL: psycopg refuses it
                return None
            values.append(value.encode(encoding))
            formats.append(0)
        elif kind is int:
            values.append(str(value).encode())
            formats.append(0)
        elif value is None:
            values.append(None)
            formats.append(0)
        elif kind is bytes:
            values.append(value)
            formats.append(1)
        elif kind is bool:
            values.append(b"t" if value else b"f")
            formats.append(0)
        elif kind is float:
            values.append(repr(value).encode())  # 'inf', 'nan': float8in reads them
            formats.append(0)
        else:
            return None
    return values, formats


class Session:
    """What the store knows of one of its connections' server session: the statements it prepared there
    (a new connection has a new ``Session``). ``prepare``: False behind a transaction pooler.

    Each run is sent, then waited for as psycopg's cursor waits (``Connection.wait`` over psycopg's
    ``execute`` generator: the socket polled, Ctrl-C cancels the statement on the server, a lost connection
    is psycopg's ``OperationalError``), never in one of libpq's blocking calls, which would hold off Python's
    signal handlers for as long as the statement waits (a lock)."""

    __slots__ = ("conn", "encoding", "execute", "prepare", "prepared", "psycopg")

    def __init__(self, conn: Any, psycopg: Any, prepare: bool) -> None:
        self.conn = conn
        self.psycopg = psycopg
        self.execute = psycopg.generators.execute
        self.prepare = prepare
        self.prepared: set[bytes] = set()
        self.encoding = conn.info.encoding

    def first_row(self, statement: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """``statement`` run once with ``params`` (outside a transaction) -> its first row, decoded; None
        (nothing sent) if a value is of a type ``encode`` does not send. psycopg's errors as its cursor
        raises them (``Connections.guard`` maps them)."""
        encoded = encode(statement, params, self.encoding)
        if encoded is None:
            return None
        values, formats = encoded
        conn = self.conn
        pgconn = conn.pgconn
        if not self.prepare:
            pgconn.send_query_params(statement.query, values, None, formats)
            result = conn.wait(self.execute(pgconn))[-1]
        else:
            name = statement.name
            if name not in self.prepared:
                self._prepare(statement)
            pgconn.send_query_prepared(name, values, formats)
            result = conn.wait(self.execute(pgconn))[-1]
            if result.status != TUPLES_OK and result.error_field(0x43) == UNKNOWN_STATEMENT:  # 'C': SQLSTATE
                self.prepared.discard(name)  # psycopg's DEALLOCATE ALL took it: nothing ran
                self._prepare(statement)
                pgconn.send_query_prepared(name, values, formats)
                result = conn.wait(self.execute(pgconn))[-1]
        if result.status != TUPLES_OK:
            raise self.psycopg.errors.error_from_result(result, encoding=self.encoding)
        return tuple(
            None if decode is None or (value := result.get_value(0, column)) is None else decode(value)
            for column, decode in enumerate(statement.decoders)
        )

    def _prepare(self, statement: Statement) -> None:
        """Prepare ``statement`` in this session (a round trip, waited for as a run is)."""
        conn = self.conn
        conn.pgconn.send_prepare(statement.name, statement.query)
        result = conn.wait(self.execute(conn.pgconn))[-1]
        if result.status != COMMAND_OK:
            raise self.psycopg.errors.error_from_result(result, encoding=self.encoding)
        self.prepared.add(statement.name)
