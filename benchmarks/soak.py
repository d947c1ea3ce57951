"""Soak run: a million no-op jobs through one ``queue_worker``; throughput, worker memory and store pages over
time, then the store vacuumed and compacted.

    uv run python benchmarks/soak.py                      # 1,000,000 jobs (several minutes)
    uv run python benchmarks/soak.py --jobs 100000        # a quick run
    uv run python benchmarks/soak.py --json soak.json --plot soak.png   # the plot needs matplotlib
    uv run python benchmarks/soak.py --store postgresql   # the PostgreSQL store (benchmarks/runstore.py)

Method (docs/benchmarks.md): a fresh store; its empty size is measured. One ``queue_worker --processes P
--no-scheduler`` (task ``tests.chaos.chaosapp.tasks.noop``, settings ``tests.chaos.settings``) runs while
this process feeds it with ``put_many`` batches of 100, keeping at most ``--backlog`` jobs waiting, until
``--jobs`` were put. Every ``--every`` seconds it samples: jobs finished, the worker processes' anonymous
memory (``RssAnon`` in /proc/PID/status, the pids from the store's worker registry ``Queue.workers()``),
and per LMDB environment the high-water mark (``info()["last_pgno"]``), the pages the B-trees use
(``stat()`` of the main and every named database) and the file size. Done jobs stay (``RESULT_TTL`` is a
day), so the store holds all of them at the end. Then the worker gets SIGTERM, ``vacuum(older_than=0)``
deletes every done job, and ``compact_store`` (``manage.py queue_compact``) copies the store compacted.

Targets, printed with the figures: throughput over the last 10% of jobs within 10% of the first 10%'s;
worker memory growth from the 10% mark to the end <= 10%; pages in use after the vacuum within 10% of the
empty store's; and the compaction shrinking the files back.

On the PostgreSQL store (``--store postgresql``: a new database on a throwaway durable cluster, or on the
server of ``--url``) the footprint sampled is each ``qm_*`` table's ``pg_total_relation_size`` (the table,
its indexes and TOAST) with its dead and live rows and how often it was vacuumed (``pg_stat_user_tables``);
"empty" is the new database. There is no compaction: after the run, the store's own upkeep does what it
does in a deployment: ``vacuum(older_than=0)`` deletes the done jobs, then the store's maintenance
(``maintain()``, which every process's background thread runs) folds the counters and vacuums those
tables that churn whose dead rows outnumber their live ones (``upkeep.vacuum_churned``). The target instead
of the pages: the hot table ``qm_jobs``, through which every job passed, is no larger over the second half of
the run than over the first (its largest size, within 10% or 1 MiB): it does not grow with the jobs that go
through it. (``--server-setting autovacuum=off`` leaves that to the store's own maintenance.)
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.runstore import RunStore, add_options, open_store

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = "tests.chaos.settings"
TASK = "tests.chaos.chaosapp.tasks.noop"
BATCH = 100


@dataclass
class Pages:
    """Summed over every environment of the store (control and shards)."""

    file_bytes: int
    high_water: int  # sum of last_pgno + 1: what the files can hold without growing
    in_use: int  # pages the B-trees use (+ meta pages)

    @property
    def free(self) -> int:
        return max(0, self.high_water - self.in_use)


@dataclass
class Tables:
    """The PostgreSQL store's tables (``qm_*``), each by name."""

    bytes: dict[str, int]  # pg_total_relation_size: the table, its indexes and TOAST
    dead: dict[str, int]  # n_dead_tup
    live: dict[str, int]  # n_live_tup
    vacuums: dict[str, int]  # vacuum_count + autovacuum_count

    @property
    def file_bytes(self) -> int:
        return sum(self.bytes.values())


@dataclass
class Sample:
    seconds: float
    put: int
    finished: int
    rss_anon_kib: dict[str, int]  # worker id -> RssAnon
    pages: Pages | Tables  # the store's footprint: LMDB pages, or PostgreSQL tables


def pages_of(queue: Any) -> Pages:
    """The store's pages, read through the queue's own environments (one open per process: LMDB)."""
    from queue_max_django.engine.stores.lmdb.compact import env_usage

    usages = [env_usage(env.env, env.path) for env in [queue._store.control.env, *queue._store._envs]]
    return Pages(
        file_bytes=sum(u.file_bytes for u in usages),
        high_water=sum(u.last_pgno + 1 for u in usages),
        in_use=sum(u.pages_used for u in usages),
    )


_TABLES = r"""
SELECT c.relname, pg_total_relation_size(c.oid), coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       coalesce(s.vacuum_count + s.autovacuum_count, 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'qm\_%' ORDER BY c.relname"""


def tables_of(conn: Any) -> Tables:
    """The PostgreSQL store's tables, read on ``conn`` (autocommit: the statistics of now)."""
    rows = conn.execute(_TABLES).fetchall()
    return Tables(*({row[0]: int(row[column]) for row in rows} for column in (1, 2, 3, 4)))


def settled_tables(conn: Any, seconds: float = 20.0) -> Tables:
    """The tables once the server's statistics stopped changing (a backend sends its own at a transaction's
    end, at most once a second, or when it has been idle a while): two reads a second apart that agree."""
    deadline = time.monotonic() + seconds
    previous = tables_of(conn)
    while True:
        time.sleep(1.0)
        now = tables_of(conn)
        if now == previous or time.monotonic() > deadline:
            return now
        previous = now


def rss_anon_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def worker_memory(queue: Any) -> dict[str, int]:
    out = {}
    for worker in queue.workers():
        if worker.pid and (kib := rss_anon_kib(worker.pid)) is not None:
            out[f"{worker.worker_id} (pid {worker.pid})"] = kib
    return out


def crossing(samples: list[Sample], count: float) -> float:
    """When the finished count reached ``count`` (linear between samples)."""
    previous = samples[0]
    for sample in samples:
        if sample.finished >= count:
            if sample.finished == previous.finished:
                return sample.seconds
            share = (count - previous.finished) / (sample.finished - previous.finished)
            return previous.seconds + share * (sample.seconds - previous.seconds)
        previous = sample
    return samples[-1].seconds


def soak(
    folder: Path, jobs: int, processes: int, backlog: int, every: float, store: RunStore
) -> dict[str, Any]:
    if store.kind == "postgresql":
        return soak_postgres(folder, jobs, processes, backlog, every, store)
    return soak_lmdb(folder, jobs, processes, backlog, every)


def soak_lmdb(folder: Path, jobs: int, processes: int, backlog: int, every: float) -> dict[str, Any]:
    from queue_max_django.engine import Queue, State
    from queue_max_django.engine.stores.lmdb.compact import compact_store

    store = folder / "store"
    with Queue(store, do_recover=False, do_vacuum=False) as queue:
        # "Empty": a store through which one job per shard has passed (and been vacuumed), so each shard has
        # written its counters record (one page) once; a store that never held a job has not.
        for shard in range(queue.shard_count):
            queue.put_many_to_shard(shard, [{"args": [], "kwargs": {}}], name=TASK)
            record = queue.claim(queue.jobs(State.PENDING, limit=1)[0].job_id)
            assert record is not None
            record.ack()
        queue.vacuum(older_than=0)
        empty = pages_of(queue)
        samples = run_worker(folder, queue, {}, jobs, processes, backlog, every, lambda: pages_of(queue))
        done_pages = pages_of(queue)
    # What compaction costs when most pages are in use: a copy of the full store to another path.
    full_copy = compact_store(store, output=folder / "full-copy")
    shutil.rmtree(folder / "full-copy")
    with Queue(store, do_recover=False, do_vacuum=False) as queue:
        vacuum_began = time.monotonic()
        vacuumed = queue.vacuum(older_than=0)
        vacuum_seconds = time.monotonic() - vacuum_began
        vacuumed_pages = pages_of(queue)
        stats = queue.stats()
    report = compact_store(store)
    with Queue(store, do_recover=False, do_vacuum=False) as queue:
        compacted = pages_of(queue)
        problems = queue.verify()
    return {
        "jobs": jobs,
        "samples": samples,
        "empty": empty,
        "all_done": done_pages,
        "vacuumed_jobs": vacuumed,
        "vacuum_seconds": vacuum_seconds,
        "after_vacuum": vacuumed_pages,
        "after_compaction": compacted,
        "compaction_seconds": report.seconds,
        "full_copy_seconds": full_copy.seconds,
        "full_copy_bytes": full_copy.bytes_after,
        "final_stats": stats,
        "verify": problems,
    }


def soak_postgres(
    folder: Path, jobs: int, processes: int, backlog: int, every: float, store: RunStore
) -> dict[str, Any]:
    from tests.pgserver import connect

    with contextlib.closing(connect(str(store.target))) as conn, store.queue() as queue:
        empty = tables_of(conn)
        samples = run_worker(
            folder, queue, store.env, jobs, processes, backlog, every, lambda: tables_of(conn)
        )
        done = settled_tables(conn)
        began = time.monotonic()
        vacuumed = queue.vacuum(older_than=0)
        vacuum_seconds = time.monotonic() - began
        after_vacuum = settled_tables(conn)
        began = time.monotonic()
        queue._store._vacuum_check_due = 0.0  # due now, as it is every 30 s in a running process
        queue._store.maintain(flush=False)
        maintenance_seconds = time.monotonic() - began
        maintained = settled_tables(conn)
        stats = queue.stats()
        problems = queue.verify()
    return {
        "jobs": jobs,
        "samples": samples,
        "server": store.server_settings(),
        "empty": empty,
        "all_done": done,
        "vacuumed_jobs": vacuumed,
        "vacuum_seconds": vacuum_seconds,
        "after_vacuum": after_vacuum,
        "after_maintenance": maintained,
        "maintenance_seconds": maintenance_seconds,
        "final_stats": stats,
        "verify": problems,
    }


def run_worker(
    folder: Path,
    queue: Any,
    store_env: dict[str, str],
    jobs: int,
    processes: int,
    backlog: int,
    every: float,
    footprint: Callable[[], Pages | Tables],
) -> list[Sample]:
    """One ``queue_worker`` fed ``jobs`` jobs through ``queue``, sampled every ``every`` seconds until all
    are finished; then SIGTERM."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "QUEUE_MAX_CHAOS_DIR": str(folder),
           "QUEUE_MAX_CHAOS_LEASE_TIME": "30", "PYTHONPATH": str(ROOT), **store_env}  # fmt: skip
    samples: list[Sample] = []
    log = open(folder / "worker.log", "wb")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "queue_worker", "--processes", str(processes), "--no-scheduler",
         "--worker-id", "soak", "-v", "1"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(queue.workers()) < processes:  # measure the queue, not Python's start-up
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"queue_worker did not start; see {folder / 'worker.log'}")
            time.sleep(0.05)
        began = time.monotonic()
        put = 0
        next_sample = began
        payloads = [{"args": [], "kwargs": {}}] * BATCH
        while True:
            now = time.monotonic()
            if now >= next_sample:
                stats = queue.stats()
                finished = stats["done"] + stats["failed"]
                samples.append(Sample(now - began, put, finished, worker_memory(queue), footprint()))
                next_sample = now + every
                if finished >= jobs:
                    break
                if worker.poll() is not None:
                    raise RuntimeError(f"queue_worker exited with {worker.returncode}")
            if put < jobs and queue.stats()["pending"] < backlog:
                for _ in range(10):
                    count = min(BATCH, jobs - put)
                    if count <= 0:
                        break
                    queue.put_many(payloads[:count], name=TASK)
                    put += count
            else:
                time.sleep(min(0.01, every))
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        log.close()
    return samples


def verdict(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    samples: list[Sample] = result["samples"]
    n = result["jobs"]
    start = crossing(samples, 1)
    first = 0.1 * n / max(1e-9, crossing(samples, 0.1 * n) - start)
    last = 0.1 * n / max(1e-9, crossing(samples, n) - crossing(samples, 0.9 * n))
    overall = n / max(1e-9, crossing(samples, n) - start)
    ten = next(s for s in samples if s.finished >= 0.1 * n)
    end = samples[-1]
    common = set(ten.rss_anon_kib) & set(end.rss_anon_kib)
    mem_first = sum(ten.rss_anon_kib[k] for k in common)
    mem_last = sum(end.rss_anon_kib[k] for k in common)
    growth = mem_last / mem_first - 1 if mem_first else float("nan")
    footprint = postgres_verdict(result) if isinstance(result["empty"], Tables) else lmdb_verdict(result)
    return [
        (f"throughput: first 10% {first:,.0f} jobs/s, last 10% {last:,.0f} jobs/s (overall {overall:,.0f})",
         f"last/first {last / first:.2f}", abs(last / first - 1) <= 0.10),
        (f"worker RssAnon at 10% {mem_first / 1024:.1f} MiB, at the end {mem_last / 1024:.1f} MiB "
         f"({len(common)} processes, same pids)", f"growth {growth:+.1%}", growth <= 0.10),
        *footprint,
    ]  # fmt: skip


def lmdb_verdict(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    empty, vacuumed = result["empty"], result["after_vacuum"]
    pages_ratio = vacuumed.in_use / empty.in_use - 1
    compacted = result["after_compaction"]
    return [
        (f"pages in use: empty {empty.in_use:,}, all done {result['all_done'].in_use:,}, after vacuum "
         f"{vacuumed.in_use:,}", f"{pages_ratio:+.1%} vs empty", abs(pages_ratio) <= 0.10),
        (f"files: empty {empty.file_bytes / 2**20:.1f} MiB, all done "
         f"{result['all_done'].file_bytes / 2**20:.1f} MiB, after vacuum {vacuumed.file_bytes / 2**20:.1f} "
         f"MiB ({vacuumed.free:,} free pages), after "
         f"queue_compact {compacted.file_bytes / 2**20:.2f} MiB",
         f"compaction x{vacuumed.file_bytes / max(1, compacted.file_bytes):,.0f} smaller",
         compacted.file_bytes <= 1.1 * empty.file_bytes + 65536),
    ]  # fmt: skip


HOT = "qm_jobs"


def postgres_verdict(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The hot table does not grow with the jobs that pass through it: its largest size over the second
    half of the run within 10% (or 1 MiB) of its largest over the first half."""
    samples: list[Sample] = result["samples"]
    half = result["jobs"] / 2
    first = max(s.pages.bytes[HOT] for s in samples if s.finished < half)  # type: ignore[union-attr]
    second = max(s.pages.bytes[HOT] for s in samples if s.finished >= half)  # type: ignore[union-attr]
    dead = max(s.pages.dead[HOT] for s in samples)  # type: ignore[union-attr]
    maintained = result["after_maintenance"]
    return [
        (f"{HOT} (every job passed through it): largest {first / 2**20:.1f} MiB in the first half, "
         f"{second / 2**20:.1f} MiB in the second (at most {dead:,} dead rows), "
         f"{maintained.bytes[HOT] / 2**20:.1f} MiB after the store's maintenance",
         f"{second / max(1, first) - 1:+.1%}", second <= max(1.1 * first, first + 2**20)),
    ]  # fmt: skip


def footprint_cells(footprint: Pages | Tables) -> tuple[str, str]:
    """The sample table's last columns: header and cells."""
    if isinstance(footprint, Tables):
        return (
            f"{HOT} MiB | {HOT} dead rows | qm_finished MiB | all tables MiB |",
            f"{footprint.bytes[HOT] / 2**20:.1f} | {footprint.dead[HOT]:,} | "
            f"{footprint.bytes['qm_finished'] / 2**20:.1f} | {footprint.file_bytes / 2**20:.1f} |",
        )
    return (
        "pages in use | high-water pages | file MiB |",
        f"{footprint.in_use:,} | {footprint.high_water:,} | {footprint.file_bytes / 2**20:.1f} |",
    )


def table(result: dict[str, Any], rows: int = 10) -> list[str]:
    samples: list[Sample] = result["samples"]
    n = result["jobs"]
    out = [f"| jobs finished | time s | jobs/s since previous row | worker RssAnon MiB | "
           f"{footprint_cells(samples[0].pages)[0]}", "|---|---|---|---|---|---|---|" + "---|" * (
               isinstance(samples[0].pages, Tables))]  # fmt: skip
    previous: Sample | None = None
    for step in range(1, rows + 1):
        target = n * step / rows
        sample = next((s for s in samples if s.finished >= target), samples[-1])
        rate = (
            (sample.finished - previous.finished) / max(1e-9, sample.seconds - previous.seconds)
            if previous is not None
            else sample.finished / max(1e-9, sample.seconds - crossing(samples, 1))
        )
        out.append(
            f"| {sample.finished:,} | {sample.seconds:.1f} | {rate:,.0f} | "
            f"{sum(sample.rss_anon_kib.values()) / 1024:.1f} | {footprint_cells(sample.pages)[1]}"
        )
        previous = sample
    return out


STAGES = (("empty", "empty"), ("all_done", "all done"), ("after_vacuum", "after vacuum(older_than=0)"),
          ("after_maintenance", "after maintain()"))  # fmt: skip


def tables_table(result: dict[str, Any]) -> list[str]:
    """PostgreSQL: each table's size and dead rows (and vacuums so far) at each stage."""
    stages: list[Tables] = [result[key] for key, _title in STAGES]
    out = ["| table | " + " | ".join(title for _key, title in STAGES) + " |", "|---|" + "---|" * len(STAGES)]
    for name in stages[0].bytes:
        cells = [
            f"{t.bytes[name] / 2**20:,.2f} MiB, {t.dead.get(name, 0):,} dead, {t.vacuums.get(name, 0)} vac."
            for t in stages
        ]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [f"{t.file_bytes / 2**20:,.2f} MiB" for t in stages]
    out.append("| all | " + " | ".join(totals) + " |")
    return out


def closing_lines(result: dict[str, Any]) -> list[str]:
    verify = result["verify"] or "clean"
    if "after_compaction" not in result:
        return [
            *tables_table(result),
            f"vacuum: {result['vacuumed_jobs']:,} jobs in {result['vacuum_seconds']:.1f}s; maintain(): "
            f"{result['maintenance_seconds']:.2f}s; verify after: {verify}",
        ]
    return [
        f"vacuum: {result['vacuumed_jobs']:,} jobs in {result['vacuum_seconds']:.1f}s; queue_compact: "
        f"{result['compaction_seconds']:.2f}s; verify after: {verify}",
        f"compacting copy of the full store (all jobs done, before the vacuum): "
        f"{result['full_copy_bytes'] / 2**20:.1f} MiB in {result['full_copy_seconds']:.1f}s",
    ]


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples: list[Sample] = result["samples"]
    t = [s.seconds for s in samples]
    rate = [0.0] + [
        (b.finished - a.finished) / max(1e-9, b.seconds - a.seconds) for a, b in itertools.pairwise(samples)
    ]
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    axes[0].plot(t, rate)
    axes[0].set_ylabel("jobs/s")
    axes[1].plot(t, [sum(s.rss_anon_kib.values()) / 1024 for s in samples])
    axes[1].set_ylabel("workers' RssAnon MiB")
    if isinstance(samples[0].pages, Tables):
        axes[2].plot(t, [s.pages.bytes[HOT] / 2**20 for s in samples], label=HOT)  # type: ignore[union-attr]
        axes[2].plot(t, [s.pages.file_bytes / 2**20 for s in samples], label="all tables")
        axes[2].set_ylabel("MiB")
    else:
        axes[2].plot(t, [s.pages.in_use for s in samples], label="in use")  # type: ignore[union-attr]
        axes[2].plot(t, [s.pages.high_water for s in samples], label="high water")  # type: ignore[union-attr]
        axes[2].set_ylabel("pages")
    axes[2].set_xlabel("seconds")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=2, help="queue_worker --processes")
    parser.add_argument("--backlog", type=int, default=20_000, help="at most this many jobs waiting")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--dir", type=Path, help="where the store goes (default: a new temp dir)")
    parser.add_argument("--json", type=Path, help="also write every sample here")
    parser.add_argument("--plot", type=Path, help="draw throughput, memory and pages here (needs matplotlib)")
    add_options(parser)
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="queue-max-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.jobs:,} jobs, queue_worker --processes {args.processes}, in {folder}", flush=True)
    with open_store(args.store, folder, args.url, settings=args.server_setting) as store:
        if store.kind != "lmdb":
            print(store.describe(), flush=True)
        result = soak(folder, args.jobs, args.processes, args.backlog, args.every, store)
    print("\n".join(table(result)))
    checks = verdict(result)
    for what, figure, ok in checks:
        print(f"{'met' if ok else 'NOT MET'}: {what}: {figure}")
    print("\n".join(closing_lines(result)))
    if args.plot is not None:
        print(f"plot: {args.plot}" if plot(result, args.plot) else "plot: matplotlib is not installed")
    if args.json is not None:
        data = {**result, "samples": [asdict(s) for s in result["samples"]]}
        for key, value in result.items():
            if isinstance(value, Pages | Tables):
                data[key] = asdict(value)
        data["checks"] = [{"what": w, "figure": f, "met": ok} for w, f, ok in checks]
        args.json.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0 if all(ok for _w, _f, ok in checks) and not result["verify"] else 1


if __name__ == "__main__":
    sys.exit(main())
