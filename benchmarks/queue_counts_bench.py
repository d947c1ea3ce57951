"""How long ``Queue.queue_counts()`` (the admin dashboard's and ``queue_stats``' per-queue table) takes on a
deep store: ``--jobs`` waiting jobs spread over ``--queues`` queues, plus 100 scheduled ones.

    uv run python benchmarks/queue_counts_bench.py                  # 1,000,000 jobs, ~30 s to fill
    PYTHONPATH=/tmp/orig uv run python benchmarks/queue_counts_bench.py   # another checkout's engine

Prints the time of the first call and of a second one, in milliseconds, and the pending total it saw.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from queue_max_django.engine import Queue

BATCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, Queue(folder, do_recover=False, do_vacuum=False,
                                                         writemap=True) as q:  # fmt: skip
        for start in range(0, args.jobs, BATCH):
            size = min(BATCH, args.jobs - start)
            q.put_many([{"n": n} for n in range(size)], queue=f"q{(start // BATCH) % args.queues}")
        q.put_many([{"n": n} for n in range(100)], delay=3600)
        timings = []
        for _ in range(2):
            began = time.perf_counter()
            counts = q.queue_counts()
            timings.append((time.perf_counter() - began) * 1000)
        pending = sum(c["pending"] for c in counts.values())
        print(f"{args.jobs:,} waiting in {args.queues} queues (+100 scheduled): queue_counts() "
              f"{timings[0]:.2f} ms first, {timings[1]:.2f} ms again; pending seen {pending:,}")  # fmt: skip


if __name__ == "__main__":
    main()
