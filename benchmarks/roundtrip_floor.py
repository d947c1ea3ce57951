"""How far the engine's put + get + ack round trip is from the cost of the LMDB work it does, per operation.

    uv run --group bench python benchmarks/roundtrip_floor.py [--rounds 12] [--n 1000]

Three sides, measured in the same short rounds (this machine's speed wanders; see docs/benchmarks.md):

- **floor**: the transactions a round trip of ours makes, written inline with raw py-lmdb on one shard of a
  store the engine created: the put (counters, the would-it-lead check, the record, the ready entry), the
  wake hint (one ``pwrite``) and its inotify event, the claim (the ready head, the record and payload
  decoded, the lease entry, the record re-encoded) and the ack (the record checked, the lease entry moved to
  the done index, the record re-encoded). No validation, no routing, no view of other shards, no flow
  control, no ``Record`` object: what any implementation of this layout pays at least.
- **lmdb-queue** (its default mode), whose layout keeps state in small separate keys.
- **ours**: ``Queue.put``, ``Queue.get``, ``Record.ack`` on a store of 6 shards and on one of 1 shard.

Printed: the median µs of put, get and ack for each side, and the same-round ratios of the whole round trip.
The floor is to be read as a bound for this layout: where ours is above it, the difference is Python around
the same LMDB work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import equeue  # noqa: E402  (the bench dependency group)

from queue_max_django.engine import Queue, codec  # noqa: E402
from queue_max_django.engine.stores.lmdb import layout  # noqa: E402
from queue_max_django.engine.stores.lmdb.access import (  # noqa: E402  (the layout measured)
    COUNTERS_KEY,
    PUT_COUNTERS,
    put_counters,
)
from queue_max_django.engine.stores.lmdb.keys import id_key, ready_key_parts, time_key  # noqa: E402
from queue_max_django.engine.stores.lmdb.newrecords import encoded  # noqa: E402

Op = Callable[[Any], tuple[float, float, float]]
clock = time.perf_counter


def floor_side(path: str) -> Op:
    """The same transactions as the engine's round trip, inline, on shard 0 of a 1-shard store."""
    q = Queue(path, writemap=True, shards=1, do_recover=False, do_vacuum=False)
    q.put("warm-up")
    q.get(0).ack()  # the waker's write descriptor and this thread's watch now exist
    shard = q._store._shards[0]
    env, jobs, ready, lease, done, sched = (
        shard.env.env, shard.jobs, shard.ready, shard.lease, shard.done_at, shard.sched
    )  # fmt: skip
    spec = encoded(q._put_options.check(
        priority=0, delay=None, eta=None, queue="default", name=None, max_retries=None, timeout=None,
        partition_key=None, now=time.time(),
    ))  # fmt: skip
    waker = q._store.hints
    write_fd, watch_fd, poller = waker._write_fd, waker._local.fd, waker._local.poller
    assert write_fd is not None
    size = waker._size

    def op(payload: Any) -> tuple[float, float, float]:
        start = clock()
        packed = codec.pack_value(payload, what="payload", limit=1 << 20)
        now_us = int(time.time() * 1e6)
        with env.begin(write=True) as txn:
            sequence, total, floor = put_counters(txn.get(COUNTERS_KEY, db=jobs))
            txn.cursor(db=ready).set_range(spec.queue_bytes + b"\x00")  # would it lead its queue?
            sequence = sequence + 1 if sequence >= now_us else now_us
            ready_us = floor = floor if floor > now_us else now_us
            job_id = sequence << 8
            key = id_key(job_id)
            txn.put(key, spec.record(False, now_us, ready_us, packed), db=jobs)
            txn.put(spec.ready_key(ready_us, job_id), b"", db=ready)
            txn.put(COUNTERS_KEY, PUT_COUNTERS.pack(sequence, total + 1, floor), db=jobs)
        os.pwrite(write_fd, os.urandom(8), 8)
        put_done = clock()
        if poller.poll(0):
            os.read(watch_fd, 4096)
        os.pread(write_fd, size, 0)
        token = os.urandom(16)
        now_us = int(time.time() * 1e6)
        with env.begin(write=True) as txn:
            cursor = txn.cursor(db=ready)
            cursor.first()
            ready_key = cursor.key()
            job_id = ready_key_parts(ready_key)[3]
            key = id_key(job_id)
            record = layout.unpack_record(txn.get(key, db=jobs), job_id)
            codec.unpack_stored(record[layout.F_PAYLOAD], job_id, "payload")
            txn.delete(ready_key, db=ready)
            lease_us = now_us + 30_000_000
            txn.put(time_key(lease_us, job_id), b"", db=lease)
            record[layout.F_STATE], record[layout.F_LEASE_UNTIL] = 2, lease_us
            record[layout.F_TOKEN], record[layout.F_ATTEMPTS] = token, 1
            txn.put(key, layout.pack_record(record), db=jobs)
            cursor.set_range(ready_key)  # the shard's next head
            txn.cursor(db=sched).first()  # and its earliest ETA
        get_done = clock()
        now_us = int(time.time() * 1e6)
        with env.begin(write=True) as txn:
            record = layout.unpack_record(txn.get(key, db=jobs), job_id)
            assert record[layout.F_TOKEN] == token
            txn.delete(time_key(record[layout.F_LEASE_UNTIL], job_id), db=lease)
            txn.put(time_key(now_us, job_id), b"", db=done)
            record[layout.F_STATE], record[layout.F_TOKEN], record[layout.F_LEASE_UNTIL] = 3, None, None
            txn.put(key, layout.pack_record(record), db=jobs)
        return put_done - start, get_done - put_done, clock() - get_done

    return op


def queue_side(q: Any, get: Callable[[], Any]) -> Op:
    def op(payload: Any) -> tuple[float, float, float]:
        start = clock()
        q.put(payload)
        put_done = clock()
        record = get()
        get_done = clock()
        record.ack()
        return put_done - start, get_done - put_done, clock() - get_done

    return op


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--n", type=int, default=1000, help="round trips per round and side")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ours6 = Queue(os.path.join(tmp, "ours6"), writemap=True)
        ours1 = Queue(os.path.join(tmp, "ours1"), writemap=True, shards=1)
        lmdbq = equeue.Queue(os.path.join(tmp, "lmdb-queue"))
        sides: dict[str, Op] = {
            "floor": floor_side(os.path.join(tmp, "floor")),
            "lmdb-queue": queue_side(lmdbq, lambda: lmdbq.get(timeout=5)),
            "ours, 6 shards": queue_side(ours6, lambda: ours6.get(5)),
            "ours, 1 shard": queue_side(ours1, lambda: ours1.get(5)),
        }
        per_round: dict[str, list[list[float]]] = {name: [] for name in sides}
        names = list(sides)
        done = 0
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                samples = [sides[name]({"n": done + i, "to": "user@example.com"}) for i in range(args.n)]
                per_round[name].append([statistics.median(column) for column in zip(*samples, strict=True)])
                done += args.n
        for q in (ours6, ours1, lmdbq):
            q.close()

    def total(name: str) -> list[float]:
        return [sum(parts) for parts in per_round[name]]

    print(f"median µs per operation, {args.rounds} rounds of {args.n} round trips")
    print(f"  {'side':16s} {'put':>7s} {'get':>7s} {'ack':>7s} {'sum':>7s}")
    for name, rounds in per_round.items():
        medians = [statistics.median(column) * 1e6 for column in zip(*rounds, strict=True)]
        print(f"  {name:16s} " + " ".join(f"{m:7.1f}" for m in medians) + f" {sum(medians):7.1f}")
    print("same-round ratios of the sums (median), against lmdb-queue:")
    for name in names:
        ratio = statistics.median(a / b for a, b in zip(total(name), total("lmdb-queue"), strict=True))
        print(f"  {name:16s} {ratio:5.2f}x lmdb-queue's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
