"""What finding a job by tag costs on a deep store: ``--jobs`` jobs stored (1,000,000 by default, put with
``put_many`` in batches of 10,000, every one tagged ``batch:B`` for its batch), among them ``--rare`` jobs
(10) of a tag of their own, spread over the store's life. Then it times:

- ``Queue.tagged("rare")``: the rare tag's jobs through the store's tag index (the median of ``--rounds``);
- ``Queue.tagged("rare", state="pending", queue="q1")``: the same with the listing's filters;
- a page of a common tag (``batch:B`` of the middle batch, 10,000 jobs: the first 50);
- what the same search costs without the index: a walk of the pending jobs (``Queue.jobs`` pages of 500, as
  the admin's search scans) testing each job's tags, once, up to ``--scan-limit`` jobs (100,000: the admin's
  ``SCAN_LIMIT``; 0: no walk), with its rate per 1,000,000 jobs.

    uv run python benchmarks/tag_search_bench.py --store lmdb
    uv run python benchmarks/tag_search_bench.py --store memory
    uv run python benchmarks/tag_search_bench.py --store postgresql://postgres@127.0.0.1:5432/qm_bench

``--put-cost N`` times what tags add to a put instead (``put_many`` of N jobs a round, batches of 100: with
two tags, with metadata and no tags, with neither; rounds alternate).

A PostgreSQL database must exist and be a scratch one: its queue_max tables are dropped first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from queue_max_django.engine import Queue, State

BATCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store", default="lmdb", help="lmdb, memory, or a PostgreSQL URL (a scratch database)"
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rare", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument(
        "--put-cost",
        type=int,
        default=0,
        metavar="N",
        help="instead: time put_many of N jobs (batches of 100) with 2 tags, with metadata but no tags, and "
        "with neither, in alternating rounds (--rounds), and print each mode's median",
    )
    parser.add_argument(
        "--scan-limit", type=int, default=100_000, help="jobs the walk without the index examines at most"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.store == "lmdb":
            where: Any = Path(folder) / "queue_max_data"
            options: dict[str, Any] = {"writemap": True}
        elif args.store == "memory":
            where, options = "memory://tag-bench", {}
        else:
            where, options = args.store, {}
            _scratch(args.store)
        with Queue(where, do_recover=False, do_vacuum=False, **options) as q:
            put_cost(q, args) if args.put_cost else run(q, args)


def _scratch(url: str) -> None:
    import psycopg

    from queue_max_django.engine.stores.postgres import schema

    with psycopg.connect(url, autocommit=True) as conn:
        schema.drop(conn)
        schema.create(conn)


def run(q: Queue, args: argparse.Namespace) -> None:
    began = time.perf_counter()
    batches = max(1, args.jobs // BATCH)
    rare_every = max(1, batches // args.rare)
    rare_ids: list[int] = []
    for b in range(batches):
        size = min(BATCH, args.jobs - b * BATCH)
        q.put_many([{"n": n} for n in range(size)], queue=f"q{b % 3}", metadata={"_tags": [f"batch:{b}"]})
        if b % rare_every == 0 and len(rare_ids) < args.rare:
            rare_ids += q.put_many([{"rare": b}], queue="q1", metadata={"_tags": ["rare", f"batch:{b}"]})
    fill = time.perf_counter() - began
    total = q.stats()["total"]
    print(f"store {args.store}: {total:,} jobs put in {fill:.1f} s")

    def timed(label: str, call: Any, expect: int | None = None) -> None:
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            found = call()
            times.append((time.perf_counter() - start) * 1000)
            if expect is not None:
                assert len(found) == expect, (label, len(found))
        median = statistics.median(times)
        print(f"  {label}: median {median:.3f} ms (min {min(times):.3f}, {args.rounds} rounds)")

    timed(f"tagged('rare') -> {len(rare_ids)} jobs", lambda: q.tagged("rare"), len(rare_ids))
    timed("tagged('rare', state=pending, queue=q1)", lambda: q.tagged("rare", state="pending", queue="q1"),
          len(rare_ids))  # fmt: skip
    common = f"batch:{batches // 2}"
    timed(f"tagged({common!r}): a page (50) of a 10,000-job tag", lambda: q.tagged(common), 50)
    timed("tagged('nothing') -> 0 jobs", lambda: q.tagged("nothing"), 0)
    if not args.scan_limit:
        return
    start = time.perf_counter()
    found, examined, after = 0, 0, None
    while True:
        page = q.jobs(State.PENDING, after=after, limit=500)
        for job in page:
            examined += 1
            found += "rare" in job.tags
        if len(page) < 500 or examined >= args.scan_limit:
            break
        after = page[-1].job_id
    scan = time.perf_counter() - start
    rate = scan / examined * 1_000_000
    print(f"  without the index: a walk of {examined:,} pending jobs finds {found}: {scan * 1000:,.0f} ms "
          f"({rate:.1f} s per 1,000,000 jobs walked)")  # fmt: skip


def put_cost(q: Queue, args: argparse.Namespace) -> None:
    """µs per job of ``put_many`` (batches of 100) in three modes, rounds alternating; the median of each."""
    modes: dict[str, dict[str, Any] | None] = {
        "no metadata": None,
        "metadata, no tags": {"order": 42},
        "2 tags": {"_tags": ["order:42", "tenant:acme"]},
    }
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode, metadata in modes.items():
            start = time.perf_counter()
            for _batch in range(args.put_cost // 100):
                q.put_many([{"n": n} for n in range(100)], metadata=metadata)
            times[mode].append((time.perf_counter() - start) / args.put_cost * 1e6)
    for mode, values in times.items():
        print(f"  put_many(100) {mode}: median {statistics.median(values):.1f} µs/job ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
