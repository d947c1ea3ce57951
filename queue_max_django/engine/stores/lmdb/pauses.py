"""Pauses of the LMDB store (``PauseOps``, ``stores/contract/pauses.py``), in the control environment's
``pauses`` database beside the limits and breakers: key ``pausestate.target_key`` (UTF-8), value
``pausestate.pack``. Each operation is one write (or read) transaction with ``now`` read inside it.

``version`` is the control environment's last transaction id, read from its meta pages (``metapages.py``):
never stale, so a pause committed before a claim asks is in what the claim decides with, and the claim
needs no check of its own (``[sc_pause_fresh]``). It also changes when other control data does (tokens,
breakers, locks, worker reports): the Queue then reads the pauses again, one short read transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ... import pausestate
from ...pausestate import Pause, Target
from .env import Env
from .wake import Waker


def _rows(txn: Any, db: Any) -> list[tuple[str, bytes]]:
    rows = []
    for key, value in txn.cursor(db=db):
        try:
            rows.append((bytes(key).decode(), bytes(value)))
        except UnicodeDecodeError:
            continue  # no key the engine writes: no queue is named by it
    return rows


class LmdbPauses:
    def __init__(self, env: Env, clock: Callable[[], float], hints: Waker) -> None:
        self.env = env
        self._clock = clock
        self._hints = hints
        self.db = env.dbs["pauses"]

    def _drop_ended(self, txn: Any, now: float) -> None:
        for key in pausestate.ended(_rows(txn, self.db), now):
            txn.delete(key.encode(), db=self.db)

    def pause(
        self, targets: Sequence[Target], duration: float | None, reason: str | None, by: str | None
    ) -> list[Pause]:
        def txn_fn(txn: Any) -> list[Pause]:
            now = self._clock()  # inside the transaction: never before begin()
            self._drop_ended(txn, now)
            until = None if duration is None else now + duration
            raw = pausestate.pack(now, until, reason, by)
            for queue, task in targets:
                txn.put(pausestate.target_key(queue, task).encode(), raw, db=self.db)
            return [Pause(queue, task, now, until, reason, by) for queue, task in targets]

        return self.env.write(txn_fn)

    def resume(self, targets: Sequence[Target]) -> list[Pause]:
        def txn_fn(txn: Any) -> list[Pause]:
            self._drop_ended(txn, self._clock())
            lifted = []
            for queue, task in targets:
                key = pausestate.target_key(queue, task)
                raw = txn.pop(key.encode(), db=self.db)
                if raw is not None:
                    lifted.append(pausestate.unpack(key, bytes(raw)))
            return lifted

        lifted = self.env.write(txn_fn)
        if lifted:
            self._hints.notify(None)
        return lifted

    def pauses(self) -> tuple[int, list[Pause]]:
        def txn_fn(txn: Any) -> tuple[int, list[Pause]]:
            return txn.id(), pausestate.in_force(_rows(txn, self.db), self._clock())

        return self.env.read(txn_fn)

    def version(self) -> int:
        return self.env.last_txnid()
