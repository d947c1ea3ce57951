"""What concurrency limits cost where they are not the bottleneck: ``queue_worker --burst --processes 2``
drains N no-op jobs put with no limit, under a task limit of 64 (``@task(concurrency=64)``) and under a keyed
limit of 64 per key over 100 keys (``concurrency_key``), in alternating rounds on the same machine.

    uv run --group bench python benchmarks/limits_bench.py --n 20000 --rounds 3
    uv run --group bench python benchmarks/limits_bench.py --pg postgresql://postgres@127.0.0.1/bench
    uv run --group bench python benchmarks/limits_bench.py --root /tmp/base --modes none   # another checkout
    uv run --group bench python benchmarks/limits_bench.py --modes none,task --limit 256  # a limit of 256

A worker process claims up to 64 jobs at once (``worker/process.py``'s ``BATCH_MAX``, for no-op jobs), and
counts them running until it acknowledges them: with ``--processes 2`` a task limit of 64 is what holds the
jobs back (one process's batch fills it, the other waits); ``--limit 256`` leaves it room.

Each round: a fresh store (LMDB in a new directory; PostgreSQL: the tables dropped and made again), the jobs
put untimed, then the worker command timed. "busy" = N / (first job started -> last job finished), from the
store's records; printed per mode as the median of the rounds, with its µs per job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SETTINGS = "benchmarks.bench_project.settings"
TASK = "benchmarks.bench_project.bench_app.tasks.noop"
KEYS = 100
LIMIT = int(os.environ.get("QM_BENCH_LIMIT", "64"))


def limits_of(mode: str, index: int, limit: int = LIMIT) -> Any:
    if mode == "none":
        return None
    if mode == "task":
        return (("task:" + TASK, limit),)
    return ((f"task:{TASK}:k{index % KEYS}", limit),)


def prefill(root: Path, where: str, mode: str, n: int, limit: int = LIMIT) -> None:
    """Put the jobs (in a child process on ``root``'s engine): 1,000 a batch, one batch per key."""
    code = f"""
import sys
sys.path.insert(0, {str(root)!r})
from queue_max_django.engine import Queue
given = {limits_of(mode, 0, limit)!r}, {"task:" + TASK + ":k"!r}, {limit}
with Queue({where!r}) as q:
    mode, n = {mode!r}, {n}
    if mode == "keyed":
        for key in range({KEYS}):
            items = [{{"args": [], "kwargs": {{}}}}] * len(range(key, n, {KEYS}))
            q.put_many(items, name={TASK!r}, concurrency=((given[1] + str(key), given[2]),))
    else:
        for start in range(0, n, 1000):
            items = [{{"args": [], "kwargs": {{}}}}] * min(1000, n - start)
            options = {{}} if mode == "none" else {{"concurrency": given[0]}}
            if mode == "none":
                q.put_many_to_shard((start // 1000) % q.shard_count, items, name={TASK!r})
            else:
                q.put_many(items, name={TASK!r}, **options)
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def fresh_pg(root: Path, url: str) -> None:
    code = f"""
import sys
sys.path.insert(0, {str(root)!r})
import psycopg
from queue_max_django.engine.stores.postgres import schema
with psycopg.connect({url!r}, autocommit=True) as conn:
    schema.drop(conn)
    schema.create(conn)
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def span(root: Path, where: str, n: int) -> float:
    code = f"""
import sys, json
sys.path.insert(0, {str(root)!r})
from queue_max_django.engine import Queue, State
first, last, after, done = float("inf"), 0.0, None, 0
with Queue({where!r}) as q:
    while True:
        page = q.jobs(State.DONE, after=after, limit=1000)
        if not page:
            break
        done += len(page)
        first = min(first, min(j.started_at for j in page))
        last = max(last, max(j.finished_at for j in page))
        after = page[-1].job_id
print(json.dumps([done, last - first]))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    done, seconds = json.loads(out)
    if done != n:
        raise RuntimeError(f"{done} done of {n}")
    return float(seconds)


def one_round(
    root: Path,
    mode: str,
    n: int,
    pg: str | None,
    threads: int | None,
    processes: int = 2,
    limit: int = LIMIT,
) -> float:
    folder = Path(tempfile.mkdtemp(prefix="qm-limits-"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_DIR": str(folder),
           "PYTHONPATH": f"{root}{os.pathsep}{HERE}"}  # fmt: skip
    if pg is not None:
        env["BENCH_PG_URL"] = pg
        fresh_pg(root, pg)
        where = pg
    else:
        where = str(folder / "store")
    prefill(root, where, mode, n, limit)
    args = [
        sys.executable,
        "-m",
        "django",
        "queue_worker",
        "--burst",
        "--processes",
        str(processes),
        "--no-scheduler",
    ]
    if threads is not None:
        args += ["--threads", str(threads)]
    proc = subprocess.run([*args, "-v", "0"], cwd=root, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"queue_worker exited with {proc.returncode}")
    return n / span(root, where, n)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="none,task,keyed")
    parser.add_argument("--pg", help="a PostgreSQL URL (its queue_max tables are dropped each round)")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose worker runs")
    parser.add_argument("--threads", type=int, help="threads per worker process (default: the worker's)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"the limit's size (default {LIMIT})")
    args = parser.parse_args()
    modes = args.modes.split(",")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for index in range(args.rounds):
        for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
            rates[mode].append(
                one_round(args.root, mode, args.n, args.pg, args.threads, args.processes, args.limit)
            )
            time.sleep(0.5)
    for mode, values in rates.items():
        median = statistics.median(values)
        print(f"{mode:6} busy {median:9,.0f} jobs/s  {1e6 / median:7.1f} µs/job  rounds: "
              + ", ".join(f"{v:,.0f}" for v in values))  # fmt: skip


if __name__ == "__main__":
    main()
