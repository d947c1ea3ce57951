"""The LMDB transactions of flow control: token buckets and circuit breakers shared by every process of a
store (what they are and how a consumer reads them: ``flowstate.py``).

They live in their own LMDB environment (``<store>/control``), apart from the shards, so that limiting and
breaking never contend with the jobs' own transactions. Each method is one transaction that reads the state,
applies the pure step of its operation (``flowstate``: the PostgreSQL store applies the same ones) with
``now`` read from the queue's clock *inside* the transaction, and writes the result: two processes taking
tokens at once can never both spend the same one.

A value that does not decode is ignored for admission, named by ``verify()`` and replaced by setting the
limit or breaker again (``flowstate``'s module docstring); so is a key that is not UTF-8 (no key the
engine writes), which no job falls under.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ... import flowstate
from ...breaker import BreakerPolicy
from ...flowstate import FlowState
from ...ratelimit import Rate
from .env import Env


def _read(txn: Any, db: Any, keys: Sequence[str]) -> dict[str, bytes]:
    """The stored values of ``keys`` in ``db`` (absent keys are not there)."""
    found = {}
    for key in keys:
        raw = txn.get(key.encode(), db=db)
        if raw is not None:
            found[key] = raw
    return found


def _write(txn: Any, db: Any, values: Mapping[str, bytes]) -> None:
    for key, value in values.items():
        txn.put(key.encode(), value, db=db)


class Control:
    def __init__(self, env: Env, clock: Callable[[], float]) -> None:
        self.env = env
        self._clock = clock
        self.limits_db = env.dbs["limits"]
        self.breakers_db = env.dbs["breakers"]

    # ------------------------------------------------------------------ reads

    def _rows(self, txn: Any, db: Any) -> list[tuple[str, bytes]]:
        """Every (key, value) of ``db``; a key that is not UTF-8 is named with escapes, its value made
        empty (which never decodes): it is damage too."""
        rows = []
        for key, value in txn.cursor(db=db):
            try:
                rows.append((bytes(key).decode(), bytes(value)))
            except UnicodeDecodeError:
                rows.append((bytes(key).decode(errors="backslashreplace"), b""))
        return rows

    def _both(self, txn: Any) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
        return self._rows(txn, self.limits_db), self._rows(txn, self.breakers_db)

    def state(self) -> FlowState:
        return self.env.read(lambda txn: flowstate.read_state(*self._both(txn)))

    def verify(self) -> list[str]:
        """Every limit and breaker whose stored value does not decode."""
        return self.env.read(lambda txn: flowstate.damage(*self._both(txn)))

    def version(self) -> int:
        """Changes whenever any process commits to the control store (a cheap cache key)."""
        return self.env.last_txnid()

    # ------------------------------------------------------------------ limits

    def set_limit(self, key: str, rate: Rate) -> None:
        """Create or change a limit. A change keeps the tokens there are (at most the new burst)."""

        def txn_fn(txn: Any) -> None:
            raw = txn.get(key.encode(), db=self.limits_db)
            txn.put(key.encode(), flowstate.limit_set(key, raw, rate, self._clock()), db=self.limits_db)

        self.env.write(txn_fn)

    def remove_limit(self, key: str) -> bool:
        return bool(self.env.write(lambda txn: txn.delete(key.encode(), db=self.limits_db)))

    def reset_limit(self, key: str) -> bool:
        """Fill the bucket again. -> False if there is no such limit."""

        def txn_fn(txn: Any) -> bool:
            raw = txn.get(key.encode(), db=self.limits_db)
            value = None if raw is None else flowstate.limit_reset(key, raw, self._clock())
            if value is None:
                return False
            txn.put(key.encode(), value, db=self.limits_db)
            return True

        return self.env.write(txn_fn)

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Take ``n`` tokens from every limited key among ``keys``, all or none. -> (granted, retry after)."""

        def txn_fn(txn: Any) -> tuple[bool, float]:
            now = self._clock()  # inside the transaction: never before begin()
            granted, wait, writes = flowstate.tokens_taken(_read(txn, self.limits_db, keys), keys, n, now)
            _write(txn, self.limits_db, writes)
            return granted, wait

        return self.env.write(txn_fn)

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        """Return ``give_back`` unused tokens (at most up to the burst), then take as many whole tokens
        as ``key`` has, at most ``most``. One transaction. -> how many were taken (0 if none)."""

        def txn_fn(txn: Any) -> int:
            now = self._clock()
            raw = txn.get(key.encode(), db=self.limits_db)
            if raw is None:
                return most
            taken, value = flowstate.tokens_taken_up_to(key, raw, most, give_back, now)
            if value is not None:
                txn.put(key.encode(), value, db=self.limits_db)
            return taken

        return self.env.write(txn_fn)

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        """Undo ``admit`` for a job that could not be claimed after all: the tokens go back (up to the
        burst) and a half-open breaker's trial is handed back, so the next job can be the trial."""

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            limits, breaker_values = _read(txn, self.limits_db, keys), _read(txn, self.breakers_db, keys)
            limit_writes, breaker_writes = flowstate.handed_back(limits, breaker_values, keys, n, now)
            _write(txn, self.limits_db, limit_writes)
            _write(txn, self.breakers_db, breaker_writes)

        self.env.write(txn_fn)

    # ------------------------------------------------------------------ breakers

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None:
        def txn_fn(txn: Any) -> None:
            raw = txn.get(key.encode(), db=self.breakers_db)
            txn.put(key.encode(), flowstate.breaker_set(key, raw, policy), db=self.breakers_db)

        self.env.write(txn_fn)

    def remove_breaker(self, key: str) -> bool:
        return bool(self.env.write(lambda txn: txn.delete(key.encode(), db=self.breakers_db)))

    def reset_breaker(self, key: str) -> bool:
        def txn_fn(txn: Any) -> bool:
            raw = txn.get(key.encode(), db=self.breakers_db)
            value = None if raw is None else flowstate.breaker_reset(key, raw)
            if value is None:
                return False
            txn.put(key.encode(), value, db=self.breakers_db)
            return True

        return self.env.write(txn_fn)

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Everything a job under ``keys`` needs before it may start, in one transaction: every breaker
        allows it (a half-open breaker hands out its one trial) and every limit has ``n`` tokens. All or
        nothing. -> (admitted, seconds to wait before trying again)."""

        def txn_fn(txn: Any) -> tuple[bool, float]:
            now = self._clock()
            limits, breaker_values = _read(txn, self.limits_db, keys), _read(txn, self.breakers_db, keys)
            ok, wait, limit_writes, breaker_writes = flowstate.admitted(limits, breaker_values, keys, n, now)
            _write(txn, self.limits_db, limit_writes)
            _write(txn, self.breakers_db, breaker_writes)
            return ok, wait

        return self.env.write(txn_fn)

    def record(self, keys: Sequence[str], success: bool) -> None:
        """A job under ``keys`` finished: count it in every breaker among ``keys``."""

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            writes = flowstate.outcome_counted(_read(txn, self.breakers_db, keys), keys, success, now)
            _write(txn, self.breakers_db, writes)

        self.env.write(txn_fn)
