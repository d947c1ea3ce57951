"""Pausing queues and tasks, shared by every process (and machine) of a store: ``Store.pauses``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...pausestate import Pause, Target


class PauseOps(Protocol):
    """The pauses of a store (``pausestate``: what one is; ``pauses.py``: how the Queue's claims honour
    them). A store only keeps them and says when they changed; the Queue decides which jobs a claim may
    take from them, and the claim itself makes sure that decision is never made on pauses older than
    those committed before it (``[sc_pause_fresh]``).

    Targets were checked by the Queue (``pausestate.check_targets``, ``check_text``, ``check_duration``):
    a store may assume them valid. Times are the store's clock (``Store.clock``), read inside the
    transaction, as the flow operations read it."""

    def pause(
        self, targets: Sequence[Target], duration: float | None, reason: str | None, by: str | None
    ) -> list[Pause]:
        """Pause every target in one transaction, all or nothing: each is held back from ``now`` (the
        store's clock) until ``now + duration`` (None: until resumed), with ``reason`` and ``by``; a target
        paused already is paused again with these (its old pause replaced). Pauses that ended
        (``until`` at or before now) are dropped in the same transaction. -> the new pauses, in the order
        of ``targets``. [sc_pause_set] The version changes (``version``), and the store's waiting
        consumers need no hint: a pause makes nothing claimable. [sc_pause_version]"""

    def resume(self, targets: Sequence[Target]) -> list[Pause]:
        """Lift the pauses of ``targets`` in one transaction (a queue's ``(queue, None)`` lifts the
        pause of the whole queue, not those of its tasks). -> the pauses lifted that were in force, in the
        order of ``targets`` (a target not paused, or whose pause had ended, is not there). Ended pauses
        are dropped too. When any pause was lifted the version changes and the waiting consumers of
        every process are hinted (its jobs are claimable again). [sc_pause_resume]"""

    def pauses(self) -> tuple[int, list[Pause]]:
        """(the version, every pause in force at the store's clock now, by queue then task, a queue's
        own pause first), as one consistent read: the pauses are those of that version.
        [sc_pause_list] A pause whose ``until`` has passed is not listed: it ended by itself, no process
        lifted it."""

    def version(self) -> int:
        """A number that changes whenever any process commits a pause or resume, cheap to ask on every
        claim (a claim asks before it decides what it may take).

        [sc_pause_fresh] A pause committed before a thread calls ``version`` holds back that thread's next
        claim: either this call already returns a different number (a store whose version is never stale:
        LMDB reads the control environment's last transaction id from its meta pages; the memory store,
        its counter), or (a store that keeps the number a few ms to spare a round trip: PostgreSQL) the
        thread's next ``claim``, and ``claim_job`` without ``scheduled_too``, compare in their own
        statement the number this thread last read (``version`` or ``pauses``) with the committed one, and
        take nothing when they differ (``claim``: no jobs and no head priority; ``claim_job``: None), hint
        this process's consumers, and the thread's next ``version`` returns the committed one. So a claim
        never takes a job on pauses older than those committed before its thread asked, and one that
        began before a pause committed is concurrent with it (it takes its job as if it came first; the
        job runs to its end as a running job does). A never-stale store's claim may still take a job put
        after a pause that committed between its thread's ``version`` and its transaction: the Queue asks
        ``version`` again after the claim and gives such jobs back before they run
        (``pauses.Pauses.taken_while_paused``)."""
