"""``Queue``'s pauses: its public ``pause``, ``resume`` and ``pauses`` over the store's (``Store.pauses``),
with their arguments checked before anything is written. A base class of ``Queue``, which supplies
``_live()`` (the open store, checked against close and fork), ``queues`` and ``_pauses`` (pauses.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import UnknownQueue
from .pauses import Pauses
from .pausestate import MAX_BY, MAX_REASON, Pause, Target, check_duration, check_targets, check_text
from .stores.base import Store


class PauseControl:
    """Pausing queues, or tasks of a queue, in every process and machine of the store at once."""

    queues: frozenset[str] | None
    _pauses: Pauses

    def _live(self) -> Store:
        raise NotImplementedError  # Queue's

    def _targets(self, queues: str | Iterable[str], task: str | None) -> list[Target]:
        targets = check_targets(queues, task)
        served = self.queues
        if served is not None:
            unknown = [queue for queue, _ in targets if queue not in served]
            if unknown:
                raise UnknownQueue(f"unknown queue(s) {unknown}: this Queue serves {sorted(served)}")
        return targets

    def pause(
        self,
        queues: str | Iterable[str],
        *,
        task: str | None = None,
        duration: float | None = None,
        reason: str | None = None,
        by: str | None = None,
    ) -> list[Pause]:
        """Stop every consumer of the store, in every process and on every machine, from claiming the jobs
        of ``queues`` (one name or several), or only those of the task named ``task`` in them, from now
        (the store's clock) for ``duration`` seconds (None: until ``resume``). Running jobs finish;
        scheduled jobs still come due and then wait. Pausing a target again replaces its pause. ``reason``
        (at most 500 characters) and ``by`` (who: at most 200) are kept with it. All targets in one
        transaction. -> the pauses made. ``InvalidJob`` (nothing written) for a bad name, duration or
        text; ``UnknownQueue`` for a queue this Queue does not serve."""
        targets = self._targets(queues, task)
        checked = check_duration(duration)
        why, who = check_text("reason", reason, MAX_REASON), check_text("by", by, MAX_BY)
        return self._live().pauses.pause(targets, checked, why, who)

    def resume(self, queues: str | Iterable[str], *, task: str | None = None) -> list[Pause]:
        """Lift the pauses of ``queues`` (of the task ``task`` in them, with ``task``; a queue's own pause
        and its tasks' pauses are lifted apart). Waiting consumers are woken at once. -> the pauses lifted
        (a target that was not paused is not there)."""
        return self._live().pauses.resume(self._targets(queues, task))

    def pauses(self) -> list[Pause]:
        """The pauses in force now (by queue, then task), each with when, until when, why and by whom."""
        self._live()
        return self._pauses.listing()

    def _pause_stats(self) -> dict[str, Any]:
        """``stats()``'s ``paused``, when anything is."""
        self._live()
        pauses = self._pauses.current()
        if not pauses:
            return {}
        return {"paused": [pause.as_dict() for pause in self._pauses.listing()]}
