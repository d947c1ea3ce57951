"""``Turns``: what an in-memory store keeps of its limited jobs (``stores/contract/concurrency.py``): the
waiting ones per group, sorted in claim order, each group's place in the turns, and the jobs running per
limit key. ``Space.index``/``unindex`` keep it in step with the rows, under the space's lock."""

from __future__ import annotations

import bisect
from collections import Counter


class Turns:
    def __init__(self) -> None:
        self.waiting: dict[str, list[tuple[int, int, int]]] = {}  # group -> its jobs' ready keys, sorted
        self.turn: dict[str, int] = {}  # group -> its place in the turns (smaller: sooner)
        self.sequence = 0  # the last place given
        self.running: Counter[str] = Counter()  # limit key -> jobs running with it

    def wait(self, group: str, key: tuple[int, int, int]) -> None:
        """A job of ``group`` waits; a group that had none joins the turns at the back."""
        entries = self.waiting.get(group)
        if entries is None:
            entries = self.waiting[group] = []
            self.to_back(group)
        bisect.insort(entries, key)

    def unwait(self, group: str, key: tuple[int, int, int]) -> None:
        """A job of ``group`` waits no more; a group left with none leaves the turns."""
        entries = self.waiting[group]
        at = bisect.bisect_left(entries, key)
        assert at < len(entries) and entries[at] == key, f"waiting entry {key!r} of {group!r} is missing"
        del entries[at]
        if not entries:
            del self.waiting[group]
            del self.turn[group]

    def to_back(self, group: str) -> None:
        self.sequence += 1
        self.turn[group] = self.sequence

    def in_turn(self) -> list[str]:
        """The groups with waiting jobs, in turn order."""
        return sorted(self.turn, key=self.turn.__getitem__)

    def start(self, limits: tuple[tuple[str, int], ...]) -> None:
        for key, _n in limits:
            self.running[key] += 1

    def end(self, limits: tuple[tuple[str, int], ...]) -> None:
        for key, _n in limits:
            self.running[key] -= 1
            if self.running[key] <= 0:
                del self.running[key]
