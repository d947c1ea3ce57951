"""Concurrency limits, counted in the transactions that start and end jobs: ``Store.concurrency``.

A job put with ``JobSpec.concurrency`` (``((key, n), ...)``, ``engine/concurrency.py``) is *limited*: at most
``n`` jobs carrying ``key`` run at once, whatever the number of processes and machines claiming. What is
counted is the store's own data (the jobs running with the key), changed or read inside the claim's
transaction, so racing claims never pass a limit; and a slot is the running job itself, so it comes back by
whatever ends the job, a lease expiry included: nothing has to free it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..types import Claimed

Queues = tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """What ``ConcurrencyOps.claim`` did: the jobs it claimed (none: none may start now), in the order it
    took them, and whether limited jobs of the claim's queues still wait in the shard."""

    claimed: list[Claimed]
    waiting: bool


class ConcurrencyOps(Protocol):
    """The claim of limited jobs, and what the limits hold.

    - [sc_concurrency_pending] A limited job is pending like any other (``counts()``, ``queue_counts()``,
      ``list_jobs``, ``oldest_pending``, ``delete``, ``cancel``, ``purge`` see it), but ``Store.claim`` never
      takes it, nor does ``find_admissible`` return it: only ``claim`` below starts it. ``Store.head`` says
      whether limited jobs of its queues wait in the shard (``Head.limited``).
    - [sc_concurrency_count] The jobs running with a key are counted in the store, in the same transaction
      as each start (``claim``, ``claim_job``) and each end: ``complete``, ``complete_many``, ``fail``,
      ``release``, ``recover_expired`` (an expired lease gives its slot back), quarantine.
    - [sc_concurrency_requeue] A limited dead letter requeued (``Store.requeue``) is limited again, with the
      limits it was put with: pending in its group, started only by ``claim`` below.
    - [sc_concurrency_claim_job] ``Store.claim_job`` of a limited job whose limits are full claims nothing
      (None), as for a job in another state: a limit holds against every claim."""

    def claim(
        self,
        shard: int,
        now: float,
        queues: Queues,
        lease_time: float,
        token: bytes,
        worker: str | None,
        min_priority: int | None,
        limit: int,
    ) -> LimitedClaim:
        """In one transaction, claim up to ``limit`` limited jobs of ``shard`` among ``queues`` that their
        limits let start, each marked as ``Store.claim`` marks one; due scheduled jobs are promoted first,
        as ``Store.claim`` does.

        - [sc_concurrency_claim] A job may start when, for each of its ``(key, n)``, fewer than ``n`` jobs
          carrying ``key`` run; the count and the start are one transaction, so no number of claims racing
          on any number of processes ever passes a limit.
        - [sc_concurrency_turns] Waiting limited jobs are grouped by queue and last key
          (``concurrency.group_of``); groups take turns: the claim looks at the groups in turn order
          (the one that joined or was served longest ago first) and takes the first group's next job
          (claim order within it) that may start, then the next group's (a group it took from comes round
          again in the same claim, after the others). A group it took from, or found held by a full limit,
          goes to the back of the turns, so a group's next job starts within as many claims as there are
          groups before it, however many jobs another group holds. At most ``concurrency.SCAN_GROUPS``
          groups per call.
        - [sc_concurrency_held] A job held by a full limit stays pending, uncharged (no attempt counted,
          nothing about it changed but its group's turn), and never holds back a job it does not limit.
        - [sc_concurrency_batch] A claim that takes two or more marks them a batch, as ``Store.claim``
          does [sc_claim_batch] (an expired lease sends them back uncharged); a job whose lease once
          expired is taken only first, and alone.
        - [sc_concurrency_priority] A group whose next job has a priority below ``min_priority`` (the best
          the caller saw among the unlimited jobs) is passed over, keeping its turn.
        - [sc_concurrency_paused] A store whose ``ConcurrencyOps`` says ``passes_paused_tasks = True`` takes
          a keyword ``skip`` (``concurrency.Skip``: queue -> task names, the paused tasks of the claim's
          queues): in a group of such a queue the claim passes over those tasks' jobs (at most
          ``concurrency.SCAN_PAST`` of them, in claim order) to the group's first other job; a group with
          only theirs within that bound keeps its turn. A store without it: the engine leaves a queue
          with a paused task out of the limited claim's queues (its limited jobs wait with the task's).
        - -> ``LimitedClaim``: the claimed jobs (possibly none), and whether limited jobs of
          ``queues`` still wait in the shard. A job whose payload does not decode is quarantined and
          passed over."""

    def running(self) -> dict[str, int]:
        """Jobs running per limit key, store-wide (keys with none left out). [sc_concurrency_stats]"""

    def waiting(self) -> dict[str, int]:
        """Limited jobs waiting (pending) per group (``concurrency.group_of``: queue and key), store-wide.
        [sc_concurrency_stats]"""
