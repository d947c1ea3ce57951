"""The PostgreSQL store's own throughput, by workload: one process, one database, the engine's Queue.

    uv run python benchmarks/pg_store_bench.py --url postgresql://postgres@127.0.0.1:5432/test
    uv run python benchmarks/pg_store_bench.py --url ... --jobs 100000 --batch 100

The database's queue_max tables are dropped and created again first: point it at a scratch database. Each
workload is sized by ``--jobs`` (100,000 by default, so that start-up is not what it measures) and prints
jobs per second:

- put: one ``put()`` per job, each its own transaction (a commit each: bounded by the server's
  ``synchronous_commit``, printed with the results);
- put_many: ``put_many`` of ``--batch`` jobs per transaction;
- claim+ack batched: ``get_many(--batch)`` and ``ack_many`` of them, as the worker does;
- claim+ack one by one: ``get()`` and ``ack()`` per job (a tenth of ``--jobs``).

This measures the store alone; docs/benchmarks.md has the figures, the machine, and what they mean next to
the LMDB store's. Comparisons with other PostgreSQL queues in one run are issue 17's benchmark.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.postgres import schema


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="a scratch database: its queue_max tables are dropped")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with psycopg.connect(args.url, autocommit=True) as conn:
        schema.drop(conn)
        schema.create(conn)
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("server_version", "synchronous_commit", "fsync")}  # fmt: skip
    print(f"server: {settings}")
    n, batch = args.jobs, args.batch
    with Queue(args.url, do_recover=False, do_vacuum=False) as q:
        few = max(n // 10, 1)
        started = time.perf_counter()
        for i in range(few):
            q.put(i)
        report("put", few, started)

        started = time.perf_counter()
        for start in range(0, n, batch):
            q.put_many(list(range(start, min(start + batch, n))))
        report(f"put_many({batch})", n, started)

        started = time.perf_counter()
        done = 0
        while done < n:
            records = q.get_many(batch, timeout=0)
            q.ack_many([(record, None) for record in records])
            done += len(records)
        report(f"claim+ack batched ({batch})", done, started)

        started = time.perf_counter()
        for _ in range(few):
            q.get(timeout=0).ack(None)
        report("claim+ack one by one", few, started)
        assert q.stats()["pending"] == 0


def report(what: str, count: int, started: float) -> None:
    seconds = time.perf_counter() - started
    print(f"{what:28} {count:>8} jobs  {count / seconds:>9,.0f} jobs/s")


if __name__ == "__main__":
    main()
