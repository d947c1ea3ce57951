"""How long ``Queue.queue_counts()`` (the admin dashboard's and ``queue_stats``' per-queue table) takes on a
deep store: ``--jobs`` waiting jobs spread over ``--queues`` queues, plus 100 scheduled ones.

    uv run python benchmarks/queue_counts_bench.py                  # 1,000,000 jobs, ~30 s to fill
    PYTHONPATH=/tmp/orig uv run python benchmarks/queue_counts_bench.py   # another checkout's engine
    uv run python benchmarks/queue_counts_bench.py --command 7 --checkout . --checkout /tmp/orig

Prints the time of the first call and of a second one, in milliseconds, and the pending total it saw.

``--command N`` also times the whole ``manage.py queue_stats`` of the example project on that store, N runs
per checkout (``--checkout``, repeatable: their runs alternate, so that a machine whose load wanders treats
them alike), from launch to exit, and prints each checkout's median wall time and CPU time (user + system:
on a machine that others share, the steadier of the two). The runs have a bytecode cache of their
own (``PYTHONPYCACHEPREFIX``, filled by an untimed run), as a deployed project has its ``.pyc`` files;
``--no-pyc-cache`` runs them with the environment as it is.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from queue_max_django.engine import Queue

BATCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=5)
    parser.add_argument("--command", type=int, default=0, metavar="N", help="time queue_stats N times")
    parser.add_argument("--checkout", action="append", help="the checkout whose queue_stats runs")
    parser.add_argument("--no-pyc-cache", action="store_true", help="no bytecode cache of the runs' own")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        fill_and_count(args, Path(state) / "queue_max_data")
        if args.command:
            time_command(args, Path(state))


def fill_and_count(args: argparse.Namespace, folder: Path) -> None:
    with Queue(folder, do_recover=False, do_vacuum=False, writemap=True) as q:
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


def time_command(args: argparse.Namespace, state: Path) -> None:
    """``manage.py queue_stats`` of the example project on the store in ``state``, launch to exit."""
    checkouts = [Path(c).resolve() for c in args.checkout or [Path(__file__).resolve().parents[1]]]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "example_site.settings", "EXAMPLE_STATE_DIR": str(state)}
    env.pop("EXAMPLE_POSTGRES_URL", None)
    if not args.no_pyc_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(state / "pycache")
    seconds: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
    cpu: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
    for run in range(args.command + 1):  # run 0 fills the bytecode cache: untimed
        for checkout in checkouts:
            began, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [sys.executable, str(checkout / "example_project" / "manage.py"), "queue_stats"],
                cwd=checkout, check=True, stdout=subprocess.DEVNULL,
                env={**env, "PYTHONPATH": f"{checkout}{os.pathsep}{checkout / 'example_project'}"},
            )  # fmt: skip
            if run:
                seconds[checkout].append(time.perf_counter() - began)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[checkout].append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
    for checkout, times in seconds.items():
        print(f"manage.py queue_stats ({checkout}): median {statistics.median(times):.3f} s wall "
              f"(min {min(times):.3f}, max {max(times):.3f}), {statistics.median(cpu[checkout]):.3f} s CPU "
              f"(min {min(cpu[checkout]):.3f}); {len(times)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
