"""End-to-end worker benchmark: `queue_worker --burst --processes 2` against huey's consumer (SqliteHuey),
django-tasks-db's `db_worker` and django-q2's ORM cluster, on the same no-op task, machine and run.

    uv run --group bench python benchmarks/worker_bench.py --quick           # ~1.5 minutes
    uv run --group bench python benchmarks/worker_bench.py --json out.json   # the full run
    uv run --group bench python benchmarks/worker_bench.py --rss 1000000     # worker memory over 1M jobs
    uv run --group bench python benchmarks/worker_bench.py --only ours,lmdb_queue --repeat 5 --compete 1
    uv run --group bench python benchmarks/worker_bench.py --only ours,base,lmdb_queue --base ../b --repeat 5

Method (docs/benchmarks.md): each system gets a fresh directory (its store or SQLite database), is prefilled
with N jobs of the same no-op task (untimed, in a child process), then its worker command drains them with 2
worker processes. Two rates per system: "busy" = N / (first job started -> last job finished), read from the
system's own records where it keeps timestamps (ours, django-tasks-db) and otherwise by polling its queue
table every 5 ms (huey: its rows leave the table when dequeued; django-q2: when acknowledged); "wall" = N /
(command launched -> all done), which includes starting Python, Django and the processes. Ratios are
ours / theirs. Also: lmdb-queue's bare get/ack loop in 2 processes (engine_bench's workload 5), the idle
worker's pickup latency (started_at - enqueued_at from the store), and, with --rss, the worker process's
anonymous memory (RssAnon) after 10,000 jobs and after N. ``--compete N`` runs N CPU-bound processes
(benchmarks/competitor.py) while each system runs, started before its prefill and stopped after it ends. The
CPU per job printed for ours is the command's (``os.wait4``: every worker process, start-up included), for
lmdb-queue its two consumer processes' over their loop. ``--base PATH`` adds the system ``base``: the worker
of another checkout of this repository (with its own ``.venv``), run the same way, in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = "benchmarks.bench_project.settings"
OUR_TASK = "benchmarks.bench_project.bench_app.tasks.noop"
POLL = 0.005
FULL = {
    "ours": 100_000,
    "huey": 20_000,
    "django_q2": 4_000,
    "tasks_db": 2_000,
    "lmdb_queue": 100_000,
    "pickup": 200,
}
QUICK = {
    "ours": 20_000,
    "huey": 5_000,
    "django_q2": 1_000,
    "tasks_db": 500,
    "lmdb_queue": 20_000,
    "pickup": 50,
}


BASE: Path | None = None  # --base: another checkout, whose worker runs as the system "base"


def env_for(folder: Path, side: Path = ROOT) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "BENCH_DIR": str(folder),
        "PYTHONPATH": str(side),
    }


def django(folder: Path, *args: str, side: Path = ROOT, **kwargs: Any) -> subprocess.Popen[bytes]:
    python = sys.executable if side == ROOT else str(side / ".venv" / "bin" / "python")
    return subprocess.Popen(
        [python, "-m", "django", *args],
        cwd=side,
        env=env_for(folder, side),
        start_new_session=True,
        **kwargs,
    )


def child(folder: Path, *args: str) -> None:
    """Run this file's ``--child`` mode (migrate, prefill) in a fresh process with the bench settings."""
    subprocess.run([sys.executable, __file__, "--child", *args], cwd=ROOT, env=env_for(folder), check=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def count_rows(db: Path, table: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def poll_table(
    db: Path, table: str, n: int, proc: subprocess.Popen[bytes], limit: float
) -> tuple[float, float]:
    """Until ``table`` is empty: -> (when it first dropped below n, when it reached 0), monotonic."""
    first = None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        left = count_rows(db, table)
        now = time.monotonic()
        if first is None and left < n:
            first = now
        if left == 0:
            return first or now, now
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode} with {left} jobs left")
        time.sleep(POLL)
    raise RuntimeError(f"{table} not drained within {limit}s")


# ---------------------------------------------------------------------------------------------- systems


def bench_base(folder: Path, n: int) -> dict[str, Any]:
    """``bench_ours`` with the worker of the ``--base`` checkout (its store prefilled by this one's)."""
    assert BASE is not None
    return bench_ours(folder, n, BASE)


def bench_ours(folder: Path, n: int, side: Path = ROOT) -> dict[str, Any]:
    from queue_max_django.engine import Queue

    with Queue(folder / "store") as queue:
        for start in range(0, n, 10_000):
            count = min(10_000, n - start)
            queue.put_many_to_shard(
                (start // 10_000) % queue.shard_count, [{"args": [], "kwargs": {}}] * count, name=OUR_TASK
            )
    began = time.monotonic()
    command = ("queue_worker", "--burst", "--processes", "2", "--no-scheduler", "-v", "0")
    proc = django(folder, *command, side=side)
    _pid, status, usage = os.wait4(proc.pid, 0)  # the command's CPU and its reaped children's
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"queue_worker exited with {proc.returncode}")
    wall = time.monotonic() - began
    with Queue(folder / "store") as queue:
        stats = queue.stats()
        if stats["done"] != n:
            raise RuntimeError(f"ours: {stats['done']} done of {n}")
        first, last = span(queue)
    cpu = usage.ru_utime + usage.ru_stime  # start-up included
    return {"n": n, "busy_per_s": n / (last - first), "wall_per_s": n / wall, "cpu_us_per_job": cpu / n * 1e6}


def span(queue: Any) -> tuple[float, float]:
    """(first started_at, last finished_at) over every done job (keyset pages of 1,000)."""
    from queue_max_django.engine import State

    first, last = float("inf"), 0.0
    after = None
    while True:
        page = queue.jobs(State.DONE, after=after, limit=1000)
        if not page:
            return first, last
        first = min(first, min(job.started_at for job in page))
        last = max(last, max(job.finished_at for job in page))
        after = page[-1].job_id


def bench_huey(folder: Path, n: int) -> dict[str, Any]:
    child(folder, "prefill", "huey", str(n))
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "huey.bin.huey_consumer", "benchmarks.bench_project.huey_app.huey",
         "-w", "2", "-k", "process", "-q"],
        cwd=ROOT, env=env_for(folder), start_new_session=True,
    )  # fmt: skip
    return drained(proc, folder / "huey.db", "task", n, began)


def bench_django_q2(folder: Path, n: int) -> dict[str, Any]:
    child(folder, "migrate")
    child(folder, "prefill", "django_q2", str(n))
    began = time.monotonic()
    proc = django(folder, "qcluster", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return drained(proc, folder / "db.sqlite3", "django_q_ormq", n, began)


def drained(proc: subprocess.Popen[bytes], db: Path, table: str, n: int, began: float) -> dict[str, Any]:
    """Poll ``table`` until the running worker ``proc`` emptied it, stop it; -> the rates."""
    try:
        first, last = poll_table(db, table, n, proc, 900)
    finally:
        stop(proc)
    return {"n": n, "busy_per_s": n / (last - first), "wall_per_s": n / (last - began)}


def bench_tasks_db(folder: Path, n: int) -> dict[str, Any]:
    child(folder, "migrate")
    child(folder, "prefill", "tasks_db", str(n))
    began = time.monotonic()
    procs = [
        django(
            folder,
            "db_worker",
            "--batch",
            "--no-startup-delay",
            "--interval",
            "0.01",
            "--worker-id",
            f"w{i}",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    for proc in procs:
        proc.wait(900)
    wall = time.monotonic() - began
    with sqlite3.connect(folder / "db.sqlite3") as conn:
        done, first, last = conn.execute(
            "SELECT COUNT(*), MIN(started_at), MAX(finished_at) FROM django_tasks_database_dbtaskresult "
            "WHERE status = 'SUCCESSFUL'"
        ).fetchone()
    if done != n:
        raise RuntimeError(f"django-tasks-db: {done} done of {n}")
    seconds = (parse_time(last) - parse_time(first)).total_seconds()
    return {"n": n, "busy_per_s": n / seconds, "wall_per_s": n / wall}


def parse_time(text: str) -> Any:
    import datetime as dt

    return dt.datetime.fromisoformat(text)


def bench_lmdb_queue(folder: Path, n: int) -> dict[str, Any]:
    """lmdb-queue's bare get/ack loop in 2 processes: engine_bench's workload 5."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import engine_bench

    variant = engine_bench.Variant(engine_bench.LMDBQ, {}, extra={"procs": 2})
    result = engine_bench.w_drain_procs(variant, {"procs_n": n}, str(folder / "lmdbq"))
    return {"n": n, "busy_per_s": result["jobs_per_s"], "wall_per_s": None,
            "cpu_us_per_job": result["cpu_us_per_job"]}  # fmt: skip


def bench_pickup(folder: Path, samples: int) -> dict[str, Any]:
    """An idle `queue_worker --processes 1`; a job every 20 ms; pickup = started_at - enqueued_at."""
    from queue_max_django.engine import Queue

    proc = django(folder, "queue_worker", "--processes", "1", "--no-scheduler", "-v", "0")
    try:
        with Queue(folder / "store") as queue:
            deadline = time.monotonic() + 60
            while not queue.workers():
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker did not register within 60 s")
                time.sleep(0.05)
            time.sleep(0.5)
            ids = []
            for _ in range(samples):
                ids.append(queue.put({"args": [], "kwargs": {}}, name=OUR_TASK))
                time.sleep(0.02)
            if not queue.wait_until_empty(60):
                raise RuntimeError("the pickup jobs did not finish")
            delays = []
            for job_id in ids:
                job = queue.job(job_id)
                assert job is not None and job.started_at is not None
                delays.append((job.started_at - job.enqueued_at) * 1000)
    finally:
        stop(proc)
    ordered = sorted(delays)
    p90 = ordered[int(len(ordered) * 0.9)]
    return {"samples": samples, "p50_ms": statistics.median(ordered), "p90_ms": p90, "max_ms": ordered[-1]}


def rss_anon_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon")


def bench_rss(folder: Path, n: int) -> dict[str, Any]:
    """One worker process drains n jobs; its RssAnon after 10,000 and after n."""
    from queue_max_django.engine import Queue

    with Queue(folder / "store") as queue:
        for start in range(0, n, 10_000):
            queue.put_many_to_shard(
                (start // 10_000) % queue.shard_count, [{"args": [], "kwargs": {}}] * min(10_000, n - start),
                name=OUR_TASK,
            )  # fmt: skip
        proc = django(folder, "queue_worker", "--processes", "1", "--no-scheduler", "-v", "0")
        try:
            samples: list[tuple[int, int]] = []
            early = None
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                workers = queue.workers()
                done = queue.stats()["done"]
                if workers:
                    kb = rss_anon_kb(workers[0].pid)
                    if early is None and done >= 10_000:
                        early = (done, kb)
                    if not samples or done - samples[-1][0] >= n // 20:
                        samples.append((done, kb))
                if done >= n:
                    samples.append((done, rss_anon_kb(workers[0].pid)))
                    break
                time.sleep(0.2)
        finally:
            stop(proc)
    if early is None:
        raise RuntimeError("no sample after 10,000 jobs")
    final = samples[-1]
    return {"n": n, "after_10k_kb": early[1], "after_n_kb": final[1], "growth": final[1] / early[1] - 1,
            "samples": samples}  # fmt: skip


# ---------------------------------------------------------------------------------------------- child mode


def child_main(args: list[str]) -> None:
    import django as django_module

    django_module.setup()
    if args[0] == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return
    _, system, count = args
    n = int(count)
    if system == "huey":
        from benchmarks.bench_project.huey_app import noop

        for _ in range(n):
            noop()
    elif system == "django_q2":
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            for _ in range(n):
                async_task("benchmarks.bench_project.bench_app.tasks.plain_noop")
    elif system == "tasks_db":
        from django.db import transaction

        from benchmarks.bench_project.bench_app.tasks import tasks_noop

        with transaction.atomic():
            for _ in range(n):
                tasks_noop.enqueue()


# ---------------------------------------------------------------------------------------------- main

SYSTEMS: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    "ours": bench_ours,
    "base": bench_base,
    "huey": bench_huey,
    "django_q2": bench_django_q2,
    "tasks_db": bench_tasks_db,
    "lmdb_queue": bench_lmdb_queue,
}
LABELS = {
    "base": "queue_max_django of --base: queue_worker --burst --processes 2",
    "ours": "queue_max_django: queue_worker --burst --processes 2",
    "huey": "huey 3 consumer, SqliteHuey, -w 2 -k process",
    "django_q2": "django-q2 qcluster, ORM broker (SQLite), 2 workers",
    "tasks_db": "django-tasks-db: 2 x db_worker --batch (SQLite)",
    "lmdb_queue": "lmdb-queue bare get/ack loop, 2 processes (no task, no worker)",
}
TARGETS = {"huey": 5.0, "tasks_db": 50.0, "lmdb_queue": 2.0}  # issue 35's, on a quiet machine
TARGETS_COMPETING = {"lmdb_queue": 1.2}  # issue 35's, with one CPU-bound process competing (--compete 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated: " + ",".join([*SYSTEMS, "pickup"]))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--rss", type=int, metavar="N", help="measure the worker's memory over N jobs instead"
    )
    parser.add_argument(
        "--compete", type=int, default=0, metavar="N",
        help="N CPU-bound processes compete for the cores while each system runs (benchmarks/competitor.py)",
    )  # fmt: skip
    parser.add_argument(
        "--base", type=Path, help="another checkout (with its .venv): its worker runs too, as the system base"
    )
    parser.add_argument("--n", type=int, help="jobs for ours and lmdb_queue (instead of the size's default)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child_main(options.child)
        return
    global BASE
    BASE = None if options.base is None else options.base.resolve()
    sizes = dict(QUICK if options.quick else FULL)
    sizes["base"] = sizes["ours"]
    if options.n:
        sizes["ours"] = sizes["base"] = sizes["lmdb_queue"] = options.n
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}"
    report: dict[str, Any] = {"machine": machine, "results": {}, "compete": options.compete}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from competitor import Competitors

    if options.rss:
        with tempfile.TemporaryDirectory(prefix="qm-rss-") as tmp:
            report["rss"] = result = bench_rss(Path(tmp), options.rss)
        print(
            f"worker RssAnon: {result['after_10k_kb']} kB after 10,000 jobs, "
            f"{result['after_n_kb']} kB after {result['n']:,} ({result['growth']:+.1%})"
        )
    else:
        everything = [name for name in SYSTEMS if name != "base" or BASE is not None]
        chosen = options.only.split(",") if options.only else [*everything, "pickup"]
        for _round in range(options.repeat):
            for name in chosen:
                with tempfile.TemporaryDirectory(prefix=f"qm-{name}-") as tmp:
                    if name == "pickup":
                        result = bench_pickup(Path(tmp), sizes["pickup"])
                        print(
                            f"pickup p50 {result['p50_ms']:.2f} ms, p90 {result['p90_ms']:.2f} ms", flush=True
                        )
                    else:
                        load = os.getloadavg()[0]
                        with Competitors(options.compete):
                            result = SYSTEMS[name](Path(tmp), sizes[name])
                        result["load"] = load
                        wall = result["wall_per_s"]
                        walled = f", wall {wall:,.0f} jobs/s" if wall else ""
                        cpu = result.get("cpu_us_per_job")
                        cpu_text = f", {cpu:.1f} us CPU/job" if cpu else ""
                        rate = f"busy {result['busy_per_s']:,.0f} jobs/s{walled}{cpu_text} (load {load:.2f})"
                        print(f"{LABELS[name]}: {rate} (n={result['n']:,})", flush=True)
                    report["results"].setdefault(name, []).append(result)
        summarize(report)
    if options.json:
        options.json.write_text(json.dumps(report, indent=2))


def summarize(report: dict[str, Any]) -> None:
    """Same-run ratios: ours / theirs within each round (the rounds run the systems one after the other, so
    a burst of outside load hits neighbours alike), then the median over rounds, with the range."""
    results = report["results"]
    if "ours" not in results:
        return
    ratios = {}
    print("\nratios, ours / theirs (median of the rounds' same-run ratios, and their range):")
    for name in SYSTEMS:
        if name == "ours" or name not in results:
            continue
        rounds = list(zip(results["ours"], results[name], strict=False))
        busy = [ours["busy_per_s"] / theirs["busy_per_s"] for ours, theirs in rounds]
        wall = [ours["wall_per_s"] / theirs["wall_per_s"] for ours, theirs in rounds if theirs["wall_per_s"]]
        target = (TARGETS_COMPETING if report.get("compete") else TARGETS).get(name)
        middle = statistics.median(busy)
        verdict = (
            "" if target is None else f" (target >= {target:.1f}x: {'met' if middle >= target else 'MISSED'})"
        )
        spread = f"{min(busy):.2f}-{max(busy):.2f}"
        walled = f", wall {statistics.median(wall):.1f}x" if wall else ""
        print(f"  vs {LABELS[name]}: busy {middle:.2f}x ({spread}){walled}{verdict}")
        median_wall = statistics.median(wall) if wall else None
        ratios[name] = {"busy": middle, "busy_rounds": busy, "wall": median_wall, "target": target}
    report["ratios"] = ratios


if __name__ == "__main__":
    main()
