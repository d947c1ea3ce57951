"""Workflows end to end: a chord of N members (and its callback) against N plain jobs of the same no-op task,
each drained by ``queue_worker --burst --processes 2``, on the LMDB and the PostgreSQL store.

    uv run --group bench python benchmarks/workflow_bench.py                  # N = 10,000, both stores
    uv run --group bench python benchmarks/workflow_bench.py --store lmdb --n 2000 --repeat 3

Method (docs/benchmarks.md#workflows): a fresh store per run; the jobs are put by a child process (untimed):
the plain ones with ``noop_each.map(range(N))`` (spread over the shards), the chord with
``chord(group(noop_each.si(i) for i in range(N)), collect.s()).delay()`` (one shard on LMDB: a workflow lives
in one). Then the worker command drains them. "busy" = first job started -> last job finished (for the chord,
the callback's end), read from the store; "wall" = the command's launch -> its exit. The ratio is chord /
plain busy time (the issue's target: at most 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runstore import open_store  # noqa: E402

SETTINGS = "benchmarks.bench_project.workflow_settings"


def env_for(folder: Path, url: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "BENCH_DIR": str(folder),
        "PYTHONPATH": str(ROOT),
    }
    if url:
        env["QUEUE_MAX_BENCH_URL"] = url
    return env


def child_main(kind: str, n: int) -> None:
    """Put the jobs (in a fresh process with the bench settings); print the workflow's id, if any."""
    import django

    django.setup()
    from benchmarks.bench_project.bench_app.tasks import collect, noop_each
    from queue_max_django import chord, group

    if kind == "plain":
        noop_each.map(range(n))
    elif kind == "one_shard":  # the plain jobs all in one shard, as a workflow's are on LMDB
        from queue_max_django.conf import get_queue

        get_queue().put_many_to_shard(0, [{"args": [i], "kwargs": {}} for i in range(n)], name=noop_each.name)
    elif kind == "chain":  # n steps, each given the previous one's result (None)
        from queue_max_django import chain

        chain(noop_each.s(0), *[noop_each.s() for _ in range(n - 1)]).delay()
    else:
        print(chord(group(noop_each.si(i) for i in range(n)), collect.s()).delay().id)


def span(queue: Any) -> tuple[float, float, int, float, float]:
    """-> (first start, last end, jobs done, the last job's run time, the gap before it: its start less the
    end of the job that ended before it). For a chord, the last job is the callback."""
    from queue_max_django.engine import State

    first, count, after = float("inf"), 0, None
    ends: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 0.0)]  # the two latest (end, start)
    while True:
        page = queue.jobs(State.DONE, after=after, limit=1000)
        if not page:
            (last, last_start), (before, _) = ends[-1], ends[-2]
            return first, last, count, last - last_start, last_start - before
        first = min(first, min(job.started_at for job in page))
        ends = sorted([*ends, *((job.finished_at, job.started_at) for job in page)])[-2:]
        count += len(page)
        after = page[-1].job_id


def one_run(kind: str, store_kind: str, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with open_store(store_kind, folder, fsync=False) as store:
            url = None if store_kind == "lmdb" else str(store.target)
            env = env_for(folder, url)
            subprocess.run([sys.executable, __file__, "--child", kind, str(n)], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            began, cpu = time.monotonic(), _children_cpu()
            subprocess.run(
                [sys.executable, "-m", "django", "queue_worker", "--burst", "--processes", "2",
                 "--no-scheduler", "-v", "0"],
                cwd=ROOT, env=env, check=True,
            )  # fmt: skip
            wall, cpu = time.monotonic() - began, _children_cpu() - cpu
            from queue_max_django.engine import Queue

            with Queue(folder / "store" if url is None else url) as queue:
                first, last, done, tail_run, tail_gap = span(queue)
            expected = n + 1 if kind == "chord" else n
            if done != expected:
                raise RuntimeError(f"{kind} on {store_kind}: {done} done of {expected}")
    return {
        "busy_s": last - first,
        "wall_s": wall,
        "cpu_s": cpu,
        "jobs": done,
        "last_run_s": tail_run,
        "last_gap_s": tail_gap,
    }


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children and theirs: the worker command's
    processes, a measure of the work that a machine shared with other work disturbs less than time."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def celery_chain(n: int) -> float:
    """Celery 5 on Redis (a redis-server of this run): a chain of ``n`` no-op steps between two stamps, run by
    2 solo workers. -> seconds from the first stamp to the last."""
    import redis

    from benchmarks.peers_postgres import CELERY_APP, launch, redis_server
    from benchmarks.worker_bench import stop

    with redis_server("redis://127.0.0.1:6399/7") as url:
        env = {**os.environ, "BENCH_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
        redis.Redis.from_url(url).flushdb()
        argv = [str(Path(sys.executable).parent / "celery"), "-A", CELERY_APP, "worker", "-P", "solo", "-l",
                "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        workers = [launch([*argv, "-n", f"w{i}@%h"], env) for i in range(2)]
        try:
            code = (
                "from celery import chain\n"
                "from benchmarks.bench_project.celery_app import noop, stamp\n"
                f"chain(stamp.si('start'), *[noop.s() for _ in range({n})], stamp.si('end')).delay()\n"
            )
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
            stamps = redis.Redis.from_url(url)
            deadline = time.monotonic() + 600
            while stamps.get("end") is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Celery chain did not end within 600 s")
                time.sleep(0.05)
            return float(stamps.get("end")) - float(stamps.get("start"))  # type: ignore[arg-type]
        finally:
            for worker in workers:
                stop(worker)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["lmdb", "postgresql", "both"], default="both")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--chain",
        type=int,
        metavar="STEPS",
        help="instead: a chain of STEPS steps on each store, and Celery's on Redis",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child[0], int(args.child[1]))
        return
    kinds = ["lmdb", "postgresql"] if args.store == "both" else [args.store]
    if args.chain:
        for store_kind in kinds:
            busy = statistics.median(
                one_run("chain", store_kind, args.chain)["busy_s"] for _ in range(args.repeat)
            )
            each = 1e3 * busy / args.chain
            print(f"{store_kind}: a chain of {args.chain:,} steps {busy:.2f} s ({each:.2f} ms a step)")
        took = statistics.median(celery_chain(args.chain) for _ in range(args.repeat))
        each = 1e3 * took / args.chain
        print(f"celery on redis: a chain of {args.chain:,} steps {took:.2f} s ({each:.2f} ms a step)")
        return
    report: dict[str, Any] = {"n": args.n, "stores": {}}
    for store_kind in kinds:
        kinds_run = ("plain", "one_shard", "chord") if store_kind == "lmdb" else ("plain", "chord")
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds_run}
        for _ in range(args.repeat):
            for kind in kinds_run:  # in turn: each sees the same machine
                runs[kind].append(one_run(kind, store_kind, args.n))
        plain = statistics.median(run["busy_s"] for run in runs["plain"])
        chord = statistics.median(run["busy_s"] for run in runs["chord"])
        report["stores"][store_kind] = {
            "plain_busy_s": plain, "chord_busy_s": chord, "ratio": chord / plain,
            "plain_wall_s": statistics.median(run["wall_s"] for run in runs["plain"]),
            "chord_wall_s": statistics.median(run["wall_s"] for run in runs["chord"]), "runs": runs,
        }  # fmt: skip
        if "one_shard" in runs:
            one = statistics.median(run["busy_s"] for run in runs["one_shard"])
            report["stores"][store_kind]["one_shard_busy_s"] = one
            print(f"{store_kind}: {args.n:,} plain jobs in one shard {one:.2f} s ({args.n / one:,.0f}/s)")
        callback = statistics.median(run["last_run_s"] for run in runs["chord"])
        gap = statistics.median(run["last_gap_s"] for run in runs["chord"])
        report["stores"][store_kind].update(callback_run_s=callback, callback_gap_s=gap)
        cpu = {kind: statistics.median(run["cpu_s"] for run in runs[kind]) for kind in runs}
        report["stores"][store_kind]["cpu_s"] = cpu
        print(f"{store_kind}: CPU of the worker processes (launch to exit, start-up included): "
              + ", ".join(f"{kind} {value:.2f} s" for kind, value in cpu.items()))  # fmt: skip
        print(f"{store_kind}: the chord's callback ran {callback * 1e3:.0f} ms, {gap * 1e3:.0f} ms after the "
              "last member's end")  # fmt: skip
        print(
            f"{store_kind}: {args.n:,} plain jobs {plain:.2f} s ({args.n / plain:,.0f}/s), a chord of "
            f"{args.n:,} {chord:.2f} s ({args.n / chord:,.0f}/s): chord/plain {chord / plain:.2f}x",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
