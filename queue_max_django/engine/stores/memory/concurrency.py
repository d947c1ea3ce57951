"""The in-memory store's concurrency limits (``stores/contract/concurrency.py``): the claim of limited jobs,
group by group in turn, and what the limits hold, under the space's lock."""

from __future__ import annotations

from ...concurrency import SCAN_GROUPS, full_key, served
from ...errors import QueueCorrupted
from ..contract.concurrency import LimitedClaim
from .claims import PROMOTE_BATCH, as_claimed, decoded, run
from .space import Row, Space, micros
from .upkeep import promote, quarantine


def may_start(space: Space, row: Row) -> bool:
    """Do ``row``'s limits let it start now?"""
    return row.limits is None or full_key(row.limits, space.turns.running) is None


class MemoryConcurrency:
    def __init__(self, space: Space) -> None:
        self.space = space

    def claim(
        self,
        shard: int,
        now: float,
        queues: tuple[str, ...] | None,
        lease_time: float,
        token: bytes,
        worker: str | None,
        min_priority: int | None,
    ) -> LimitedClaim:
        with self.space.lock:
            space = self.space
            turns = space.turns
            now_us = micros(now)
            promote(space, now_us, PROMOTE_BATCH)
            looked = 0
            for group in turns.in_turn():
                if not served(group, queues):
                    continue
                if looked >= SCAN_GROUPS:
                    break
                looked += 1
                key = turns.waiting[group][0]
                if min_priority is not None and -key[0] < min_priority:
                    continue  # outranked: it keeps its turn
                row = space.rows[key[2]]
                if not may_start(space, row):
                    turns.to_back(group)  # held: it loses its turn, and waits as it was
                    continue
                try:
                    value, metadata = decoded(row)
                except QueueCorrupted as exc:
                    quarantine(space, row, now_us, str(exc))
                    continue
                run(space, row, now_us, micros(now + lease_time), token, worker)
                if group in turns.turn:
                    turns.to_back(group)
                return LimitedClaim(as_claimed(row, value, metadata, False), self._waiting(queues))
            return LimitedClaim(None, self._waiting(queues))

    def _waiting(self, queues: tuple[str, ...] | None) -> bool:
        return any(served(group, queues) for group in self.space.turns.turn)

    def running(self) -> dict[str, int]:
        with self.space.lock:
            return dict(sorted(self.space.turns.running.items()))

    def waiting(self) -> dict[str, int]:
        with self.space.lock:
            return {group: len(entries) for group, entries in sorted(self.space.turns.waiting.items())}
