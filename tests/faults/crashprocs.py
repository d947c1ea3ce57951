"""Children of tests/faults/test_put_many_kill.py (started by tests/engine/procs.py's ``Children``): one that
patches the LMDB store's writes (given the store's path), one that opens the store by its location."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.lmdb.env import Env
from tests.engine.locations import StoreLocation, as_location


def _say(*message: Any) -> None:
    os.write(sys.stdout.fileno(), (json.dumps(list(message)) + "\n").encode())


def put_many_stopped_inside(path: str, batch: int, stop_after: int, sync: bool) -> None:
    """One ``put_many`` of ``batch`` jobs that stops for good after writing ``stop_after`` records: inside
    its write transaction, with that many records already written to it. Says "inside" then, to be
    killed. (The engine writes a batch's records with one ``Cursor.putmulti``; this child's transactions
    hand out cursors whose ``putmulti`` writes the first ``stop_after`` items one by one, then stops.)"""
    q = Queue(path, shards=2, do_recover=False, do_vacuum=False, sync=sync)
    real_write = Env.write

    class StoppingCursor:
        def __init__(self, cursor: Any) -> None:
            self._cursor = cursor

        def __getattr__(self, name: str) -> Any:
            return getattr(self._cursor, name)

        def putmulti(self, items: Any) -> None:
            for key, value in list(items)[:stop_after]:
                self._cursor.put(key, value)
            _say("inside", stop_after)
            time.sleep(3600)

    class StoppingTxn:
        def __init__(self, txn: Any) -> None:
            self._txn = txn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._txn, name)

        def cursor(self, db: Any = None) -> Any:
            return StoppingCursor(self._txn.cursor(db=db))

    def write(env: Env, fn: Any, *, durable: bool = False) -> Any:
        return real_write(env, lambda txn: fn(StoppingTxn(txn)), durable=durable)

    Env.write = write  # type: ignore[method-assign]
    q.put_many([{"batch": "killed", "i": i, "pad": "p" * 200} for i in range(batch)])
    _say("returned")


def put_many_forever(where: StoreLocation | str, batch: int) -> None:
    """Batches of ``batch`` jobs until killed; says which batch returned, after it returned."""
    q = as_location(where).open_queue(shards=2)
    _say("ready")
    number = 0
    while True:
        q.put_many([{"batch": number, "i": i, "pad": "p" * 500} for i in range(batch)])
        _say("returned", number)
        number += 1
