"""The in-memory store's concurrency limits (``stores/contract/concurrency.py``): the claim of limited jobs,
group by group in turn, and what the limits hold, under the space's lock."""

from __future__ import annotations

from ...concurrency import SCAN_PAST, Skip, full_key, passing, round_of, served
from ...errors import QueueCorrupted
from ..contract.concurrency import LimitedClaim
from ..types import Claimed
from .claims import PROMOTE_BATCH, as_claimed, decoded, run
from .space import CLAIM_ALONE_NEXT, CLAIM_BATCH, Row, Space, micros
from .upkeep import promote, quarantine


def may_start(space: Space, row: Row) -> bool:
    """Do ``row``'s limits let it start now?"""
    return row.limits is None or full_key(row.limits, space.turns.running) is None


class MemoryConcurrency:
    passes_paused_tasks = True  # its claim takes ``skip`` (stores/contract/concurrency.py)

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
        limit: int = 1,
        skip: Skip | None = None,
    ) -> LimitedClaim:
        with self.space.lock:
            space = self.space
            turns = space.turns
            now_us = micros(now)
            promote(space, now_us, PROMOTE_BATCH)
            cycle = round_of(turns.in_turn(), queues)
            taken: list[Claimed] = []
            rows: list[Row] = []
            while cycle and len(taken) < limit:
                group = cycle.popleft()
                entries = turns.waiting.get(group)
                if not entries:
                    continue
                names = passing(group, skip)
                if names is None:
                    key = entries[0]
                else:
                    past = [e for e in entries[:SCAN_PAST] if space.rows[e[2]].name not in names]
                    if not past:
                        continue  # only paused tasks' jobs at its head: it keeps its turn
                    key = past[0]
                if min_priority is not None and -key[0] < min_priority:
                    continue  # outranked: it keeps its turn
                row = space.rows[key[2]]
                alone = row.claim == CLAIM_ALONE_NEXT
                if alone and taken:
                    break  # its lease once expired: the next claim takes it, alone
                if not may_start(space, row):
                    turns.to_back(group)  # held: it loses its turn, and waits as it was
                    continue
                try:
                    value, metadata = decoded(row)
                except QueueCorrupted as exc:
                    quarantine(space, row, now_us, str(exc))
                    cycle.appendleft(group)
                    continue
                run(space, row, now_us, micros(now + lease_time), token, worker)
                taken.append(as_claimed(row, value, metadata, alone))
                rows.append(row)
                if group in turns.turn:
                    turns.to_back(group)
                    cycle.append(group)
                if alone:
                    break
            if len(rows) > 1:  # a batch: an expired lease sends them back uncharged (as Store.claim)
                for row in rows:
                    row.claim = CLAIM_BATCH
            return LimitedClaim(taken, self._waiting(queues))

    def _waiting(self, queues: tuple[str, ...] | None) -> bool:
        return any(served(group, queues) for group in self.space.turns.turn)

    def running(self) -> dict[str, int]:
        with self.space.lock:
            return dict(sorted(self.space.turns.running.items()))

    def waiting(self) -> dict[str, int]:
        with self.space.lock:
            return {group: len(entries) for group, entries in sorted(self.space.turns.waiting.items())}
