"""Kept schedules of the LMDB store (``ScheduleOps``, ``stores/contract/schedules.py``), in the control
environment's ``schedules`` database beside the pauses: key the name (UTF-8), value the bytes the caller
gave (``schedulestate.pack``). A change is one write transaction (LMDB has one writer at a time: two
changes of one name are serialized), a listing one read transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .env import Env


class LmdbSchedules:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.db = env.dbs["schedules"]

    def change(self, name: str, edit: Callable[[bytes | None], bytes | None]) -> bytes | None:
        key = name.encode()

        def txn_fn(txn: Any) -> bytes | None:
            raw = txn.get(key, db=self.db)
            new = edit(None if raw is None else bytes(raw))
            if new is None:
                txn.delete(key, db=self.db)
            else:
                txn.put(key, new, db=self.db)
            return new

        return self.env.write(txn_fn)

    def get(self, name: str) -> bytes | None:
        def txn_fn(txn: Any) -> bytes | None:
            raw = txn.get(name.encode(), db=self.db)
            return None if raw is None else bytes(raw)

        return self.env.read(txn_fn)

    def all(self) -> list[tuple[str, bytes]]:
        def txn_fn(txn: Any) -> list[tuple[str, bytes]]:
            found = []
            for key, value in txn.cursor(db=self.db):
                try:
                    found.append((bytes(key).decode(), bytes(value)))
                except UnicodeDecodeError:
                    continue  # no key the engine writes
            return found

        return self.env.read(txn_fn)
