"""Kept schedules of an in-memory store (``ScheduleOps``, ``stores/contract/schedules.py``): the space's
``schedules`` dict, name -> the bytes the caller gave, each operation under the space's lock."""

from __future__ import annotations

from collections.abc import Callable

from .space import Space


class MemorySchedules:
    def __init__(self, space: Space) -> None:
        self._space = space

    def change(self, name: str, edit: Callable[[bytes | None], bytes | None]) -> bytes | None:
        space = self._space
        with space.lock:
            new = edit(space.schedules.get(name))
            if new is None:
                space.schedules.pop(name, None)
            else:
                space.schedules[name] = new
            return new

    def get(self, name: str) -> bytes | None:
        with self._space.lock:
            return self._space.schedules.get(name)

    def all(self) -> list[tuple[str, bytes]]:
        with self._space.lock:
            return sorted(self._space.schedules.items())
