"""The LMDB store's throughput history: the jobs ever done and ever dead-lettered (per shard: the entries of
the done and failed indexes plus ``FINISHED_LEFT_KEY``), the jobs ever put into each queue
(the queue counts' totals), and the ring of per-minute samples, which lives in
the control environment (database ``samples``: the minute as 8 big-endian bytes -> msgpack [done, failed,
lag]), beside the limits, breakers and locks, so that a sample never contends with the jobs' transactions.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from ..types import Sample
from .access import FINISHED_LEFT, FINISHED_LEFT_KEY, ShardDbs, entry_count, queue_count_rows
from .env import Env

MINUTE_KEY = struct.Struct(">Q")


def finished_totals(shard: ShardDbs) -> tuple[int, int]:
    """(jobs ever done, jobs ever dead-lettered) in ``shard``: one read, O(1)."""

    def txn_fn(txn: Any) -> tuple[int, int]:
        raw = txn.get(FINISHED_LEFT_KEY, db=shard.jobs)
        done_left, failed_left = FINISHED_LEFT.unpack(raw) if raw is not None else (0, 0)
        return entry_count(txn, shard.done_at) + done_left, entry_count(txn, shard.failed) + failed_left

    return shard.env.read(txn_fn)


def enqueued_by_queue(shard: ShardDbs) -> dict[str, int]:
    """Jobs ever put into each queue of ``shard`` (the third of its queue counts): one read, O(queues)."""

    def txn_fn(txn: Any) -> dict[str, int]:
        return {queue.decode(): values[2] for queue, values in queue_count_rows(shard, txn) if values[2]}

    return shard.env.read(txn_fn)


def _key(minute: int) -> bytes:
    return MINUTE_KEY.pack(max(minute, 0))


class History:
    """``save_sample`` and ``samples`` of the store on its control environment."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.db = env.dbs["samples"]

    def save_sample(self, sample: Sample, keep: int) -> bool:
        key = _key(sample.minute)
        value = msgpack.packb([sample.done, sample.failed, float(sample.lag)])

        def txn_fn(txn: Any) -> bool:
            if not txn.put(key, value, db=self.db, overwrite=False):
                return False  # another sampler wrote this minute first
            cursor = txn.cursor(db=self.db)
            cutoff = _key(sample.minute - keep)
            while cursor.first() and cursor.key() < cutoff:
                cursor.delete()
            return True

        return bool(self.env.write(txn_fn))

    def samples(self, since: int) -> list[Sample]:
        def txn_fn(txn: Any) -> list[Sample]:
            cursor = txn.cursor(db=self.db)
            found = []
            if cursor.set_range(_key(since)):
                for key, value in cursor:
                    done, failed, lag = msgpack.unpackb(value)
                    found.append(Sample(MINUTE_KEY.unpack(key)[0], done, failed, lag))
            return found

        return self.env.read(txn_fn)
