"""``PgControl``: flow control in PostgreSQL: the token buckets and circuit breakers shared by every process
(and every machine) of the store, as ``stores/base.py`` states them for ``FlowOps`` (the contract suite,
``tests/store_contract/test_flow.py``, runs the same tests on both stores).

Tables (``schema.py``): ``qm_limits`` and ``qm_breakers`` hold a row per key, its value in ``flowstate``'s
encoding (the very bytes the LMDB store keeps; one that does not decode is ignored for admission, named by
``verify()`` and replaced by setting it again: ``flowstate``'s module docstring); ``qm_flow`` is one row
whose ``version`` every flow write increments in its own transaction.

Each method is one transaction that locks the rows it reads (``SELECT ... FOR UPDATE``), then reads ``now``
from the store's clock, applies the pure step of its operation (``flowstate``: the LMDB store applies the
same ones) and writes the result. A second
process taking a token waits for the first one's commit and then reads what it left, so two processes never
both spend the same token or both get a half-open breaker's one trial. ``now`` is read after the lock is
held, never before: a process that waited for the lock would otherwise apply a time older than the state it
finally reads (and SQL here never calls ``now()``: every time comes from the store's clock, so tests run on
a fake one).

No deadlocks: a transaction locks rows in one global order: breakers by key, then limits by key (each
``FOR UPDATE`` statement sorted by key), then the version row, last and only when it writes. So no two
transactions can each hold a row the other waits for. A row that does not exist yet (``set_limit``,
``set_breaker``) is inserted empty first (``ON CONFLICT DO NOTHING``: a concurrent creator's insert waits
for ours), so that creating it is as exclusive as changing it; nobody sees the empty row, as it is filled
before the transaction commits.

``version()`` (the key of the ``Flow``'s cache: a claim asks it every time) is kept for ``VERSION_TTL``
seconds of this process's monotonic clock, so most claims cost no round trip; each claim and acknowledgement
statement returns the committed version too (``seen``), so a busy consumer reads it for free. The staleness
this allows: a limit or breaker another process set, or a token it took, is seen here up to ``VERSION_TTL``
(5 ms) late, as if that call had come 5 ms later. This process's own writes are seen at once (a write keeps
the version it committed). Admission itself never reads the cache: ``take`` and ``admit`` lock the rows, so
a stale version can only make a consumer look again (or not yet) at jobs that the rows then decide about. A
version read or written on a connection the thread lent the store (``Connections.borrowed``) is not kept: it
is the caller's transaction's, which may yet roll back, and another thread of the process would take it for
a committed one (and keep the state of another version under it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ... import flowstate
from ...breaker import BreakerPolicy
from ...errors import InvalidJob
from ...flowstate import FlowState
from ...ratelimit import Rate
from .connection import Connections

VERSION_TTL = 0.005  # seconds a version read is used again (monotonic)

T = TypeVar("T")

_LIMITS = "qm_limits"
_BREAKERS = "qm_breakers"
_LOCK = "SELECT key, value FROM {table} WHERE key = ANY(%s) ORDER BY key FOR UPDATE"
_LOCK_ONE = "SELECT value FROM {table} WHERE key = %s FOR UPDATE"
_CREATE_EMPTY = "INSERT INTO {table} (key, value) VALUES (%s, '') ON CONFLICT DO NOTHING RETURNING 1"
_UPDATE = (
    "{name} AS (UPDATE {table} AS t SET value = v.value "
    "FROM unnest(%s::text[], %s::bytea[]) AS v(key, value) WHERE t.key = v.key)"
)
_BUMP = "UPDATE qm_flow SET version = version + 1 WHERE id = 1 RETURNING version"
_VERSION = "SELECT version FROM qm_flow WHERE id = 1"


def check_text(what: str, value: str) -> str:
    """PostgreSQL's text cannot hold NUL: refuse it with the engine's error, before anything is written."""
    if "\x00" in value:
        raise InvalidJob(f"{what} cannot contain a NUL character in the PostgreSQL store: {value!r}")
    return value


def _keys(keys: Sequence[str]) -> list[str]:
    for key in keys:
        check_text("a limit or breaker key", key)
    return sorted(set(keys))


def _lock(conn: Any, table: str, keys: list[str]) -> dict[str, bytes]:
    """The rows of ``keys`` in ``table``, locked in key order (absent keys are not there)."""
    if not keys:
        return {}
    rows = conn.execute(_LOCK.format(table=table), (keys,)).fetchall()
    return {key: bytes(value) for key, value in rows}


def _lock_or_create(conn: Any, table: str, key: str) -> bytes | None:
    """``key``'s value in ``table``, its row locked; None when there was no row: then an empty one is
    inserted (locked, and invisible to others until this transaction commits) for the caller to fill."""
    while True:
        row = conn.execute(_LOCK_ONE.format(table=table), (key,)).fetchone()
        if row is not None:
            return bytes(row[0])
        if conn.execute(_CREATE_EMPTY.format(table=table), (key,)).fetchone() is not None:
            return None
        # Another transaction created it meanwhile, and committed (our insert waited for it): lock that row.


class PgControl:
    """``FlowOps`` on a PostgreSQL database (``db``: the store's connections; ``clock``: the store's)."""

    def __init__(self, db: Connections, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock
        self._version: tuple[int, float] = (-1, -float("inf"))  # (version, monotonic time it was true)
        self._version_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    def _run(self, fn: Callable[[Any], tuple[T, int | None]]) -> T:
        """``fn(conn)`` in one transaction; it returns its result and the version it wrote (None: it wrote
        nothing), which becomes the cached one once the transaction has committed."""
        with self._db.transaction() as conn:
            result, version = fn(conn)
        if version is not None and self._db.lent() is None:
            self._saw(version, time.monotonic())
        return result

    def _saw(self, version: int, at: float) -> None:
        """``version`` was the latest as of ``at``: keep it unless the cache holds a later reading."""
        with self._version_lock:
            if at >= self._version[1]:
                self._version = (version, at)

    def _write(
        self, conn: Any, limits: dict[str, bytes] | None = None, breaker_rows: dict[str, bytes] | None = None
    ) -> int:
        """Update the rows (already locked) of ``limits`` and ``breaker_rows`` (key -> value), and bump the
        version, in one statement. -> the new version."""
        parts: list[str] = []
        params: list[Any] = []
        for name, table, values in (("l", _LIMITS, limits), ("b", _BREAKERS, breaker_rows)):
            if values:
                parts.append(_UPDATE.format(name=name, table=table))
                params += [list(values), list(values.values())]
        sql = f"WITH {', '.join(parts)} {_BUMP}" if parts else _BUMP
        return int(conn.execute(sql, params).fetchone()[0])

    # ------------------------------------------------------------------ reads

    def _rows(self) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
        """Every limit's and breaker's (key, value), as one statement's snapshot, in key order (as the LMDB
        store has them)."""

        def txn_fn(conn: Any) -> tuple[list[tuple[bool, str, Any]], None]:
            return conn.execute(
                "SELECT true, key, value FROM qm_limits UNION ALL SELECT false, key, value FROM qm_breakers"
            ).fetchall(), None

        rows = self._run(txn_fn)
        rows.sort(key=lambda row: row[1])  # code point order: the LMDB store's (UTF-8 bytes)
        limits = [(key, bytes(value)) for is_limit, key, value in rows if is_limit]
        return limits, [(key, bytes(value)) for is_limit, key, value in rows if not is_limit]

    def state(self) -> FlowState:
        """Every limit and breaker; a value that does not decode is ignored (``flowstate``)."""
        return flowstate.read_state(*self._rows())

    def verify(self) -> list[str]:
        """Every limit and breaker whose stored value does not decode."""
        return flowstate.damage(*self._rows())

    def version(self) -> int:
        """A number that changes whenever any process commits a flow change: this process's own at once,
        another's within ``VERSION_TTL`` (module docstring)."""
        cached, at = self._version
        asked = time.monotonic()
        if asked - at < VERSION_TTL:
            return cached
        if self._db.lent() is not None:  # in a savepoint: a failure leaves the caller's transaction usable
            with self._db.transaction() as conn:
                return int(conn.execute(_VERSION).fetchone()[0])
        conn = self._db.connection()
        with self._db.guard(conn):  # one statement, its own transaction: one round trip
            version = int(conn.execute(_VERSION).fetchone()[0])
        self._saw(version, asked)
        return version

    def seen(self, version: int, at: float) -> None:
        """A statement sent at ``at`` (monotonic) read the committed ``version`` (the claims and the
        acknowledgements return it: ``job_sql.FLOW_VERSION``): keep it, so that a busy consumer never
        reads it in a round trip of its own. Not on a connection the thread lent the store (the caller's
        transaction's, which may yet roll back)."""
        if self._db.lent() is None:
            self._saw(version, at)

    # ------------------------------------------------------------------ limits

    def set_limit(self, key: str, rate: Rate) -> None:
        """Create or change a limit. A change keeps the tokens there are (at most the new burst)."""
        check_text("a limit key", key)

        def txn_fn(conn: Any) -> tuple[None, int]:
            raw = _lock_or_create(conn, _LIMITS, key)
            return None, self._write(conn, limits={key: flowstate.limit_set(key, raw, rate, self._clock())})

        self._run(txn_fn)

    def remove_limit(self, key: str) -> bool:
        return self._remove(_LIMITS, check_text("a limit key", key))

    def _remove(self, table: str, key: str) -> bool:
        def txn_fn(conn: Any) -> tuple[bool, int | None]:
            row = conn.execute(f"DELETE FROM {table} WHERE key = %s RETURNING 1", (key,)).fetchone()
            if row is None:
                return False, None
            return True, int(conn.execute(_BUMP).fetchone()[0])

        return self._run(txn_fn)

    def reset_limit(self, key: str) -> bool:
        """Fill the bucket again. -> False if there is no such limit."""
        check_text("a limit key", key)

        def txn_fn(conn: Any) -> tuple[bool, int | None]:
            raw = _lock(conn, _LIMITS, [key]).get(key)
            value = None if raw is None else flowstate.limit_reset(key, raw, self._clock())
            if value is None:
                return False, None
            return True, self._write(conn, limits={key: value})

        return self._run(txn_fn)

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Take ``n`` tokens from every limited key among ``keys``, all or none. -> (granted, retry after)."""
        wanted = _keys(keys)

        def txn_fn(conn: Any) -> tuple[tuple[bool, float], int | None]:
            rows = _lock(conn, _LIMITS, wanted)
            if not rows:
                return (True, 0.0), None
            now = self._clock()  # the rows are locked: nobody changes them before we commit
            granted, wait, writes = flowstate.tokens_taken(rows, keys, n, now)
            if not granted:  # it writes nothing, unless the clock was set back (flowstate.tokens_taken)
                return (False, wait), self._write(conn, limits=writes) if writes else None
            return (True, 0.0), self._write(conn, limits=writes)

        return self._run(txn_fn)

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        """Return ``give_back`` unused tokens (at most up to the burst), then take as many whole tokens
        as ``key`` has, at most ``most``. One transaction. -> how many were taken (0 if none)."""
        check_text("a limit key", key)

        def txn_fn(conn: Any) -> tuple[int, int | None]:
            raw = _lock(conn, _LIMITS, [key]).get(key)
            if raw is None:
                return most, None
            taken, value = flowstate.tokens_taken_up_to(key, raw, most, give_back, self._clock())
            if value is None:
                return taken, None
            return taken, self._write(conn, limits={key: value})

        return self._run(txn_fn)

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        """Undo ``admit`` for a job that could not be claimed after all: the tokens go back (up to the
        burst) and a half-open breaker's trial is handed back, so the next job can be the trial."""
        wanted = _keys(keys)

        def txn_fn(conn: Any) -> tuple[None, int | None]:
            found = _lock(conn, _BREAKERS, wanted)
            limits = _lock(conn, _LIMITS, wanted)
            if not found and not limits:
                return None, None
            limit_writes, breaker_writes = flowstate.handed_back(limits, found, keys, n, self._clock())
            if not limit_writes and not breaker_writes:
                return None, None
            return None, self._write(conn, limit_writes, breaker_writes)

        self._run(txn_fn)

    # ------------------------------------------------------------------ breakers

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None:
        check_text("a breaker key", key)

        def txn_fn(conn: Any) -> tuple[None, int]:
            raw = _lock_or_create(conn, _BREAKERS, key)
            return None, self._write(conn, breaker_rows={key: flowstate.breaker_set(key, raw, policy)})

        self._run(txn_fn)

    def remove_breaker(self, key: str) -> bool:
        return self._remove(_BREAKERS, check_text("a breaker key", key))

    def reset_breaker(self, key: str) -> bool:
        check_text("a breaker key", key)

        def txn_fn(conn: Any) -> tuple[bool, int | None]:
            raw = _lock(conn, _BREAKERS, [key]).get(key)
            value = None if raw is None else flowstate.breaker_reset(key, raw)
            if value is None:
                return False, None
            return True, self._write(conn, breaker_rows={key: value})

        return self._run(txn_fn)

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Everything a job under ``keys`` needs before it may start, in one transaction: every breaker
        allows it (a half-open breaker hands out its one trial) and every limit has ``n`` tokens. All or
        nothing. -> (admitted, seconds to wait before trying again)."""
        wanted = _keys(keys)

        def txn_fn(conn: Any) -> tuple[tuple[bool, float], int | None]:
            found = _lock(conn, _BREAKERS, wanted)
            limits = _lock(conn, _LIMITS, wanted)
            if not found and not limits:
                return (True, 0.0), None
            ok, wait, limit_writes, breaker_writes = flowstate.admitted(limits, found, keys, n, self._clock())
            if not ok:
                return (False, wait), None
            if not limit_writes and not breaker_writes:
                return (True, 0.0), None
            return (True, 0.0), self._write(conn, limit_writes, breaker_writes)

        return self._run(txn_fn)

    def record(self, keys: Sequence[str], success: bool) -> None:
        """A job under ``keys`` finished: count it in every breaker among ``keys``."""
        wanted = _keys(keys)

        def txn_fn(conn: Any) -> tuple[None, int | None]:
            found = _lock(conn, _BREAKERS, wanted)
            if not found:
                return None, None
            writes = flowstate.outcome_counted(found, keys, success, self._clock())
            return None, self._write(conn, breaker_rows=writes) if writes else None

        return self._run(txn_fn)
