"""Rate limits, circuit breakers, named locks and the worker registry of an in-memory store.

Limits and breakers are kept as the bytes ``flowstate`` packs, as every store keeps them, and each
operation is ``flowstate``'s pure step of it applied under the space's lock, with ``now`` read from the
handle's clock inside: two threads taking tokens at once never both spend the same one. Locks are leases
(owner, expiry, since) and workers their last report, as plain tuples and dicts: nothing here is written
past the engine, so nothing can fail to decode.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence

from ... import flowstate
from ...breaker import BreakerPolicy
from ...flowstate import FlowState
from ...ratelimit import Rate
from ..types import LockHolder, WorkerInfo, id_bytes
from .space import Space


class MemoryControl:
    """``FlowOps`` (stores/base.py) over a ``Space``."""

    def __init__(self, space: Space, clock: Callable[[], float]) -> None:
        self._space = space
        self._clock = clock

    def _pick(self, values: Mapping[str, bytes], keys: Sequence[str]) -> dict[str, bytes]:
        return {key: values[key] for key in keys if key in values}

    def _write(self, limits: Mapping[str, bytes], breakers: Mapping[str, bytes] = {}) -> None:
        if limits or breakers:
            self._space.limits.update(limits)
            self._space.breakers.update(breakers)
            self._space.flow_version += 1

    def state(self) -> FlowState:
        with self._space.lock:
            return flowstate.read_state(self._space.limits.items(), self._space.breakers.items())

    def verify(self) -> list[str]:
        with self._space.lock:
            return flowstate.damage(self._space.limits.items(), self._space.breakers.items())

    def version(self) -> int:
        return self._space.flow_version

    # ------------------------------------------------------------------ limits

    def set_limit(self, key: str, rate: Rate) -> None:
        with self._space.lock:
            raw = self._space.limits.get(key)
            self._write({key: flowstate.limit_set(key, raw, rate, self._clock())})

    def remove_limit(self, key: str) -> bool:
        with self._space.lock:
            found = self._space.limits.pop(key, None) is not None
            self._space.flow_version += found
            return found

    def reset_limit(self, key: str) -> bool:
        with self._space.lock:
            raw = self._space.limits.get(key)
            value = None if raw is None else flowstate.limit_reset(key, raw, self._clock())
            if value is None:
                return False
            self._write({key: value})
            return True

    def take(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        with self._space.lock:
            limits = self._pick(self._space.limits, keys)
            granted, wait, writes = flowstate.tokens_taken(limits, keys, n, self._clock())
            self._write(writes)
            return granted, wait

    def take_up_to(self, key: str, most: int, *, give_back: int = 0) -> int:
        with self._space.lock:
            raw = self._space.limits.get(key)
            if raw is None:
                return most
            taken, value = flowstate.tokens_taken_up_to(key, raw, most, give_back, self._clock())
            if value is not None:
                self._write({key: value})
            return taken

    def give_back(self, keys: Sequence[str], n: int = 1) -> None:
        with self._space.lock:
            limits, breakers = self._pick(self._space.limits, keys), self._pick(self._space.breakers, keys)
            self._write(*flowstate.handed_back(limits, breakers, keys, n, self._clock()))

    # ------------------------------------------------------------------ breakers

    def set_breaker(self, key: str, policy: BreakerPolicy) -> None:
        with self._space.lock:
            raw = self._space.breakers.get(key)
            self._write({}, {key: flowstate.breaker_set(key, raw, policy)})

    def remove_breaker(self, key: str) -> bool:
        with self._space.lock:
            found = self._space.breakers.pop(key, None) is not None
            self._space.flow_version += found
            return found

    def reset_breaker(self, key: str) -> bool:
        with self._space.lock:
            raw = self._space.breakers.get(key)
            value = None if raw is None else flowstate.breaker_reset(key, raw)
            if value is None:
                return False
            self._write({}, {key: value})
            return True

    def admit(self, keys: Sequence[str], n: int = 1) -> tuple[bool, float]:
        with self._space.lock:
            limits, breakers = self._pick(self._space.limits, keys), self._pick(self._space.breakers, keys)
            ok, wait, limit_writes, breaker_writes = flowstate.admitted(
                limits, breakers, keys, n, self._clock()
            )
            self._write(limit_writes, breaker_writes)
            return ok, wait

    def record(self, keys: Sequence[str], success: bool) -> None:
        with self._space.lock:
            breakers = self._pick(self._space.breakers, keys)
            self._write({}, flowstate.outcome_counted(breakers, keys, success, self._clock()))


class MemoryLocks:
    """``LockOps`` (stores/base.py) over a ``Space``: a lock is taken when it is free, expired or already
    the caller's (a renewal keeps its ``since``); releasing expires it as of now, so its last holder stays
    known."""

    def __init__(self, space: Space, clock: Callable[[], float]) -> None:
        self._space = space
        self._clock = clock

    def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        id_bytes("a lock name", name)
        id_bytes("a lock owner", owner)
        with self._space.lock:
            now = self._clock()
            since = now
            held = self._space.locks.get(name)
            if held is not None:
                holder, expires_at, held_since = held
                if holder != owner and expires_at > now:
                    return False
                if holder == owner and expires_at > now:
                    since = held_since  # a renewal; an owner taking its expired lock again starts anew
            self._space.locks[name] = (owner, now + ttl, since)
            return True

    def release_lock(self, name: str, owner: str) -> bool:
        id_bytes("a lock name", name)
        with self._space.lock:
            held = self._space.locks.get(name)
            now = self._clock()
            if held is None or held[0] != owner or held[1] <= now:
                return False
            self._space.locks[name] = (owner, now, held[2])
            return True

    def lock_holder(self, name: str) -> LockHolder | None:
        holder = self.last_lock_holder(name)
        return holder if holder is not None and holder.expires_at > self._clock() else None

    def last_lock_holder(self, name: str) -> LockHolder | None:
        id_bytes("a lock name", name)
        with self._space.lock:
            held = self._space.locks.get(name)
        return None if held is None else LockHolder(*held)

    def verify(self) -> list[str]:
        return []  # plain tuples: nothing to decode

    # ------------------------------------------------------------------ workers

    def report_worker(
        self,
        worker_id: str,
        *,
        stale_after: float,
        started_at: float | None = None,
        pid: int | None = None,
        host: str | None = None,
        queues: tuple[str, ...] | None = None,
        threads: int = 1,
        current_jobs: tuple[int, ...] = (),
        processed: int = 0,
        failed: int = 0,
    ) -> None:
        id_bytes("a worker id", worker_id)
        with self._space.lock:
            now = self._clock()
            before = self._space.workers.get(worker_id)
            first_seen = now if before is None else before["started_at"]
            self._space.workers[worker_id] = {
                "worker_id": worker_id,
                "pid": os.getpid() if pid is None else pid,
                "host": socket.gethostname() if host is None else host,
                "started_at": first_seen if started_at is None else started_at,
                "last_heartbeat": now,
                "stale_after": stale_after,
                "queues": None if queues is None else tuple(queues),
                "threads": threads,
                "current_jobs": tuple(current_jobs),
                "processed": processed,
                "failed": failed,
            }

    def remove_worker(self, worker_id: str) -> bool:
        id_bytes("a worker id", worker_id)
        with self._space.lock:
            return self._space.workers.pop(worker_id, None) is not None

    def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        """The registered workers, ordered by id; only live ones unless ``include_dead``."""
        with self._space.lock:
            everyone = [WorkerInfo(**self._space.workers[key]) for key in sorted(self._space.workers)]
        now = self._clock()
        return [worker for worker in everyone if include_dead or worker.alive(now)]

    def prune_workers(self) -> int:
        with self._space.lock:
            now = self._clock()
            dead = [key for key, report in self._space.workers.items() if not WorkerInfo(**report).alive(now)]
            for key in dead:
                del self._space.workers[key]
            return len(dead)
