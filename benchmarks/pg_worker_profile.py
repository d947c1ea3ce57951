"""Profile one worker process on the PostgreSQL store: ``WorkerProcess.run()`` in burst mode (1 thread, as
``queue_worker``'s default, or ``--threads``), in this process under cProfile, draining N no-op jobs from a
scratch database that it makes (and drops first) on the server of ``--url``. Prints the drain rate, then the
profile sorted by cumulative and by own time. ``--batch-max`` overrides the worker's ``BATCH_MAX`` (to
compare batch sizes without the profiler: ``--no-profile``).

    uv run --group bench python benchmarks/pg_worker_profile.py --jobs 20000
    uv run --group bench python benchmarks/pg_worker_profile.py --jobs 20000 --no-profile --batch-max 256
    uv run --group bench python benchmarks/pg_worker_profile.py --jobs 20000 --no-profile --threads 2
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = "qm_worker_profile"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", default="postgresql://postgres@127.0.0.1:5432/postgres", help="a server's URL"
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch-max", type=int, help="the worker's BATCH_MAX (default: its own)")
    parser.add_argument("--threads", type=int, default=1, help="worker threads (default 1, as queue_worker)")
    parser.add_argument("--no-profile", action="store_true", help="time the drain only")
    parser.add_argument("--top", type=int, default=40, help="lines of each profile listing")
    args = parser.parse_args()

    import psycopg

    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {SCRATCH}")
        admin.execute(f"CREATE DATABASE {SCRATCH}")
    os.environ["BENCH_PG_URL"] = urlunsplit(urlsplit(args.url)._replace(path=f"/{SCRATCH}"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_project.pg_settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.peers_postgres import OUR_TASK
    from queue_max_django import conf
    from queue_max_django.worker import process
    from queue_max_django.worker.options import WorkerOptions

    call_command("migrate", verbosity=0)
    if args.batch_max:
        process.BATCH_MAX = args.batch_max
    queue = conf.get_queue()
    for start in range(0, args.jobs, 10_000):
        queue.put_many([{"args": [], "kwargs": {}}] * min(10_000, args.jobs - start), name=OUR_TASK)
    worker = process.WorkerProcess(
        queue, WorkerOptions(processes=1, threads=args.threads, burst=True, scheduler=False, verbosity=0), 0
    )
    profile = None if args.no_profile else cProfile.Profile()
    started = time.perf_counter()
    if profile is not None:
        profile.enable()
    code = worker.run()
    if profile is not None:
        profile.disable()
    elapsed = time.perf_counter() - started
    done = queue.stats()["done"]
    print(
        f"exit {code}; {done} done; {args.jobs / elapsed:,.0f} jobs/s "
        f"(BATCH_MAX {process.BATCH_MAX}, {args.threads} thread(s))"
    )
    queue.close()
    if profile is not None:
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
