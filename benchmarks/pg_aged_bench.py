"""Does the PostgreSQL store stay fast when it is old? Claims on a young store against claims on one that
holds 1,000,000 finished jobs and 100,000 dead letters, and a deep queue against a shallow one on each.

    uv run python benchmarks/pg_aged_bench.py --url postgresql://postgres@127.0.0.1:5432/test
    uv run python benchmarks/pg_aged_bench.py --url ... --finished 100000 --dead 10000 --deep 100000   # quick

Two scratch databases are made next to the one ``--url`` names (``<name>_young`` and ``<name>_aged``; dropped
and made again, the queue_max schema in each). The aged one is aged through the engine, as a worker would:
``--finished`` jobs put (``put_many``), claimed and acknowledged (``get_many`` + ``ack_many``), and ``--dead``
jobs claimed and failed for good (``nack(permanent=True)``, from 8 threads), so that every row, index entry,
counter and dead tuple is the engine's own. Then, for ``--rounds`` rounds, each database in turn (the order
alternating between rounds, so that neither always runs second on a machine that other work shares):

- shallow: ``--drain`` jobs drained in rounds of (``put_many`` 1,000, drain them): at most 1,000 wait;
- deep: ``--deep`` jobs put (untimed), then the first ``--drain`` of them drained; the rest are purged
  (``purge(PENDING)``) and the hot table vacuumed (``VACUUM qm_jobs``, what autovacuum does on its own time)
  so that each round starts alike.

A drain is ``get_many(100)`` + ``ack_many``, the worker's claim and acknowledgement. The store's maintenance
thread is off (``do_vacuum=False``), so that no finished job is purged during the run. It prints each
drain's jobs/s, the medians, the ratios (aged / young and deep / shallow; the targets are >= 0.9) and the
size of the tables. docs/benchmarks.md has the figures and the machine.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from benchmarks import runstore
from queue_max_django.engine import Queue, QueueEmpty, State

BATCH = 100
SHALLOW = 1_000
DEAD_THREADS = 8


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="a server: two scratch databases are made beside it")
    parser.add_argument("--finished", type=int, default=1_000_000, help="done jobs in the aged store")
    parser.add_argument("--dead", type=int, default=100_000, help="dead letters in the aged store")
    parser.add_argument("--deep", type=int, default=1_000_000, help="jobs waiting in the deep queue")
    parser.add_argument("--drain", type=int, default=100_000, help="jobs drained by each measurement")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    urls = {kind: scratch_database(args.url, kind) for kind in ("young", "aged")}
    print(f"server: {server_settings(urls['young'])}")
    started = time.perf_counter()
    age(urls["aged"], finished=args.finished, dead=args.dead)
    print(f"aged the store in {time.perf_counter() - started:.0f} s: {table_sizes(urls['aged'])}")

    rates: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        kinds = ("young", "aged") if round_ % 2 == 0 else ("aged", "young")
        for kind in kinds:
            with Queue(urls[kind], do_recover=False, do_vacuum=False) as queue:
                for depth, measure in (("shallow", shallow_drain), ("deep", deep_drain)):
                    rate = measure(queue, args)
                    rates.setdefault((kind, depth), []).append(rate)
                    print(f"round {round_ + 1}  {kind:5}  {depth:7}  {rate:>9,.0f} jobs/s", flush=True)
            vacuum_hot_table(urls[kind])

    median = {key: statistics.median(values) for key, values in rates.items()}
    print("\nmedians, jobs/s (get_many(100) + ack_many)")
    for (kind, depth), value in sorted(median.items()):
        print(f"  {kind:5}  {depth:7}  {value:>9,.0f}")
    print("ratios (targets >= 0.90)")
    for depth in ("shallow", "deep"):
        print(f"  aged / young, {depth:7}  {median['aged', depth] / median['young', depth]:.2f}x")
    for kind in ("young", "aged"):
        print(f"  deep / shallow, {kind:5}  {median[kind, 'deep'] / median[kind, 'shallow']:.2f}x")
    for kind, url in urls.items():
        print(f"tables after the run, {kind}: {table_sizes(url)}")


# ---------------------------------------------------------------------------------------------- the store


def scratch_database(url: str, kind: str) -> str:
    """A new database ``<name>_<kind>`` on the server of ``url``, with the queue_max schema. -> its URL."""
    return runstore.scratch_database(url, f"{conninfo_to_dict(url).get('dbname') or 'postgres'}_{kind}")


def age(url: str, *, finished: int, dead: int) -> None:
    """``finished`` done jobs and ``dead`` dead letters, made by the engine's own operations."""
    with Queue(url, do_recover=False, do_vacuum=False, max_retries=0) as queue:
        for start in range(0, finished, 10_000):
            count = min(10_000, finished - start)
            for offset in range(0, count, BATCH):
                queue.put_many([{"n": start + offset + i} for i in range(min(BATCH, count - offset))])
            drain(queue, count)
        for start in range(0, dead, BATCH):
            queue.put_many([{"dead": start + i} for i in range(min(BATCH, dead - start))], queue="dead")

        def fail_some() -> None:
            while True:
                try:
                    records = queue.get_many(BATCH, timeout=0, queues=["dead"])
                except QueueEmpty:
                    return
                for record in records:
                    record.nack(RuntimeError("aged on purpose"), permanent=True)

        threads = [threading.Thread(target=fail_some) for _ in range(DEAD_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = queue.stats()
    assert (stats["done"], stats["failed"], stats["pending"]) == (finished, dead, 0), stats


def drain(queue: Queue, count: int) -> None:
    """Claim and acknowledge ``count`` jobs, as the worker does."""
    done = 0
    while done < count:
        records = queue.get_many(min(BATCH, count - done), timeout=0)
        assert records, f"the queue ran dry after {done} of {count}"
        queue.ack_many([(record, None) for record in records])
        done += len(records)


def shallow_drain(queue: Queue, args: argparse.Namespace) -> float:
    """jobs/s of draining ``--drain`` jobs in rounds of (fill 1,000, drain them), the drains alone timed."""
    seconds = 0.0
    for start in range(0, args.drain, SHALLOW):
        count = min(SHALLOW, args.drain - start)
        fill(queue, count)
        started = time.perf_counter()
        drain(queue, count)
        seconds += time.perf_counter() - started
    return args.drain / seconds


def deep_drain(queue: Queue, args: argparse.Namespace) -> float:
    """jobs/s of draining the first ``--drain`` of ``--deep`` waiting jobs; the rest purged after."""
    fill(queue, args.deep)
    rate = args.drain / timed(lambda: drain(queue, args.drain))
    queue.purge(State.PENDING)
    return rate


def fill(queue: Queue, count: int) -> None:
    for start in range(0, count, BATCH):
        queue.put_many([{"n": start + i} for i in range(min(BATCH, count - start))])


def timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- the server


def vacuum_hot_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) qm_jobs")


def server_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            name: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0])  # type: ignore[index]
            for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers")
        }


def table_sizes(url: str) -> str:
    """Each big table's rows and size (the table and its indexes together)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = [
            conn.execute(
                sql.SQL("SELECT count(*), pg_total_relation_size({}) FROM {}").format(
                    sql.Literal(name), sql.Identifier(name)
                )
            ).fetchone()
            for name in ("qm_jobs", "qm_finished")
        ]
    return ", ".join(
        f"{name} {row[0]:,} rows {row[1] / 2**20:,.1f} MiB"
        for name, row in zip(("qm_jobs", "qm_finished"), rows, strict=True)
        if row is not None
    )


if __name__ == "__main__":
    main()
