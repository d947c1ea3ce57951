"""Durable queues side by side: what one fsync'd put and one fsync'd round trip cost, and the floor of each
storage under them.

    uv run --group bench python benchmarks/durable_bench.py [--rounds 7] [--n 400]

Sides, each on its own store in one temporary directory on the same disk, measured in the same short
rounds, in a rotating order (this machine's speed wanders; see docs/benchmarks.md):

- **ours**: ``Queue(path, sync=True)`` (6 shards, and 1): ``put`` returns after LMDB's commit has called
  ``fdatasync`` on the data file and then written the meta page through its ``O_DSYNC`` descriptor: two
  device flushes per commit, the second ordered after the first (that order is what keeps an LMDB file
  whole after a power loss). ``get`` and ``ack`` are each such a commit.
- **huey**: ``SqliteStorage(fsync=True)`` (WAL, ``synchronous=FULL``): ``enqueue_data``, ``dequeue`` (which
  deletes the row) and ``put_data`` of a result: one ``fdatasync`` of the appended WAL frames per commit.
- **persist-queue**: ``SQLiteAckQueue`` (WAL, ``synchronous=FULL``, its msgpack serializer): ``put``,
  ``get``, ``ack``: one ``fdatasync`` per commit.
- **floors**: a 4 KiB ``pwrite`` + ``fdatasync`` of a preallocated file (one flush, what a WAL commit costs
  at least), the same followed by a 120-byte ``O_DSYNC`` write to another offset (two ordered flushes, what
  an LMDB durable commit costs at least), and a raw py-lmdb ``sync=True`` commit of one put into the same
  two databases ours writes (record and ready entry, with its counters): LMDB's own cost without our code.
  One more floor answers "what if a journal of our own made the put durable, beside an LMDB commit that
  flushes once (``metasync=False``)?": the 4 KiB write + ``fdatasync`` of two files, issued at the same time
  from two threads, both waited for. A floor's "round trip" is three of its operations in a row (a put, a
  get and an ack each commit once).

Printed: single-producer put rate (jobs/s), round trip p50 (µs) for each side, the floors, and same-round
ratios against persist-queue and huey. 16 producer threads against one, on 6 shards, with ``--threads``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import lmdb  # noqa: E402
import persistqueue  # noqa: E402  (the bench dependency group)
from huey.storage import SqliteStorage  # noqa: E402
from persistqueue.serializers import msgpack as pq_msgpack  # noqa: E402

from queue_max_django.engine import Queue  # noqa: E402

clock = time.perf_counter
PAYLOAD = {"n": 0, "to": "user@example.com"}


class Side:
    """One durable queue: ``put(payload)`` and ``round_trip(payload)`` (put, take, acknowledge)."""

    def put(self, payload: Any) -> None:
        raise NotImplementedError

    def round_trip(self, payload: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Ours(Side):
    def __init__(self, path: str, shards: int) -> None:
        self.q = Queue(path, sync=True, shards=shards)

    def put(self, payload: Any) -> None:
        self.q.put(payload)

    def round_trip(self, payload: Any) -> None:
        self.q.put(payload)
        self.q.get(5).ack()

    def close(self) -> None:
        self.q.close()


class Huey(Side):
    def __init__(self, path: str) -> None:
        self.s = SqliteStorage("bench", filename=os.path.join(path, "huey.db"), fsync=True)
        self.packb = __import__("msgpack").packb

    def put(self, payload: Any) -> None:
        self.s.enqueue(self.packb(payload))

    def round_trip(self, payload: Any) -> None:
        self.s.enqueue(self.packb(payload))
        data = self.s.dequeue()
        assert data is not None
        self.s.put_data(b"result", b"done")

    def close(self) -> None:
        self.s.close()


class PersistQueue(Side):
    def __init__(self, path: str) -> None:
        self.q = persistqueue.SQLiteAckQueue(path, serializer=pq_msgpack, multithreading=True)

    def put(self, payload: Any) -> None:
        self.q.put(payload)

    def round_trip(self, payload: Any) -> None:
        self.q.put(payload)
        item = self.q.get(block=False)
        self.q.ack(item)


def flush_floor(path: str, meta: bool) -> Callable[[], None]:
    """One 4 KiB pwrite + fdatasync of a preallocated file; with ``meta``, then a 120-byte O_DSYNC pwrite."""
    data_fd = os.open(os.path.join(path, "floor.bin"), os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(data_fd, b"\0" * (1 << 20), 0)
    os.fsync(data_fd)
    meta_fd = os.open(os.path.join(path, "floor.bin"), os.O_RDWR | os.O_DSYNC)
    page = b"x" * 4096
    counter = [0]

    def op() -> None:
        counter[0] = (counter[0] + 1) % 200
        os.pwrite(data_fd, page, 8192 + counter[0] * 4096)
        os.fdatasync(data_fd)
        if meta:
            os.pwrite(meta_fd, page[:120], 32)

    return op


def concurrent_floor(path: str) -> Callable[[], None]:
    """A 4 KiB pwrite + fdatasync of each of two files, the second in a thread at the same time as the first:
    a journal flushed beside a one-flush LMDB commit. Both are waited for."""
    os.makedirs(os.path.join(path, "a"), exist_ok=True)
    os.makedirs(os.path.join(path, "b"), exist_ok=True)
    first = flush_floor(os.path.join(path, "a"), meta=False)
    second = flush_floor(os.path.join(path, "b"), meta=False)
    go, done = threading.Semaphore(0), threading.Semaphore(0)

    def journal() -> None:
        while True:
            go.acquire()
            second()
            done.release()

    threading.Thread(target=journal, daemon=True).start()

    def op() -> None:
        go.release()
        first()
        done.acquire()

    return op


def lmdb_floor(path: str) -> Callable[[], None]:
    """A raw py-lmdb sync=True commit of one put: a record, a ready entry and a counters key."""
    env = lmdb.open(path, max_dbs=4, map_size=1 << 30, sync=True, metasync=True, writemap=False)
    jobs, ready = env.open_db(b"jobs"), env.open_db(b"ready")
    record = b"r" * 90
    counter = [0]

    def op() -> None:
        counter[0] += 1
        key = counter[0].to_bytes(8, "big")
        with env.begin(write=True) as txn:
            txn.put(b"\xffcounters", key, db=jobs)
            txn.put(key, record, db=jobs)
            txn.put(b"default\0" + key, b"", db=ready)

    return op


def run_threads(side: Side, threads: int, n: int) -> float:
    """``threads`` producers putting ``n`` jobs between them. -> jobs/s."""
    each = n // threads
    barrier = threading.Barrier(threads + 1)

    def produce() -> None:
        barrier.wait()
        for i in range(each):
            side.put({"n": i})

    workers = [threading.Thread(target=produce) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = clock()
    for worker in workers:
        worker.join()
    return each * threads / (clock() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=400, help="operations per round and side")
    parser.add_argument("--threads", type=int, default=16, help="producer threads for the group-commit rows")
    args = parser.parse_args(argv)
    put_rates: dict[str, list[float]] = {}
    trip_p50: dict[str, list[float]] = {}
    group: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:

        def home(name: str) -> str:
            path = os.path.join(tmp, name)
            os.makedirs(path, exist_ok=True)
            return path

        sides: dict[str, Side] = {
            "ours, 6 shards": Ours(home("ours6"), 6),
            "ours, 1 shard": Ours(home("ours1"), 1),
            "huey (SQLite WAL, FULL)": Huey(home("huey")),
            "persist-queue (SQLite WAL, FULL)": PersistQueue(home("pq")),
        }
        floors: dict[str, Callable[[], None]] = {
            "floor: 1 flush (pwrite + fdatasync)": flush_floor(home("f1"), meta=False),
            "floor: 2 ordered flushes (+ O_DSYNC meta)": flush_floor(home("f2"), meta=True),
            "floor: raw py-lmdb sync=True put": lmdb_floor(home("rawlmdb")),
            "floor: 2 files flushed at once (2 threads)": concurrent_floor(home("f2c")),
        }
        for side in sides.values():  # warm up: files created, pages allocated
            for _ in range(50):
                side.round_trip(PAYLOAD)
        names = list(sides) + list(floors)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                if name in floors:
                    op = floors[name]
                    start = clock()
                    for _ in range(args.n):
                        op()
                    put_rates.setdefault(name, []).append(args.n / (clock() - start))
                    samples = []
                    for _ in range(args.n // 2):
                        t0 = clock()
                        op(), op(), op()
                        samples.append(clock() - t0)
                    trip_p50.setdefault(name, []).append(statistics.median(samples))
                    continue
                side = sides[name]
                start = clock()
                for i in range(args.n):
                    side.put({"n": i, "to": "user@example.com"})
                put_rates.setdefault(name, []).append(args.n / (clock() - start))
                samples = []
                for i in range(args.n // 2):
                    t0 = clock()
                    side.round_trip({"n": i})
                    samples.append(clock() - t0)
                trip_p50.setdefault(name, []).append(statistics.median(samples))
            if args.threads > 1:
                for name in ("ours, 6 shards", "ours, 1 shard"):
                    one = run_threads(sides[name], 1, args.n)
                    many = run_threads(sides[name], args.threads, args.n * 2)
                    group.setdefault(name, []).append(many / one)
                    group.setdefault(name + " jobs/s", []).append(many)
        for side in sides.values():
            side.close()

    def ratio(a: str, b: str, table: dict[str, list[float]]) -> float:
        return statistics.median(x / y for x, y in zip(table[a], table[b], strict=True))

    print(f"durable puts, {args.rounds} rounds of {args.n} (medians)")
    print(f"  {'side':44s} {'put jobs/s':>10s} {'round trip p50 µs':>18s}")
    for name in names:
        rate = statistics.median(put_rates[name])
        trip = f"{statistics.median(trip_p50[name]) * 1e6:18.0f}" if name in trip_p50 else f"{'-':>18s}"
        print(f"  {name:44s} {rate:10,.0f} {trip}")
    print("same-round ratios (median):")
    pq, huey = "persist-queue (SQLite WAL, FULL)", "huey (SQLite WAL, FULL)"
    for name in ("ours, 6 shards", "ours, 1 shard"):
        put_pq, put_huey = ratio(name, pq, put_rates), ratio(name, huey, put_rates)
        trip_huey, trip_pq = ratio(name, huey, trip_p50), ratio(name, pq, trip_p50)
        print(f"  {name}: put {put_pq:.2f}x persist-queue's, {put_huey:.2f}x huey's; "
              f"round trip p50 {trip_huey:.2f}x huey's, {trip_pq:.2f}x persist-queue's")  # fmt: skip
    two, one = "floor: 2 ordered flushes (+ O_DSYNC meta)", "floor: 1 flush (pwrite + fdatasync)"
    print(f"  floor with 2 flushes / floor with 1: {ratio(two, one, put_rates):.2f}x the rate")
    raw = ratio("floor: raw py-lmdb sync=True put", one, put_rates)
    print(f"  raw py-lmdb sync put / 1-flush floor: {raw:.2f}x the rate")
    both = ratio("floor: 2 files flushed at once (2 threads)", one, put_rates)
    print(f"  2 files flushed at once / 1-flush floor: {both:.2f}x the rate")
    print(f"  1-flush floor / persist-queue: {ratio(one, pq, put_rates):.2f}x the rate; round trip p50 "
          f"{ratio(one, huey, trip_p50):.2f}x huey's; 2-flush floor's round trip p50 "
          f"{ratio(two, huey, trip_p50):.2f}x huey's")  # fmt: skip
    for name in ("ours, 6 shards", "ours, 1 shard") if group else ():
        print(f"  {args.threads} threads / 1 thread, {name}: {statistics.median(group[name]):.2f}x "
              f"({statistics.median(group[name + ' jobs/s']):,.0f} jobs/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
