"""A short engine demo: several processes put, work and ack jobs on one store, then the stats are printed.

uv run python -m queue_max_django.engine.demo [--jobs N] [--workers W] [--path DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time

from .queue import Queue

JOBS_PER_PRODUCER_BATCH = 250


def _produce(path: str, first: int, count: int) -> None:
    with Queue(path) as q:
        for start in range(first, first + count, JOBS_PER_PRODUCER_BATCH):
            stop = min(start + JOBS_PER_PRODUCER_BATCH, first + count)
            q.put_many([{"n": n} for n in range(start, stop)], name="demo.square")


def _work(path: str, results: multiprocessing.Queue[tuple[int, int]]) -> None:
    done = failed = 0
    with Queue(path, retry_backoff=0) as q:
        while True:
            try:
                record = q.get(timeout=0.5)
            except Exception:
                break
            n = record.payload["n"]
            if n % 997 == 0 and record.retries == 0:
                record.nack(RuntimeError(f"flaky failure on {n}"))  # retried once, then succeeds
                failed += 1
                continue
            record.ack(result=n * n)
            done += 1
    results.put((done, failed))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--path", default=None, help="store directory (default: a temporary one)")
    args = parser.parse_args(argv)
    path = args.path or tempfile.mkdtemp(prefix="queue-max-demo-")
    ctx = multiprocessing.get_context("spawn")  # never fork a process that has a store open
    with Queue(path) as q:
        print(f"store: {q.path} ({q.shard_count} shards)")
    started = time.perf_counter()
    producers = [
        ctx.Process(target=_produce, args=(path, i * args.jobs // 2, args.jobs // 2)) for i in range(2)
    ]
    results: multiprocessing.Queue[tuple[int, int]] = ctx.Queue()
    workers = [ctx.Process(target=_work, args=(path, results)) for _ in range(args.workers)]
    for process in producers + workers:
        process.start()
    for process in producers:
        process.join()
    totals = [results.get() for _ in workers]
    for process in workers:
        process.join()
    elapsed = time.perf_counter() - started
    done = sum(t[0] for t in totals)
    retried = sum(t[1] for t in totals)
    print(
        f"2 producers, {args.workers} worker processes: {done:,} jobs acked in {elapsed:.2f} s "
        f"({done / elapsed:,.0f} jobs/s, spawn included); {retried} flaky attempts retried"
    )
    with Queue(path) as q:
        stats = q.stats()
        print("stats():", stats)
        problems = q.verify()
        print("verify():", "consistent" if not problems else problems[:10])
        if stats["done"] != args.jobs // 2 * 2 or problems:
            raise SystemExit("the demo did not finish every job cleanly")


if __name__ == "__main__":
    main()
