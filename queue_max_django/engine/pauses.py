"""``Pauses``: a ``Queue``'s view of the store's pauses (``pausestate``), and claiming under them.

The pauses are in the store (``Store.pauses``, ``stores/contract/pauses.py``), shared by every process and
machine. A consumer asks the store's pause ``version()`` before each claim (as it asks the flow's): the
pauses are read again only when it changed, so a claim pays nothing more when nothing is paused. What a
claim may take is then decided from pauses never older than those committed before it asked
(``[sc_pause_fresh]``): a worker started after a pause knows it from its first claim, and a running one from
its next.

What a pause holds back, for one claim's queue filter (``held``):

- whole queues only, and the filter names its queues: the claim goes the usual way (``Claimer``, batches
  and all) with those queues left out of its filter; nothing left: nothing to claim;
- otherwise (a paused task, or a filter of every queue): the claim looks for the best job that no pause
  (and no limit or breaker, ``flow.py``) holds back, shard by shard (``find_admissible``: the jobs of a
  queue with paused tasks are looked at apart, past that queue's paused tasks), then claims exactly that
  one. A paused task's jobs never block another task's jobs of its queue.

Scheduled jobs still come due (promotion ignores pauses) and then wait, pending. A pause with an ``until``
ends by itself: each claim compares it with the store's clock, and a consumer with nothing to claim but
held-back jobs looks again when the first pause ends (or when a resume hints it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .pausestate import Pause
from .stores.contract.pauses import PauseOps
from .tokens import new_token

if TYPE_CHECKING:
    from .concurrency import Skip
    from .stores.base import Store
    from .stores.types import Candidate, Claimed

Queues = tuple[str, ...] | None
MAX_ROUNDS = 16  # looks for a job that another consumer took first, before the caller waits and looks again


@dataclass(frozen=True, slots=True)
class Held:
    """What the pauses in force hold back of one claim's queue filter."""

    allowed: Queues  # the filter without the paused queues (only meaningful when ``narrow``)
    queues: frozenset[str]  # queues paused whole
    tasks: dict[str, frozenset[str]] = field(default_factory=dict)  # queue -> its paused tasks
    wake_at: float | None = None  # when the first of these pauses ends (store clock), None: never
    narrow: bool = False  # the claim can go the usual way with ``allowed``

    @property
    def skip(self) -> frozenset[str]:
        """Queues a plain look passes over: those paused whole, and those with paused tasks (looked at
        apart)."""
        return self.queues | frozenset(self.tasks)


class Pauses:
    """The pauses of one store, for the ``Queue`` that holds it (a new one whenever the Queue opens its
    store, also in a forked child)."""

    def __init__(self, ops: PauseOps, clock: Callable[[], float]) -> None:
        self._ops = ops
        self._clock = clock
        self._cache: tuple[int, list[Pause]] = (-1, [])
        # held()'s cache: (the pause list it was made of, {filter: (Held or None, valid until)})
        self._held: tuple[list[Pause] | None, dict[Queues, tuple[Held | None, float]]] = (None, {})
        self._local = threading.local()  # .seen: the version this thread's last claim decided on

    def current(self) -> list[Pause]:
        """The pauses in force as of the last read (some may have ended since: ``Pause.in_force``)."""
        version = self._ops.version()
        cache = self._cache
        if version != cache[0]:
            cache = self._cache = self._ops.pauses()
        self._local.seen = cache[0]
        return cache[1]

    def taken_while_paused(self, claimed: Sequence[tuple[str, str | None]]) -> list[int]:
        """Of the jobs this thread just claimed (their queue and task name), the positions of those that a
        pause holds back which this thread's decision did not know: committed after its ``version`` read
        and before (or while) its claim ran. A claim takes jobs put after that pause, too: its caller gives
        them back, uncharged, before any runs (``consuming.Consumer.try_claim``). [] when the version is
        still the one decided on (the common case: one version read)."""
        seen = getattr(self._local, "seen", None)
        if self._ops.version() == seen:
            return []
        pauses = self.current()
        now = self._clock()
        in_force = [pause for pause in pauses if pause.in_force(now)]
        return [
            index for index, (queue, name) in enumerate(claimed)
            if any(p.queue == queue and (p.task is None or p.task == name) for p in in_force)
        ]  # fmt: skip

    def listing(self) -> list[Pause]:
        """The pauses in force now, read afresh."""
        self._cache = self._ops.pauses()
        now = self._clock()
        return [pause for pause in self._cache[1] if pause.in_force(now)]

    def held(self, allowed: Queues) -> Held | None:
        """What the pauses hold back of a claim among ``allowed`` (sorted names, None: every queue); None
        when nothing (the common case: one version read)."""
        pauses = self.current()
        if not pauses:
            return None
        made_of, parts = self._held
        if made_of is not pauses:
            parts = {}
            self._held = (pauses, parts)
        now = self._clock()
        found = parts.get(allowed)
        if found is not None and now < found[1]:
            return found[0]
        held, valid_until = _held(pauses, allowed, now)
        if len(parts) >= 64:
            parts.clear()
        parts[allowed] = (held, valid_until)
        return held


def _held(pauses: list[Pause], allowed: Queues, now: float) -> tuple[Held | None, float]:
    """``Pauses.held`` worked out at ``now``. -> (it, until when it stays true)."""
    wanted = None if allowed is None else set(allowed)
    queues: set[str] = set()
    tasks: dict[str, set[str]] = {}
    ends = [pause.until for pause in pauses if pause.until is not None and pause.until > now]
    valid_until = min(ends, default=float("inf"))
    wake_at: float | None = None
    for pause in pauses:
        if not pause.in_force(now) or (wanted is not None and pause.queue not in wanted):
            continue
        if pause.until is not None and (wake_at is None or pause.until < wake_at):
            wake_at = pause.until
        if pause.task is None:
            queues.add(pause.queue)
        else:
            tasks.setdefault(pause.queue, set()).add(pause.task)
    for queue in queues:
        tasks.pop(queue, None)
    if not queues and not tasks:
        return None, valid_until
    frozen = {queue: frozenset(names) for queue, names in tasks.items()}
    if allowed is not None and not frozen:
        narrowed = tuple(queue for queue in allowed if queue not in queues)
        return Held(narrowed, frozenset(queues), frozen, wake_at, True), valid_until
    return Held(allowed, frozenset(queues), frozen, wake_at, False), valid_until


def unpaused_queues(store: Store, allowed: Queues, held: Held, now: float) -> tuple[str, ...]:
    """The queues of a claim's filter (every queue the store counts, for a claim of every queue) that
    ``held`` holds nothing of: neither paused whole nor with a paused task. Sorted, as a filter is."""
    names = allowed if allowed is not None else store.queue_counts(now)
    return tuple(sorted(name for name in names if name not in held.skip))


def limited_filter(store: Store, allowed: Queues, held: Held, now: float) -> tuple[Queues, Skip | None]:
    """What a claim of limited jobs (``Claimer.limited_only``) under ``held`` asks for: (its queues, the
    paused tasks it passes over in them). Every queue not paused whole, past its paused tasks, where the
    store's limited claim can pass over tasks (``ConcurrencyOps.claim``'s ``skip``); else only the queues
    that ``held`` holds nothing of. Empty queues: nothing to ask."""
    if not getattr(store.concurrency, "passes_paused_tasks", False):
        return unpaused_queues(store, allowed, held, now), None
    names = allowed if allowed is not None else store.queue_counts(now)
    queues = tuple(sorted(name for name in names if name not in held.queues))
    skip = {queue: tasks for queue, tasks in held.tasks.items() if queue in queues}
    return queues, skip or None


def find_admissible(
    store: Store,
    shard: int,
    now: float,
    allowed: Queues,
    skip_queues: frozenset[str],
    skip_names: frozenset[str],
    held: Held | None,
) -> tuple[Candidate | None, float | None]:
    """``store.find_admissible`` that also passes over what ``held`` holds back: the queues with paused
    tasks are looked at apart (one read each), past their paused tasks. -> (the best, the shard's ETA)."""
    if held is None:
        return store.find_admissible(shard, now, allowed, skip_queues, skip_names)
    best, eta = store.find_admissible(shard, now, allowed, skip_queues | held.skip, skip_names)
    for queue, names in held.tasks.items():
        if queue in skip_queues or (allowed is not None and queue not in allowed):
            continue
        found, _eta = store.find_admissible(shard, now, (queue,), frozenset(), skip_names | names)
        if found is not None and (best is None or found.order < best.order):
            best = found
    return best, eta


def claim_held(
    store: Store, allowed: Queues, held: Held, clock: Callable[[], float], lease_time: float, worker: Any
) -> tuple[Claimed | None, float | None]:
    """Claim the best job of the store that ``held`` does not hold back (no limit or breaker is set for
    these queues: ``Flow.claim`` does this under them). -> (the job, or None and the clock time when it
    is worth looking again: the earliest ETA or end of a pause, None if nothing is in sight)."""
    for _round in range(MAX_ROUNDS):
        now = clock()
        best: Candidate | None = None
        next_eta = held.wake_at
        due = False
        for shard in range(store.shards):
            candidate, eta = find_admissible(store, shard, now, allowed, frozenset(), frozenset(), held)
            if eta is not None:
                if eta <= now:
                    due = True
                elif next_eta is None or eta < next_eta:
                    next_eta = eta
            if candidate is not None and (best is None or candidate.order < best.order):
                best = candidate
        if due:
            store.promote_due(None, now)
            continue
        if best is None:
            return None, next_eta
        claimed = store.claim_job(now, best.job_id, lease_time, new_token(), worker, False)
        if claimed is not None:
            return claimed, None
        if store.hints.changed():  # taken first by another consumer, or (PostgreSQL) the pauses changed
            return None, now  # look again at once, with the pauses as they are now
    return None, None
