"""Pauses of an in-memory store (``PauseOps``, ``stores/contract/pauses.py``): kept in the space as the bytes
``pausestate.pack`` gives, each operation under the space's lock with ``now`` read from the handle's clock
inside it. ``version`` reads the space's counter, never stale: a claim needs no check of its own
(``[sc_pause_fresh]``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ... import pausestate
from ...pausestate import Pause, Target
from .hints import MemoryHints
from .space import Space


class MemoryPauses:
    def __init__(self, space: Space, clock: Callable[[], float], hints: MemoryHints) -> None:
        self._space = space
        self._clock = clock
        self._hints = hints

    def _drop_ended(self, now: float) -> None:
        stored = self._space.pauses
        for key in pausestate.ended(stored.items(), now):
            del stored[key]

    def pause(
        self, targets: Sequence[Target], duration: float | None, reason: str | None, by: str | None
    ) -> list[Pause]:
        space = self._space
        with space.lock:
            now = self._clock()
            self._drop_ended(now)
            until = None if duration is None else now + duration
            raw = pausestate.pack(now, until, reason, by)
            for queue, task in targets:
                space.pauses[pausestate.target_key(queue, task)] = raw
            space.pause_version += 1
        return [Pause(queue, task, now, until, reason, by) for queue, task in targets]

    def resume(self, targets: Sequence[Target]) -> list[Pause]:
        space = self._space
        with space.lock:
            now = self._clock()
            self._drop_ended(now)
            lifted = []
            for queue, task in targets:
                key = pausestate.target_key(queue, task)
                raw = space.pauses.pop(key, None)
                if raw is not None:
                    lifted.append(pausestate.unpack(key, raw))
            if lifted:
                space.pause_version += 1
        if lifted:
            self._hints.notify(None)
        return lifted

    def pauses(self) -> tuple[int, list[Pause]]:
        space = self._space
        with space.lock:
            return space.pause_version, pausestate.in_force(space.pauses.items(), self._clock())

    def version(self) -> int:
        return self._space.pause_version
