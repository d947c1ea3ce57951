"""The LMDB transactions of flow control: token buckets and circuit breakers shared by every process of a
store (what they are and how a consumer reads them: ``flowstate.py``).

They live in their own LMDB environment (``<store>/control``), apart from the shards, so that limiting and
breaking never contend with the jobs' own transactions. Each method is one transaction that reads the state,
applies a pure policy (``ratelimit``, ``breaker``) with ``now`` read from the queue's clock *inside* the
transaction, and writes the result: two processes taking tokens at once can never both spend the same one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ... import breaker as breakers
from ... import ratelimit
from ...breaker import Breaker, BreakerPolicy, BreakerState
from ...flowstate import (
    BreakerEntry,
    FlowState,
    Limit,
    pack_breaker,
    pack_limit,
    unpack_breaker,
    unpack_limit,
)
from ...ratelimit import Rate
from .env import Env


def _keep_refills(txn: Any, db: Any, updates: list[tuple[str, Limit, Limit]], now: float) -> None:
    """A refused take writes nothing, except where the clock was set back: then the bucket's new time
    base must be kept, or it would stay frozen until the clock caught up again."""
    for key, old, _new in updates:
        refilled = ratelimit.refill(old.bucket, old.rate, now)
        if refilled.updated_us < old.bucket.updated_us:
            txn.put(key.encode(), pack_limit(Limit(old.rate, refilled)), db=db)


class Control:
    def __init__(self, env: Env, clock: Callable[[], float]) -> None:
        self.env = env
        self._clock = clock
        self.limits_db = env.dbs["limits"]
        self.breakers_db = env.dbs["breakers"]

    # ------------------------------------------------------------------ reads

    def state(self) -> FlowState:
        def txn_fn(txn: Any) -> FlowState:
            limits = {k.decode(): unpack_limit(v) for k, v in txn.cursor(db=self.limits_db)}
            entries = {k.decode(): unpack_breaker(v) for k, v in txn.cursor(db=self.breakers_db)}
            return FlowState(limits, entries)

        return self.env.read(txn_fn)

    def version(self) -> int:
        """Changes whenever any process commits to the control store (a cheap cache key)."""
        return self.env.last_txnid()

    # ------------------------------------------------------------------ limits

    def set_limit(self, key: str, rate: Rate) -> None:
        """Create or change a limit. A change keeps the tokens there are (at most the new burst)."""

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            raw = txn.get(key.encode(), db=self.limits_db)
            if raw is None:
                bucket = ratelimit.full_bucket(rate, now)
            else:
                old = unpack_limit(raw)
                bucket = ratelimit.change_rate(old.bucket, old.rate, rate, now)  # keeps tokens, capped
            txn.put(key.encode(), pack_limit(Limit(rate, bucket)), db=self.limits_db)

        self.env.write(txn_fn)

    def remove_limit(self, key: str) -> bool:
        return bool(self.env.write(lambda txn: txn.delete(key.encode(), db=self.limits_db)))

    def reset_limit(self, key: str) -> bool:
        """Fill the bucket again. -> False if there is no such limit."""

        def txn_fn(txn: Any) -> bool:
            raw = txn.get(key.encode(), db=self.limits_db)
            if raw is None:
                return False
            rate = unpack_limit(raw).rate
            txn.put(
                key.encode(),
                pack_limit(Limit(rate, ratelimit.full_bucket(rate, self._clock()))),
                db=self.limits_db,
            )
            return True

        return self.env.write(txn_fn)

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Take ``n`` tokens from every limited key among ``keys``, all or none. -> (granted, retry after)."""

        def txn_fn(txn: Any) -> tuple[bool, float]:
            now = self._clock()  # inside the transaction: never before begin()
            updates = []
            wait = 0.0
            for key in keys:
                raw = txn.get(key.encode(), db=self.limits_db)
                if raw is None:
                    continue
                limit = unpack_limit(raw)
                ok, bucket = ratelimit.try_take(limit.bucket, limit.rate, now, n)
                if not ok:
                    wait = max(wait, ratelimit.retry_after(limit.bucket, limit.rate, now, n))
                updates.append((key, limit, Limit(limit.rate, bucket)))
            if wait > 0:
                _keep_refills(txn, self.limits_db, updates, now)
                return False, wait
            for key, _old, limit in updates:
                txn.put(key.encode(), pack_limit(limit), db=self.limits_db)
            return True, 0.0

        return self.env.write(txn_fn)

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        """Return ``give_back`` unused tokens (at most up to the burst), then take as many whole tokens
        as ``key`` has, at most ``most``. One transaction. -> how many were taken (0 if none)."""

        def txn_fn(txn: Any) -> int:
            now = self._clock()
            raw = txn.get(key.encode(), db=self.limits_db)
            if raw is None:
                return most
            limit = unpack_limit(raw)
            bucket = limit.bucket
            if give_back > 0:
                bucket = ratelimit.give_back(bucket, limit.rate, now, give_back)
            count = min(most, int(ratelimit.remaining(bucket, limit.rate, now)))
            taken = 0
            if count >= 1:
                ok, after = ratelimit.try_take(bucket, limit.rate, now, count)
                if ok:
                    bucket, taken = after, count
            if bucket != limit.bucket:
                txn.put(key.encode(), pack_limit(Limit(limit.rate, bucket)), db=self.limits_db)
            return taken

        return self.env.write(txn_fn)

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        """Undo ``admit`` for a job that could not be claimed after all: the tokens go back (up to the
        burst) and a half-open breaker's trial is handed back, so the next job can be the trial."""

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            for key in keys:
                bkey = key.encode()
                raw = txn.get(bkey, db=self.limits_db)
                if raw is not None:
                    limit = unpack_limit(raw)
                    bucket = ratelimit.give_back(limit.bucket, limit.rate, now, n)
                    txn.put(bkey, pack_limit(Limit(limit.rate, bucket)), db=self.limits_db)
                raw = txn.get(bkey, db=self.breakers_db)
                if raw is not None:
                    entry = unpack_breaker(raw)
                    state = entry.breaker
                    if state.state is BreakerState.HALF_OPEN and state.trial_started_us is not None:
                        untried = replace(state, trial_started_us=None)
                        txn.put(bkey, pack_breaker(BreakerEntry(entry.policy, untried)), db=self.breakers_db)

        self.env.write(txn_fn)

    # ------------------------------------------------------------------ breakers

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None:
        def txn_fn(txn: Any) -> None:
            raw = txn.get(key.encode(), db=self.breakers_db)
            state = Breaker.closed() if raw is None else unpack_breaker(raw).breaker
            txn.put(key.encode(), pack_breaker(BreakerEntry(policy, state)), db=self.breakers_db)

        self.env.write(txn_fn)

    def remove_breaker(self, key: str) -> bool:
        return bool(self.env.write(lambda txn: txn.delete(key.encode(), db=self.breakers_db)))

    def reset_breaker(self, key: str) -> bool:
        def txn_fn(txn: Any) -> bool:
            raw = txn.get(key.encode(), db=self.breakers_db)
            if raw is None:
                return False
            entry = BreakerEntry(unpack_breaker(raw).policy, Breaker.closed())
            txn.put(key.encode(), pack_breaker(entry), db=self.breakers_db)
            return True

        return self.env.write(txn_fn)

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        """Everything a job under ``keys`` needs before it may start, in one transaction: every breaker
        allows it (a half-open breaker hands out its one trial) and every limit has ``n`` tokens. All or
        nothing. -> (admitted, seconds to wait before trying again)."""

        def txn_fn(txn: Any) -> tuple[bool, float]:
            now = self._clock()
            writes: list[tuple[bytes, bytes, Any]] = []
            wait = 0.0
            for key in keys:
                bkey = key.encode()
                raw = txn.get(bkey, db=self.breakers_db)
                if raw is not None:
                    entry = unpack_breaker(raw)
                    allowed, state = breakers.allow(entry.breaker, entry.policy, now)
                    if not allowed:
                        until = breakers.seconds_to_trial(entry.breaker, entry.policy, now)
                        wait = max(wait, until if until else 0.001)
                    elif state != entry.breaker:
                        writes.append(
                            (bkey, pack_breaker(BreakerEntry(entry.policy, state)), self.breakers_db)
                        )
                raw = txn.get(bkey, db=self.limits_db)
                if raw is not None:
                    limit = unpack_limit(raw)
                    ok, bucket = ratelimit.try_take(limit.bucket, limit.rate, now, n)
                    if not ok:
                        wait = max(wait, ratelimit.retry_after(limit.bucket, limit.rate, now, n))
                    writes.append((bkey, pack_limit(Limit(limit.rate, bucket)), self.limits_db))
            if wait > 0:
                return False, wait
            for key_bytes, value, db in writes:
                txn.put(key_bytes, value, db=db)
            return True, 0.0

        return self.env.write(txn_fn)

    def record(self, keys: Sequence[str], success: bool) -> None:
        """A job under ``keys`` finished: count it in every breaker among ``keys``."""

        def txn_fn(txn: Any) -> None:
            now = self._clock()
            for key in keys:
                bkey = key.encode()
                raw = txn.get(bkey, db=self.breakers_db)
                if raw is None:
                    continue
                entry = unpack_breaker(raw)
                if success:
                    state = breakers.record_success(entry.breaker, entry.policy, now)
                else:
                    state = breakers.record_failure(entry.breaker, entry.policy, now)
                if state != entry.breaker:
                    txn.put(bkey, pack_breaker(BreakerEntry(entry.policy, state)), db=self.breakers_db)

        self.env.write(txn_fn)
