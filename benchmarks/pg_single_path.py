"""The PostgreSQL store's one-job-at-a-time paths beside pgqueuer's, in one run (issue 35):

    uv run --group bench python benchmarks/pg_single_path.py
    uv run --group bench python benchmarks/pg_single_path.py --jobs 3000 --rounds 5 --only drain,put

Four measures, each a set of rounds that alternate ours and theirs (the order flips every round), so that
the load of a shared machine falls on both alike; each prints the rounds and the median of the per-round
ratios:

- drain: N jobs prefilled (untimed), then one ``get(timeout=0)`` + ``ack()`` per job, one thread, the
  engine's ``Queue`` (what ``django.tasks``' ``DatabaseBackend``-style callers and a one-thread consumer
  run). pgqueuer: ``Queries.dequeue(batch_size=1)`` + ``log_jobs`` of that one job, its single path; and,
  for reference, ``dequeue(batch_size=10)`` + one ``log_jobs`` of the ten, its default batch, which is
  what its worker runs.
- put: one ``.delay()`` of a no-op task (the Django layer, ``QUEUE_MAX = {"STORE": "postgresql",
  "DATABASE": "default"}``), each its own commit, against pgqueuer's ``Queries.enqueue("noop", None)``.
- atomic: ``.delay()`` inside ``transaction.atomic()`` against ``Row.objects.create(n=1)`` inside
  ``atomic()`` (a one-integer row), the same database and connection.
- pickup: a consumer process blocked in ``Queue.get(timeout=...)``; the producer puts one job every
  ~30-50 ms; pickup = the consumer's clock when ``get`` returned - the producer's when ``put`` returned
  (one machine, one clock); p50 and p99.

Each system gets a fresh database on the server of ``--url`` (``qm_single_ours``, ``qm_single_pgq``,
dropped first and afterwards). pgqueuer runs on asyncpg, driven from one event loop (its API is async).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from peers_postgres import fresh_database  # noqa: E402  (benchmarks/ is not a package)

OURS_DB = "qm_single_ours"
PGQ_DB = "qm_single_pgq"
MEASURES = ("drain", "put", "atomic", "pickup")
PICKUP_QUEUE = "pickup"  # its own: the other measures leave jobs in the default queue


def median_ratio(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """Per-round ratios ours / theirs: (median, min, max)."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def alternate(rounds: int, a: Callable[[], float], b: Callable[[], float]) -> tuple[list[float], list[float]]:
    """``rounds`` of ``a`` and ``b``, the order flipped every round. -> their figures."""
    first: list[float] = []
    second: list[float] = []
    for index in range(rounds):
        if index % 2 == 0:
            first.append(a())
            second.append(b())
        else:
            second.append(b())
            first.append(a())
    return first, second


class Pgq:
    """pgqueuer's Queries on one asyncpg connection, run on a private event loop."""

    def __init__(self, url: str) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        pgq = str(Path(sys.executable).parent / "pgq")
        subprocess.run([pgq, "install"], env={**os.environ, "PGDSN": url}, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self.conn = self.run(asyncpg.connect(url))
        self.queries = Queries(AsyncpgDriver(self.conn))
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        self.entrypoints = {"noop": EntrypointExecutionParameter(concurrency_limit=0)}
        self.qm_id = uuid.uuid4()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def fill(self, n: int) -> None:
        for start in range(0, n, 1000):
            count = min(1000, n - start)
            self.run(self.queries.enqueue(["noop"] * count, [None] * count, [0] * count))

    def drain(self, n: int, batch: int) -> float:
        async def go() -> int:
            done = 0
            while True:
                jobs = await self.queries.dequeue(
                    batch_size=batch, entrypoints=self.entrypoints, queue_manager_id=self.qm_id,
                    global_concurrency_limit=None, heartbeat_timeout=timedelta(seconds=30),
                )  # fmt: skip
                if not jobs:
                    return done
                await self.queries.log_jobs([(job, "successful", None) for job in jobs])
                done += len(jobs)

        self.fill(n)
        began = time.perf_counter()
        done = self.run(go())
        assert done == n, (done, n)
        return n / (time.perf_counter() - began)

    def puts(self, n: int) -> float:
        async def go() -> None:
            for _ in range(n):
                await self.queries.enqueue("put", None)  # not drained: another entrypoint

        began = time.perf_counter()
        self.run(go())
        return n / (time.perf_counter() - began)

    def close(self) -> None:
        self.run(self.conn.close())
        self.loop.close()


class Ours:
    """This project through Django: the engine's Queue for the drain, ``.delay()`` for the puts."""

    def __init__(self, url: str) -> None:
        os.environ["BENCH_PG_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_project.pg_settings"
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from benchmarks.bench_project.bench_app import tasks
        from benchmarks.bench_project.bench_app.models import Row
        from queue_max_django.conf import get_queue

        self.url, self.tasks, self.row, self.queue = url, tasks, Row, get_queue()

    def drain(self, n: int) -> float:
        queue = self.queue
        before = queue.stats()["pending"]  # the puts' jobs, if any: left as they were
        for start in range(0, n, 1000):
            queue.put_many([None] * min(1000, n - start))
        began = time.perf_counter()
        for _ in range(n):
            queue.get(timeout=0).ack(None)
        rate = n / (time.perf_counter() - began)
        assert queue.stats()["pending"] == before
        return rate

    def puts(self, n: int) -> float:
        delay = self.tasks.noop.delay
        began = time.perf_counter()
        for _ in range(n):
            delay()
        return n / (time.perf_counter() - began)

    def atomic_pair(self, n: int) -> tuple[Callable[[], float], Callable[[], float]]:
        from django.db import transaction

        atomic, delay, create = transaction.atomic, self.tasks.noop.delay, self.row.objects.create

        def delays() -> float:
            began = time.perf_counter()
            for _ in range(n):
                with atomic():
                    delay()
            return (time.perf_counter() - began) / n * 1e6

        def creates() -> float:
            began = time.perf_counter()
            for _ in range(n):
                with atomic():
                    create(n=1)
            return (time.perf_counter() - began) / n * 1e6

        return delays, creates

    def pickup(self, samples: int) -> list[float]:
        consumer = subprocess.Popen(
            [sys.executable, __file__, "--consumer", self.url, str(samples + 1)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            assert consumer.stdout is not None
            assert consumer.stdout.readline().strip() == "ready"
            self.queue.put("warm-up", queue=PICKUP_QUEUE)
            json.loads(consumer.stdout.readline())  # it took a job: its claim is warm and it waits again
            time.sleep(0.5)
            returned: dict[int, float] = {}
            for index in range(samples):
                self.queue.put(index, queue=PICKUP_QUEUE)
                returned[index] = time.time()
                time.sleep(0.03 + random.random() * 0.02)
            taken: dict[int, float] = {}
            for _ in range(samples):
                index, when = json.loads(consumer.stdout.readline())
                taken[index] = when
            consumer.wait(30)
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.wait()
        return [(taken[index] - returned[index]) * 1000 for index in range(samples)]

    def close(self) -> None:
        from django.db import connections

        self.queue.close()
        connections.close_all()


def consumer_main(url: str, count: int) -> None:
    """The pickup's consumer: ``count`` jobs, each printed as [its payload, time.time() when get returned]."""
    from queue_max_django.engine import Queue

    with Queue(url, do_recover=False, do_vacuum=False) as queue:
        print("ready", flush=True)
        for _ in range(count):
            record = queue.get(timeout=60, queues=[PICKUP_QUEUE])
            when = time.time()
            record.ack(None)
            print(json.dumps([record.payload, when]), flush=True)


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def show(title: str, a: list[float], b: list[float], a_name: str, b_name: str) -> None:
    middle, low, high = median_ratio(a, b)
    print(f"{title} ({load()}):\n  {a_name}: {[round(x) for x in a]}\n  {b_name}: {[round(x) for x in b]}\n"
          f"  {a_name} / {b_name}: {middle:.2f}x (rounds {low:.2f}-{high:.2f})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server where this may CREATE and DROP databases qm_single_*")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per drain round")
    parser.add_argument("--puts", type=int, default=500, help="single puts per round")
    parser.add_argument("--atomic", type=int, default=300, help="calls per atomic round")
    parser.add_argument("--pickup", type=int, default=100, help="pickup samples")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(MEASURES), help="comma-separated: " + ",".join(MEASURES))
    parser.add_argument("--consumer", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        consumer_main(args.consumer[0], int(args.consumer[1]))
        return
    only = set(args.only.split(","))
    import psycopg

    with psycopg.connect(args.url, autocommit=True) as conn:
        names = ("server_version", "synchronous_commit", "fsync")
        server = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in names}  # type: ignore[index]
    print(f"{os.uname().nodename}: {os.cpu_count()} CPUs, PostgreSQL {server}; {load()}", flush=True)
    with fresh_database(args.url, OURS_DB) as ours_url, fresh_database(args.url, PGQ_DB) as pgq_url:
        ours, pgq = Ours(ours_url), Pgq(pgq_url)
        try:
            ours.drain(200), pgq.drain(200, 1), ours.puts(50), pgq.puts(50)  # warm: statements prepared
            if "drain" in only:
                a, b = alternate(args.rounds, lambda: ours.drain(args.jobs), lambda: pgq.drain(args.jobs, 1))
                show(f"drain, get+ack one job at a time, {args.jobs} jobs a round, jobs/s", a, b,
                     "ours", "pgqueuer, batch 1")  # fmt: skip
                batched = [round(pgq.drain(args.jobs, 10)) for _ in range(max(args.rounds // 2, 1))]
                print(f"  pgqueuer batch 10 (its default), for reference: {batched} jobs/s", flush=True)
            if "put" in only:
                a, b = alternate(args.rounds, lambda: ours.puts(args.puts), lambda: pgq.puts(args.puts))
                show(f"single put, {args.puts} a round, puts/s", a, b, "ours .delay()", "pgqueuer enqueue")
            if "atomic" in only:
                delays, creates = ours.atomic_pair(args.atomic)
                delays(), creates()  # warm
                a, b = alternate(args.rounds, delays, creates)
                show(f"in transaction.atomic(), {args.atomic} a round, us per call", a, b,
                     ".delay()", "Row.objects.create()")  # fmt: skip
            if "pickup" in only:
                ms = sorted(ours.pickup(args.pickup))
                p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
                print(f"idle pickup from the put's return, {args.pickup} samples ({load()}): "
                      f"p50 {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms, max {ms[-1]:.2f} ms",
                      flush=True)  # fmt: skip
        finally:
            ours.close()
            pgq.close()


if __name__ == "__main__":
    main()
