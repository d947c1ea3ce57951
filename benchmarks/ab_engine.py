"""A/B of the engine between two checkouts, and lmdb-queue, on one small workload: short alternating rounds.

    uv run --group bench python benchmarks/ab_engine.py --base /tmp/base --op put
    uv run --group bench python benchmarks/ab_engine.py --base /tmp/base --op roundtrip --rounds 20 --n 1000

``--base`` is another checkout of this repository (``git worktree add /tmp/base <commit>``); the engine of
this checkout is "new". Each side runs in its own persistent child process (one store each, writemap mode
unless ``--mode default``,
lmdb-queue in its default mode), and the parent asks each in turn for one round of ``--n`` operations, in a
rotating order. Rounds last tens of milliseconds, so sides measured in the same round see the same machine:
on a machine whose speed wanders by 30% from one second to the next (see docs/benchmarks.md), the median of
same-round ratios separates a 5% change from noise where full runs of engine_bench.py cannot.

Printed: the median µs per operation of each side, and the medians of the same-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
kind, op, n, writemap = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "writemap"
if kind == "lmdb-queue":
    import equeue
    q = equeue.Queue(tempfile.mkdtemp())
    get = lambda: q.get(timeout=5)
    put_many = lambda items: [q.put(item) for item in items]  # it has no batch put
else:
    from queue_max_django.engine import Queue
    q = Queue(tempfile.mkdtemp(), writemap=writemap)
    get = lambda: q.get(5)
    put_many = q.put_many
clock = time.perf_counter
done = 0
for _line in sys.stdin:
    items = [{"n": done + i, "to": "user@example.com"} for i in range(n)]
    if op == "put":
        put = q.put
        start = clock()
        for item in items:
            put(item)
        per_op = (clock() - start) / n
    elif op == "put_many":
        batches = [items[i : i + 100] for i in range(0, n, 100)]
        start = clock()
        for batch in batches:
            put_many(batch)
        per_op = (clock() - start) / n
    else:  # roundtrip: the median of n put + get + ack
        samples = []
        for item in items:
            start = clock()
            q.put(item)
            get().ack()
            samples.append(clock() - start)
        per_op = statistics.median(samples)
    done += n
    print(json.dumps(per_op * 1e6), flush=True)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="another checkout of this repository: the 'base' side")
    parser.add_argument("--op", choices=["put", "put_many", "roundtrip"], default="put")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--n", type=int, default=3000, help="operations per round and side")
    parser.add_argument(
        "--mode",
        choices=["writemap", "default"],
        default="writemap",
        help="our mode (lmdb-queue: its default)",
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(os.path.join(args.base, "queue_max_django")):
        parser.error(f"--base {args.base!r} is not a checkout of this repository")
    sides = [("base", args.base, "ours"), ("new", HERE, "ours"), ("lmdb-queue", HERE, "lmdb-queue")]
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD, path, kind, args.op, str(args.n), args.mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, path, kind in sides
    }
    results: dict[str, list[float]] = {name: [] for name, _path, _kind in sides}
    try:
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            for name, _path, _kind in sides[shift:] + sides[:shift]:
                child = children[name]
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write("go\n")
                child.stdin.flush()
                results[name].append(json.loads(child.stdout.readline()))
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait(30)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(results[a], results[b], strict=True))

    print(f"{args.op}: median µs per operation, {args.rounds} rounds of {args.n}, our {args.mode} mode")
    for name, values in results.items():
        print(f"  {name:10s} {statistics.median(values):8.1f}")
    print(f"  new is {ratio('base', 'new'):.2f}x as fast as base (same-round ratios, median)")
    versus = ratio("lmdb-queue", "new"), ratio("lmdb-queue", "base")
    print(f"  new is {versus[0]:.2f}x as fast as lmdb-queue; base {versus[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
