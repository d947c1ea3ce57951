"""CPU per job of the claim and the acknowledgement of limited jobs, in one process, no worker: a loop of
``Queue.get_many(64)`` and ``Queue.ack_many`` drains N no-op jobs of each mode of ``limits_bench.py``
(``none``, ``task``, ``keyed``, ``unique``) from a fresh LMDB store, timed by the process's CPU clock
(``time.process_time``), claim and ack apart. Each measurement runs in a child process of the checkout given
(``--root``, again for another: they alternate, mode by mode, round by round), so two versions of the engine
compare side by side. CPU time is steadier than a rate on a shared machine.

    uv run --group bench python benchmarks/limits_cpu.py --n 20000 --rounds 5
    uv run --group bench python benchmarks/limits_cpu.py --root . --root /tmp/main --rounds 5
    uv run --group bench python benchmarks/limits_cpu.py --profile keyed  # a cProfile of one drain, here
    uv run --group bench python benchmarks/limits_cpu.py --worker --profile task  # of a worker's run()

``--worker``: the drain is a worker process's ``run()`` in burst mode (``queue_worker``'s, one process, its
default threads), in the child; its CPU includes the worker's own start and end (the same for each mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from limits_bench import LIMIT, MODES, prefill, ratios, spread  # noqa: E402

BATCH = 64  # what a worker process claims at once for no-op jobs (worker/process.py's BATCH_MAX)

WORKER = """
import cProfile, json, os, pstats, sys, time
sys.path.insert(0, {root!r})
sys.path.insert(1, {here!r})
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_project.settings"
os.environ["BENCH_DIR"] = {folder!r}
import django
django.setup()
from queue_max_django import conf
from queue_max_django.worker import process
from queue_max_django.worker.options import WorkerOptions
queue = conf.get_queue()
worker = process.WorkerProcess(queue, WorkerOptions(processes=1, burst=True, scheduler=False, verbosity=0), 0)
profiler = cProfile.Profile() if {profile!r} else None
began = time.process_time()
if profiler:
    profiler.enable()
worker.run()
if profiler:
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
used = time.process_time() - began
waited = sum(shard.env.waited_writes for shard in getattr(queue._store, "_shards", ()))
print(f"  (a child: {{waited}} write transactions waited for another writer)", file=sys.stderr)
print(json.dumps([queue.stats()["done"], used, 0.0]))
"""

CHILD = """
import cProfile, json, pstats, sys, time
sys.path.insert(0, {root!r})
from queue_max_django.engine import Queue, QueueEmpty
profile = {profile!r}
with Queue({where!r}, do_recover=False, do_vacuum=False) as q:
    claim = ack = 0.0
    done = 0
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    while True:
        began = time.process_time()
        try:
            records = q.get_many({batch}, timeout=0)
        except QueueEmpty:
            break
        middle = time.process_time()
        q.ack_many([(record, None) for record in records])
        claim += middle - began
        ack += time.process_time() - middle
        done += len(records)
    if profiler:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(35)
print(json.dumps([done, claim, ack]))
"""


def measure(
    root: Path, mode: str, n: int, limit: int, profile: bool = False, worker: bool = False, processes: int = 1
) -> tuple[float, float]:
    """A fresh store of ``n`` jobs of ``mode``, drained by ``processes`` child processes of ``root``'s engine
    at once (the first one profiled, with ``profile``). -> (claim, ack) CPU µs per job, summed over the
    children (``worker``: each child's whole CPU, as claim, and 0)."""
    with tempfile.TemporaryDirectory(prefix="qm-limits-cpu-") as folder:
        where = str(Path(folder) / "store")
        prefill(root, where, mode, n, limit)
        children = []
        for index in range(processes):
            profiled = profile and index == 0
            if worker:
                code = WORKER.format(root=str(root), here=str(HERE.parent), folder=folder, profile=profiled)
            else:
                code = CHILD.format(root=str(root), where=where, batch=BATCH, profile=profiled)
            children.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True))
        outs = [child.communicate()[0] for child in children]
        if any(child.returncode for child in children):
            raise RuntimeError(f"a child exited with {[child.returncode for child in children]}")
    results = [json.loads(out) for out in outs]
    done = max(r[0] for r in results) if worker else sum(r[0] for r in results)
    if done != n:
        raise RuntimeError(f"{done} done of {n}")
    return sum(r[1] for r in results) / n * 1e6, sum(r[2] for r in results) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--root", type=Path, action="append", help="a checkout (give more: they alternate)")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"the limit's size (default {LIMIT})")
    parser.add_argument("--profile", choices=MODES, help="print a cProfile of one drain of this mode, only")
    parser.add_argument("--worker", action="store_true", help="drain by a worker process's run() in each "
                        "child (its whole CPU, not claim and ack apart)")  # fmt: skip
    parser.add_argument("--processes", type=int, default=1, help="children draining at once (default 1)")
    args = parser.parse_args()
    roots = [root.resolve() for root in (args.root or [HERE.parent])]
    if args.profile:
        claim, ack = measure(roots[0], args.profile, args.n, args.limit, profile=True, worker=args.worker,
                             processes=args.processes)  # fmt: skip
        print(f"{args.profile}: claim {claim:.1f} µs/job, ack {ack:.1f} µs/job (under the profiler)")
        return
    modes = args.modes.split(",")
    names = [f"{index}:{root.name}" for index, root in enumerate(roots)]
    pairs = list(zip(names, roots, strict=True))
    totals: dict[tuple[str, str], list[float]] = {(name, mode): [] for name in names for mode in modes}
    parts: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in totals}
    for index in range(args.rounds):
        for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
            shift = index % len(pairs)
            for name, root in pairs[shift:] + pairs[:shift]:
                claim, ack = measure(root, mode, args.n, args.limit, worker=args.worker,
                                     processes=args.processes)  # fmt: skip
                totals[name, mode].append(claim + ack)
                parts[name, mode].append((claim, ack))
                print(f"round {index + 1} {name} {mode:6} claim {claim:6.1f} + ack {ack:6.1f} µs/job",
                      flush=True)  # fmt: skip
    print()
    for name in names:
        print(name)
        for mode in modes:
            values = totals[name, mode]
            claim = statistics.median(part[0] for part in parts[name, mode])
            ack = statistics.median(part[1] for part in parts[name, mode])
            line = f"  {mode:6} {statistics.median(values):6.1f} µs/job (claim {claim:.1f}, ack {ack:.1f})"
            if mode != "none" and "none" in modes:
                nones = totals[name, "none"]
                line += (f"  vs none {statistics.median(values) / statistics.median(nones):.2f}x "
                         f"(rounds {spread(ratios(values, nones))})")  # fmt: skip
            print(line)
    if len(names) >= 2:
        for mode in modes:
            a, b = totals[names[0], mode], totals[names[1], mode]
            print(f"{mode:6} {names[0]} / {names[1]}: {statistics.median(a) / statistics.median(b):.2f}x "
                  f"(rounds {spread(ratios(a, b))})")  # fmt: skip


if __name__ == "__main__":
    main()
