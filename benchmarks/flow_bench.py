"""Flow-control benchmarks (issue 3): what limits and breakers cost, and whether a shared limit holds.

    uv run python benchmarks/flow_bench.py [--quick] [--json PATH]

1. overhead: the put + get + ack round trip of one job at a time, on a plain store and on a store with an
   "unlimited" store-wide limit ("10000000/s") and a closed store-wide breaker; interleaved rounds, medians;
   target: at most 10 % slower.
2. shared: a limit of 1,000/s (burst 100) held by 2 processes that call ``try_acquire`` in a tight loop for
   10 s; target: the grants land between 10,000 and 10,000 + burst (rate x time + burst, measured from the
   first to the last acquisition).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from queue_max_django.engine import Queue


def round_trips(path: str, jobs: int, flow: bool) -> float:
    """Median µs of one put + get + ack."""
    shutil.rmtree(path, ignore_errors=True)
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        if flow:
            q.set_rate_limit("*", "10000000/s")
            q.set_circuit_breaker("*", threshold=5, recovery_timeout=60)
        for n in range(200):  # warm up
            q.put(n)
            q.get(0).ack()
        samples = []
        clock = time.perf_counter
        for n in range(jobs):
            start = clock()
            q.put(n)
            q.get(0).ack()
            samples.append(clock() - start)
        if flow:
            assert q.circuit_breakers()["*"]["state"] == "closed"
    shutil.rmtree(path, ignore_errors=True)
    return statistics.median(samples) * 1e6


def _acquirer(path: str, seconds: float, start_at: float, out: Any) -> None:
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        while time.time() < start_at:
            time.sleep(0.0005)
        granted = 0
        first = last = None
        stop = start_at + seconds
        while True:
            now = time.time()
            if now >= stop:
                break
            if q.try_acquire("shared"):
                granted += 1
                last = time.time()
                if first is None:
                    first = now
        out.put((granted, first, last))


def shared_limit(path: str, rate: int, burst: int, seconds: float, processes: int) -> dict[str, Any]:
    shutil.rmtree(path, ignore_errors=True)
    with Queue(path) as q:
        q.set_rate_limit("shared", (rate, 1), burst=burst)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2.0  # every child is up and waiting before the clock starts
    children = [ctx.Process(target=_acquirer, args=(path, seconds, start_at, out)) for _ in range(processes)]
    for child in children:
        child.start()
    results = [out.get(timeout=seconds + 60) for _ in children]
    for child in children:
        child.join(timeout=30)
    granted = sum(r[0] for r in results)
    firsts = [r[1] for r in results if r[1] is not None]
    lasts = [r[2] for r in results if r[2] is not None]
    span = max(lasts) - min(firsts)
    bound = rate * span + burst
    shutil.rmtree(path, ignore_errors=True)
    return {
        "rate": rate,
        "burst": burst,
        "processes": processes,
        "seconds": seconds,
        "granted": granted,
        "span_s": span,
        "allowed_max": bound,
        "per_process": [r[0] for r in results],
        "within_bound": granted <= bound,
        "in_target_range": rate * seconds <= granted <= rate * seconds + burst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--json", default=None, help="write the raw results here")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="queue-max-flow-bench-")
    jobs = 2_000 if args.quick else 10_000
    rounds = 3 if args.quick else 7
    plain: list[float] = []
    flow: list[float] = []
    for _ in range(rounds):  # interleaved, so load on the machine hits both alike
        plain.append(round_trips(os.path.join(base, "plain"), jobs, flow=False))
        flow.append(round_trips(os.path.join(base, "flow"), jobs, flow=True))
    overhead = statistics.median(flow) / statistics.median(plain) - 1
    print(
        f"round trip, plain store:                        median {statistics.median(plain):7.1f} µs  {plain}"
    )
    print(f"round trip, unlimited limit + closed breaker:   median {statistics.median(flow):7.1f} µs  {flow}")
    print(f"overhead: {overhead * 100:+.1f} % (target <= +10 %)")
    seconds = 2.0 if args.quick else 10.0
    shared = shared_limit(os.path.join(base, "shared"), 1000, 100, seconds, 2)
    print(
        f"limit 1000/s burst 100, 2 processes, {seconds:.0f} s: granted {shared['granted']} "
        f"(per process {shared['per_process']}); rate x span + burst = {shared['allowed_max']:.0f}; "
        f"target range [{1000 * seconds:.0f}, {1000 * seconds + 100:.0f}]: "
        f"{'met' if shared['in_target_range'] else 'NOT met'}"
    )
    shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "round_trip_us": {"plain": plain, "flow": flow, "overhead": overhead},
                    "shared_limit": shared,
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
