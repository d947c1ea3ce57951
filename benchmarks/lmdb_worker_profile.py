"""Profile one worker process on the LMDB store: ``WorkerProcess.run()`` in burst mode (1 thread, as
``queue_worker``'s default), in this process, draining N prefilled no-op jobs from a fresh store in a
temporary directory (the benchmark project's settings: ``benchmarks/bench_project``).

Three modes:

- default: under cProfile; prints the drain rate, then the profile sorted by cumulative and by own time;
- ``--no-profile``: the drain rate and this process's CPU per job (user + system, ``os.times()``), and how
  much of its life the worker thread was on a CPU, and runnable but waiting for one (its
  ``/proc/thread-self/schedstat``, read in the thread); the rest it was asleep (a wait, a system call);
- ``--phases``: the worker thread's time per job in each phase of its loop (claim, run, acknowledge),
  measured with ``time.thread_time()`` (its CPU) and ``time.perf_counter()`` (its wall time) around the
  three calls, by wrapping them in this process only.

    uv run --group bench python benchmarks/lmdb_worker_profile.py --jobs 50000
    uv run --group bench python benchmarks/lmdb_worker_profile.py --jobs 100000 --no-profile
    uv run --group bench python benchmarks/lmdb_worker_profile.py --jobs 100000 --phases
    uv run --group bench python benchmarks/lmdb_worker_profile.py --jobs 100000 --phases --batch-max 256
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASK = "benchmarks.bench_project.bench_app.tasks.noop"


def schedstat() -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of the calling thread so far."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as file:
            fields = file.read().split()
    except OSError:
        return 0.0, 0.0
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


class ThreadSched:
    """The worker thread's ``schedstat`` over its life (read in the thread itself, before it ends)."""

    def __init__(self) -> None:
        self.on = self.waited = self.wall = 0.0

    def wrap(self, worker: Any) -> None:
        original = worker._work

        def work(number: int) -> None:
            on, waited = schedstat()
            wall = time.perf_counter()
            try:
                original(number)
            finally:
                on_after, waited_after = schedstat()
                self.on += on_after - on
                self.waited += waited_after - waited
                self.wall += time.perf_counter() - wall

        worker._work = work


class Phases:
    """Thread CPU and wall seconds spent inside wrapped calls, per phase name."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.cpu[phase] = self.cpu.get(phase, 0.0) + time.thread_time() - cpu
                self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - wall

        setattr(owner, attribute, timed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--no-profile", action="store_true", help="time the drain, CPU per job")
    parser.add_argument("--phases", action="store_true", help="CPU and wall time per phase of the loop")
    parser.add_argument("--top", type=int, default=45, help="lines of each profile listing")
    parser.add_argument("--batch-max", type=int, help="the worker's BATCH_MAX (default: its own)")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="qm-lmdb-profile-")
    os.environ["BENCH_DIR"] = folder
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_project.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from queue_max_django import conf
    from queue_max_django.worker import process
    from queue_max_django.worker.acks import Batch
    from queue_max_django.worker.options import WorkerOptions

    if args.batch_max:
        process.BATCH_MAX = args.batch_max
    queue = conf.get_queue()
    for start in range(0, args.jobs, 10_000):
        count = min(10_000, args.jobs - start)
        shard = (start // 10_000) % queue.shard_count
        queue.put_many_to_shard(shard, [{"args": [], "kwargs": {}}] * count, name=TASK)
    worker = process.WorkerProcess(
        queue, WorkerOptions(processes=1, threads=1, burst=True, scheduler=False, verbosity=0), 0
    )
    sched = ThreadSched()
    sched.wrap(worker)
    phases = None
    if args.phases:
        phases = Phases()
        phases.wrap(worker, "_claim", "claim")
        phases.wrap(worker, "_run", "run (task, outcome, counters)")
        phases.wrap(Batch, "flush", "acknowledge (flush)")
    profile = None if (args.no_profile or args.phases) else cProfile.Profile()
    times = os.times()
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    code = worker.run()
    if profile is not None:
        profile.disable()
    elapsed = time.perf_counter() - started
    after = os.times()
    done = queue.stats()["done"]
    cpu = (after.user - times.user) + (after.system - times.system)
    print(f"exit {code}; {done:,} done; {args.jobs / elapsed:,.0f} jobs/s; load {os.getloadavg()[0]:.2f}")
    print(
        f"CPU {cpu / args.jobs * 1e6:.1f} us/job (user {(after.user - times.user) / args.jobs * 1e6:.1f}, "
        f"system {(after.system - times.system) / args.jobs * 1e6:.1f}); the worker thread was on a CPU "
        f"{sched.on / sched.wall:.0%} of its life, runnable but waiting for one "
        f"{sched.waited / sched.wall:.0%}"
    )
    if phases is not None:
        print(f"\nper job ({args.jobs:,} jobs), the worker thread:")
        for phase, seconds in phases.cpu.items():
            wall = phases.wall[phase]
            cpu_us, wall_us = seconds / args.jobs * 1e6, wall / args.jobs * 1e6
            print(f"  {phase:32} CPU {cpu_us:6.2f} us   wall {wall_us:6.2f} us")
        print(f"  {'whole drain (wall)':32} {'':15}wall {elapsed / args.jobs * 1e6:6.2f} us")
    queue.close()
    if profile is not None:
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
