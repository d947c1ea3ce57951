"""``Claimer``: priority across shards. Which shard a consumer claims from, never passing over a higher
priority that another shard holds, and the per-thread view of the shards' heads that makes this cheap.

Each consumer thread keeps a view of the shards' head priorities. Heads only fall when others claim;
anything that can raise one (a put, a retry, a release, a requeue, recovery) hints waiting consumers through
the store (``store.hints``), so the view is re-read whenever a hint arrived or an ETA passed. A claim passes
the best priority the other shards may hold, and takes nothing below it (the view is refreshed if its own
head is lower): no job is ever taken over a higher-priority one seen by the view.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .concurrency import Skip
from .errors import QueueCorrupted
from .job import PRIORITY_MAX
from .stores.contract.concurrency import LimitedClaim
from .stores.types import Claimed, CorruptedJobQuarantined
from .tokens import new_token

PREFERENCE_RUN = 32  # claims a consumer makes from its preferred shard before it moves to the next
UNKNOWN = PRIORITY_MAX + 1  # a view's bound for a shard that was hinted and not read yet: above any job

Queues = tuple[str, ...] | None  # a claim's queue filter: sorted names, or None for every queue


@dataclass(slots=True)
class _View:
    """One consumer thread's picture of the shards: each shard's best claimable priority (an upper bound
    until a hint says something arrived) and the earliest ETA of a scheduled job."""

    allowed: Queues
    priorities: list[int | None]
    next_eta: float | None
    mark: Any  # the store's hint mark when the shards were read (see Hints.mark), None: unknown
    etas: list[float | None]  # each shard's earliest ETA
    limited: list[bool]  # each shard may hold limited jobs waiting (stores/contract/concurrency.py)


class Claimer:
    """Claims for one ``Queue``: ``best(allowed, limit)`` takes the next job(s) in priority order across
    the store's shards."""

    def __init__(self, store: Any, clock: Callable[[], float], rng: random.Random) -> None:
        self._store = store
        self._clock = clock
        self._rng = rng
        self._local = threading.local()  # per consumer thread: its view of the shards' heads
        self._numbers = itertools.count()

    def forget(self) -> None:
        """Drop every thread's view (after a fork, or when a wait ended: look at the store afresh)."""
        self._local = threading.local()

    def forget_mine(self) -> None:
        """Drop this thread's view."""
        self._local.view = None

    def _look(self, now: float, allowed: Queues, previous: _View | None = None) -> _View:
        """Read every shard's head (one short read each) and promote due scheduled jobs. With ``previous``,
        only the shards hinted since it was taken are looked at again; the others keep what ``previous``
        saw, which stays an upper bound: heads only fall without a hint. When exactly one shard was hinted
        it is not read at all: it becomes UNKNOWN, the highest bound there is, so the next claim goes there
        first and learns its head and its ETA in the claim's own transaction."""
        store = self._store
        hints = store.hints
        count = store.shards
        if previous is not None and previous.allowed != allowed:
            previous = None
        while True:
            mark = hints.mark()
            changed = None if previous is None else hints.changed_since(previous.mark, mark)
            if previous is None or changed is None:
                view = _View(allowed, [None] * count, None, mark, [None] * count, [False] * count)
                reread: list[int] = list(range(count))
            else:
                view = previous  # updated in place; its mark last, once the shards that changed are read
                if len(changed) == 1:  # one shard: claim there next and learn its head then
                    view.priorities[changed[0]] = UNKNOWN
                    view.etas[changed[0]] = None  # (and its limited jobs: the claim there tells)
                    reread = []
                else:
                    reread = changed
            for index in reread:
                head = store.head(index, now, allowed)
                view.priorities[index], view.etas[index] = head.priority, head.next_eta
                view.limited[index] = head.limited
            view.mark = mark
            etas = view.etas
            view.next_eta = min([eta for eta in etas if eta is not None], default=None)
            if view.next_eta is None or view.next_eta > now:
                return view
            for index, eta in enumerate(etas):
                if eta is not None and eta <= now:
                    store.promote_due(index, now)
            previous = None

    def best(
        self, allowed: Queues, limit: int, lease_time: float, worker: str | None
    ) -> tuple[list[Claimed], float | None]:
        """Claim up to ``limit`` jobs of the best priority there is (from one shard, in one transaction).
        -> (the jobs, possibly none; the earliest future ETA)."""
        store = self._store
        count = store.shards
        local = self._local
        view: _View | None = getattr(local, "view", None)
        now = self._clock()
        changed = store.hints.changed()  # always asked first: it also starts this thread's watch
        if (
            changed
            or view is None
            or view.allowed != allowed
            or (view.next_eta is not None and view.next_eta <= now)
        ):
            view = local.view = self._look(now, allowed, view)
        if True in view.limited:
            limited = self._limited(view, allowed, lease_time, worker, now, limit)
            if limited:
                return limited, view.next_eta
        for _attempt in range(4 * count + 4):
            priorities = view.priorities
            known = [priority for priority in priorities if priority is not None]
            if not known:
                return [], view.next_eta
            # The best priority, on the first shard holding it from this thread's preferred one on; and
            # the best that any other shard may hold (the claim takes nothing below it).
            best_priority = max(known)
            start = self._preferred_shard(local, count)
            try:
                best = priorities.index(best_priority, start)
            except ValueError:
                best = priorities.index(best_priority)
            known.remove(best_priority)
            runner_up = max(known) if known else None
            token = new_token()
            try:
                outcome = store.claim(best, now, allowed, lease_time, token, runner_up, worker, limit)
            except CorruptedJobQuarantined as exc:
                local.view = None
                raise QueueCorrupted(
                    f"job {exc.job_id} could not be delivered: {exc.reason}. It was moved to the dead "
                    f"letters (error type 'Corrupted'); the queue goes on with the other jobs."
                ) from None
            # That shard's head and earliest ETA now, exactly: they were read in the claim's transaction.
            claimed, priorities[best], eta = outcome.claimed, outcome.head_priority, outcome.next_eta
            view.limited[best] = outcome.limited
            if not claimed and outcome.limited:  # only limited jobs there: their claim
                limited = self._limited(view, allowed, lease_time, worker, now, limit)
                if limited:
                    return limited, view.next_eta
            if view.etas[best] != eta:
                view.etas[best] = eta
                view.next_eta = min((e for e in view.etas if e is not None), default=None)
                if eta is not None and eta <= now:  # scheduled jobs there are due: make them pending
                    store.promote_due(best, now)
                    priorities[best] = UNKNOWN
            if outcome.contended and count > 1:
                local.base += self._rng.randrange(1, count)  # someone else writes here: prefer another shard
            if claimed:
                return claimed, view.next_eta
        local.view = None
        return [], view.next_eta

    def limited_only(
        self, allowed: Queues, lease_time: float, worker: str | None, skip: Skip | None = None
    ) -> list[Claimed]:
        """A limited job that may start, if any (``_limited``), for a claim under rate limits or breakers
        (which take no limited job: ``find_admissible`` passes them by), or past pauses (``consuming.py``:
        ``skip``, the paused tasks of ``allowed``'s queues, whose jobs the claim passes over).
        The thread keeps a view of its own for this (the flow's claim drops the usual one each time:
        ``forget_mine``), read again only when a hint came since it was taken (or an ETA it saw passed): an
        idle claim under a rate limit asks the store nothing more for it. It consumes no hint: the flow's
        claim asks for them next."""
        local = self._local
        view: _View | None = getattr(local, "limited_view", None)
        now = self._clock()
        hints = self._store.hints
        if (
            view is None
            or view.allowed != allowed
            or (view.next_eta is not None and view.next_eta <= now)  # a scheduled job came due since
            or hints.changed_since(view.mark, hints.mark()) != []
        ):
            view = local.limited_view = self._look(now, allowed)
        if True not in view.limited:
            return []
        return self._limited(view, allowed, lease_time, worker, now, 1, skip)

    def _limited(
        self,
        view: _View,
        allowed: Queues,
        lease_time: float,
        worker: str | None,
        now: float,
        limit: int,
        skip: Skip | None = None,
    ) -> list[Claimed]:
        """Claim up to ``limit`` limited jobs of a shard where some wait, from this thread's preferred shard
        on, those their limits let start, none below the best priority of the unlimited jobs in any shard
        (``stores/contract/concurrency.py``); each shard's answer updates the view."""
        count = self._store.shards
        known = [priority for priority in view.priorities if priority is not None]
        floor = max(known) if known else None
        if floor is not None and floor > PRIORITY_MAX:
            floor = None  # a shard not read since its hint: the claims will tell
        start = self._preferred_shard(self._local, count)
        ops = self._store.concurrency
        for step in range(count):
            shard = (start + step) % count
            if not view.limited[shard]:
                continue
            token = new_token()
            outcome: LimitedClaim
            if skip:
                outcome = ops.claim(shard, now, allowed, lease_time, token, worker, floor, limit, skip=skip)
            else:
                outcome = ops.claim(shard, now, allowed, lease_time, token, worker, floor, limit)
            view.limited[shard] = outcome.waiting
            if outcome.claimed:
                return outcome.claimed
        return []

    def _preferred_shard(self, local: threading.local, count: int) -> int:
        """Where this consumer thread looks first among shards of equal priority. Each thread has its own
        shard and stays on it for a run of claims before moving to the next, so that concurrent consumers
        (threads or processes) mostly write to different shards instead of queueing on one write lock, and
        no shard waits longer than ``count`` runs. A claim that had to wait for the shard's write lock
        moves the thread to a random other shard (``best``): consumers that drift onto one shard part
        again."""
        base = getattr(local, "base", None)
        if base is None:
            # Consecutive worker processes have consecutive pids, and each thread of a process takes the
            # next number: consumers start on different shards as long as there are shards enough.
            base = local.base = os.getpid() + next(self._numbers)
            local.claims = 0
        local.claims += 1
        return int(base + local.claims // PREFERENCE_RUN) % count
