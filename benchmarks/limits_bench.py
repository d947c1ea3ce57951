"""What concurrency limits and unique keys cost where they are not what holds jobs back: ``queue_worker
--burst --processes 2`` drains N no-op jobs put with no limit (``none``), under a task limit (``task``:
``@task(concurrency=1000)``), under a keyed limit of as many per key over 100 keys (``keyed``:
``concurrency_key``), and each with a unique key of its own (``unique``: ``unique_key``), in alternating
rounds on the same machine; with several ``--root`` checkouts, those alternate within each round too.

    uv run --group bench python benchmarks/limits_bench.py --n 20000 --rounds 3
    uv run --group bench python benchmarks/limits_bench.py --root . --root /tmp/main --rounds 4  # A/B
    uv run --group bench python benchmarks/limits_bench.py --pg postgresql://postgres@127.0.0.1/bench
    uv run --group bench python benchmarks/limits_bench.py --modes none,task --limit 64  # one batch fills it

A worker process claims up to 64 jobs at once (``worker/process.py``'s ``BATCH_MAX``, for no-op jobs), and
counts them running until it acknowledges them: with ``--processes 2`` a task limit of 64 is what holds the
jobs back (one process's batch fills it, the other waits); the default limit, 1000, leaves it room.

Each round: a fresh store (LMDB in a new directory; PostgreSQL: the tables dropped and made again), the jobs
put untimed, then the worker command timed. "busy" = N / (first job started -> last job finished), from the
store's records. "cpu" = the user + system CPU of the worker command and every process under it
(``os.wait4``: a process's own and its reaped children's), less the median CPU of the same command draining
an empty store (its start-up and shutdown, measured once per checkout per round), per job. Printed per
checkout and mode: the medians of the rounds, and each against ``none`` of the same checkout (the ratio of
the medians, and the range of the ratios within a round), and with two checkouts the first against the second.
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
LIMIT = int(os.environ.get("QM_BENCH_LIMIT", "1000"))
MODES = ("none", "task", "keyed", "unique")


def limits_of(mode: str, index: int, limit: int = LIMIT) -> Any:
    if mode in ("none", "unique"):
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
            if mode == "none":
                q.put_many_to_shard((start // 1000) % q.shard_count, items, name={TASK!r})
            elif mode == "unique":
                keys = [f"u{{start + i}}" for i in range(len(items))]
                q.put_many(items, name={TASK!r}, unique_keys=keys)
            else:
                q.put_many(items, name={TASK!r}, concurrency=given[0])
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


def worker_cpu(root: Path, env: dict[str, str], threads: int | None, processes: int) -> float:
    """Run ``root``'s ``queue_worker --burst`` to its end: -> the CPU seconds (user + system) of it and of
    every process under it that it reaped."""
    args = [sys.executable, "-m", "django", "queue_worker", "--burst", "--processes", str(processes),
            "--no-scheduler", "-v", "0"]  # fmt: skip
    if threads is not None:
        args += ["--threads", str(threads)]
    proc = subprocess.Popen(args, cwd=root, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"queue_worker of {root} exited with {proc.returncode}")
    return float(usage.ru_utime + usage.ru_stime)


def one_round(
    root: Path,
    mode: str | None,
    n: int,
    pg: str | None,
    threads: int | None,
    processes: int = 2,
    limit: int = LIMIT,
) -> tuple[float, float]:
    """A fresh store of ``n`` jobs of ``mode`` (None: no job), drained by ``root``'s worker. -> (busy rate in
    jobs/s, 0 for no job; the worker's CPU seconds)."""
    folder = Path(tempfile.mkdtemp(prefix="qm-limits-"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_DIR": str(folder),
           "PYTHONPATH": f"{root}{os.pathsep}{HERE}"}  # fmt: skip
    if pg is not None:
        env["BENCH_PG_URL"] = pg
        fresh_pg(root, pg)
        where = pg
    else:
        where = str(folder / "store")
    if mode is not None:
        prefill(root, where, mode, n, limit)
    cpu = worker_cpu(root, env, threads, processes)
    return (0.0 if mode is None else n / span(root, where, n)), cpu


def ratios(tops: list[float], bottoms: list[float]) -> list[float]:
    """Round by round: each of ``tops`` over the ``bottoms`` of its round."""
    return [top / bottom for top, bottom in zip(tops, bottoms, strict=True)]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--pg", help="a PostgreSQL URL (its queue_max tables are dropped each round)")
    parser.add_argument("--root", type=Path, action="append", help="a checkout whose worker runs (give more: "
                        "they alternate); default: this one")  # fmt: skip
    parser.add_argument("--threads", type=int, help="threads per worker process (default: the worker's)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"the limit's size (default {LIMIT})")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if set(modes) - set(MODES):
        parser.error(f"unknown modes: {sorted(set(modes) - set(MODES))}")
    roots = [root.resolve() for root in (args.root or [HERE])]
    names = [f"{index}:{root.name}" for index, root in enumerate(roots)]
    pairs = list(zip(names, roots, strict=True))
    rates = {(name, mode): [] for name in names for mode in modes}  # type: dict[tuple[str, str], list[float]]
    cpus = {(name, mode): [] for name in names for mode in modes}  # type: dict[tuple[str, str], list[float]]
    idle: dict[str, list[float]] = {name: [] for name in names}
    store = "postgresql" if args.pg else "lmdb"
    print(f"n={args.n} rounds={args.rounds} limit={args.limit} processes={args.processes} store={store}; "
          "roots: " + ", ".join(f"{name}={root}" for name, root in pairs))  # fmt: skip
    for index in range(args.rounds):
        for name, root in pairs:
            idle[name].append(one_round(root, None, 0, args.pg, args.threads, args.processes, args.limit)[1])
        order = modes[index % len(modes) :] + modes[: index % len(modes)]
        for mode in order:
            shift = index % len(pairs)
            for name, root in pairs[shift:] + pairs[:shift]:
                rate, cpu = one_round(root, mode, args.n, args.pg, args.threads, args.processes, args.limit)
                rates[name, mode].append(rate)
                cpus[name, mode].append(cpu)
                print(f"round {index + 1} {name} {mode:6} {rate:9,.0f} jobs/s  cpu {cpu:6.2f} s  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
                time.sleep(0.5)
    print()
    for name in names:
        base_cpu = statistics.median(idle[name])
        print(f"{name}: empty-store worker run {base_cpu:.2f} s of CPU (median; rounds "
              + ", ".join(f"{v:.2f}" for v in idle[name]) + ")")  # fmt: skip
        for mode in modes:
            values = rates[name, mode]
            median = statistics.median(values)
            per_job = [(cpu - base_cpu) / args.n * 1e6 for cpu in cpus[name, mode]]
            line = (f"  {mode:6} busy {median:9,.0f} jobs/s  {1e6 / median:7.1f} µs/job  "
                    f"cpu {statistics.median(per_job):6.1f} µs/job")  # fmt: skip
            if mode != "none" and "none" in modes:
                nones = rates[name, "none"]
                none_cpu = [(cpu - base_cpu) / args.n * 1e6 for cpu in cpus[name, "none"]]
                line += (f"  vs none: rate {median / statistics.median(nones):.2f}x "
                         f"(rounds {spread(ratios(values, nones))}), "
                         f"cpu {statistics.median(per_job) / statistics.median(none_cpu):.2f}x "
                         f"(rounds {spread(ratios(per_job, none_cpu))})")  # fmt: skip
            print(line)
            print("         rounds: " + ", ".join(f"{v:,.0f}" for v in values)
                  + "  cpu µs/job: " + ", ".join(f"{v:.1f}" for v in per_job))  # fmt: skip
    if len(names) >= 2:
        first, second = names[0], names[1]
        for mode in modes:
            a, b = rates[first, mode], rates[second, mode]
            print(f"{mode:6} {first} / {second}: rate {statistics.median(a) / statistics.median(b):.2f}x "
                  f"(rounds {spread(ratios(a, b))})")  # fmt: skip


if __name__ == "__main__":
    main()
