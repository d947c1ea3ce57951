"""This project on PostgreSQL (and on LMDB for reference) side by side with the queues a Django team would
otherwise deploy on several machines: procrastinate, pgqueuer and django-tasks-db on PostgreSQL, Celery and
RQ on Redis. One run, one machine, each system with its own worker command and 2 worker processes, one
no-op task (issue 17).

    uv run --group bench python benchmarks/peers_postgres.py --quick            # ~3-6 min, busy 2-core VM
    uv run --group bench python benchmarks/peers_postgres.py --json out.json    # the full run, ~25 minutes
    uv run --group bench python benchmarks/peers_postgres.py --only ours_pg,pgqueuer --quick
    uv run --group bench python benchmarks/peers_postgres.py --only ours_pg,pgqueuer --depths 20000,100000

Each PostgreSQL system gets a fresh database on the server of ``--url`` (``CREATE DATABASE qm_peer_<name>``,
dropped afterwards); the Redis systems a flushed database of the Redis at ``--redis-url``, or of a
``redis-server`` this script starts on a free port (no persistence) when none answers there. A system
whose package is missing is skipped. Four measures per system:

- end to end: N jobs prefilled (untimed, in a child process), then the worker command drains them. "busy"
  = N / (first job started -> last job finished) from the system's own records (ours: started_at and
  finished_at; procrastinate: its procrastinate_events; pgqueuer: its pgqueuer_log; django-tasks-db:
  started_at and finished_at; RQ: the job hashes), or, for Celery, which records nothing without a result
  backend, by polling the broker's list and ``unacked`` hash every 5 ms (start: the first message taken;
  end: none waiting or unacknowledged, the last few no-ops still running at most). "wall" = N / (command
  launched -> all done): with start-up.
- enqueue: ``single`` jobs one call each (each its own commit on PostgreSQL), then ``batched`` jobs in calls
  of 100 through the system's batch API (ours ``.map()``, procrastinate ``batch_defer``, pgqueuer
  ``Queries.enqueue`` of lists, Celery ``group().apply_async()``, RQ ``enqueue_many``; django-tasks has
  none), from one fresh process with nothing else running.
- idle pickup: the same worker command (without its exit-when-empty option) idle; one job put every
  ~60 ms; pickup = the time the system recorded the job started - the producer's clock just before the put
  call, so the put's own commit is included (p50, p99: the figure the target is read on); printed beside
  it, the put's own time and the pickup counted from the put's return (what is left to the worker).
- ours only: ``.delay()`` inside ``transaction.atomic()`` against ``Row.objects.create()`` of a one-integer
  row in its own ``atomic()``, the same database, alternating rounds; the ratio is per round, then the
  median.

How each peer is configured (each as its documentation recommends for throughput, 2 processes each):
- ours: ``queue_worker --burst --processes 2 --no-scheduler``, ``QUEUE_MAX = {"STORE": "postgresql",
  "DATABASE": "default"}`` (bench_project/pg_settings.py); LMDB: worker_bench.py's run.
- procrastinate 3.10: 2 x ``procrastinate worker --one-shot --concurrency 10`` (async no-op task, so the
  concurrency is coroutines; LISTEN/NOTIFY on, its default), PsycopgConnector, jobs kept (its default).
- pgqueuer 1.6: 2 x ``pgqueuer.run(factory, batch_size=10, mode=drain)`` on uvloop, what ``pgq run`` runs
  (bench_project/pgqueuer_app.py says why not ``pgq run`` itself); batch 10 is its default and its own
  benchmark's; asyncpg, async no-op entrypoint, durable tables (its default).
- django-tasks-db 0.13: 2 x ``db_worker --batch --no-startup-delay --interval 0.01`` (a 10 ms poll instead
  of its 1 s default), as in worker_bench.py.
- Celery 5.7: 2 x ``celery worker -P solo --without-gossip --without-mingle --without-heartbeat``,
  ``task_ignore_result``, ``worker_prefetch_multiplier = 64`` (the "Optimizing" guide: many short tasks want
  a large prefetch), early acknowledgement (its default). Two solo workers ran a no-op about 3x as fast
  here as one ``-P prefork -c 2`` (whose every task crosses a pipe to a pool process and back).
- RQ 2.12: 2 x ``rq worker --burst -w rq.worker.SimpleWorker`` (the worker class that runs a job in the
  worker process instead of forking a work horse per job: for a no-op the fork is all the time).

Targets (issue 17), as same-run ratios of busy rates: >= 1.0x pgqueuer, >= 10x procrastinate, >= 20x
django-tasks-db, >= 1.5x Celery; idle pickup p50 <= 5 ms; transactional ``.delay()`` <= 2x an ORM insert.
Figures, the machine and what they mean are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import worker_bench  # noqa: E402  (benchmarks/ is not a package)

PG_SETTINGS = "benchmarks.bench_project.pg_settings"
OUR_TASK = worker_bench.OUR_TASK
PROCRASTINATE_APP = "benchmarks.bench_project.procrastinate_app.app"
PGQUEUER_WORKER = "benchmarks.bench_project.pgqueuer_app"
CELERY_APP = "benchmarks.bench_project.celery_app"
BIN = Path(sys.executable).parent
BATCH = 100
FULL = {
    "drain": {"ours_pg": 100_000, "ours_lmdb": 100_000, "pgqueuer": 100_000, "celery": 20_000,
              "rq": 10_000, "procrastinate": 10_000, "tasks_db": 2_000},
    "single": 2_000, "batched": 20_000, "pickup": 200, "atomic": 500, "atomic_rounds": 6,
}  # fmt: skip
QUICK = {
    "drain": {"ours_pg": 20_000, "ours_lmdb": 20_000, "pgqueuer": 20_000, "celery": 5_000,
              "rq": 3_000, "procrastinate": 2_000, "tasks_db": 500},
    "single": 500, "batched": 5_000, "pickup": 50, "atomic": 200, "atomic_rounds": 3,
}  # fmt: skip
LABELS = {
    "ours_pg": "queue_max_django, PostgreSQL: queue_worker --burst --processes 2",
    "ours_lmdb": "queue_max_django, LMDB (reference): queue_worker --burst --processes 2",
    "pgqueuer": "pgqueuer 1.6: 2 x pgqueuer.run(batch_size=10), asyncpg",
    "procrastinate": "procrastinate 3.10: 2 x procrastinate worker --concurrency 10",
    "tasks_db": "django-tasks-db 0.13: 2 x db_worker --batch (PostgreSQL)",
    "celery": "Celery 5.7 on Redis: 2 x celery worker -P solo, prefetch 64",
    "rq": "RQ 2.12 on Redis: 2 x rq worker --burst (SimpleWorker)",
}
NEEDS = {
    "procrastinate": "procrastinate",
    "pgqueuer": "pgqueuer",
    "tasks_db": "django_tasks_db",
    "celery": "celery",
    "rq": "rq",
}
TARGETS = {"pgqueuer": 1.0, "procrastinate": 10.0, "tasks_db": 20.0, "celery": 1.5}
PICKUP_TARGET_MS = 5.0
ATOMIC_TARGET = 2.0


# ---------------------------------------------------------------------------------------------- plumbing


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextlib.contextmanager
def fresh_database(admin_url: str, name: str) -> Iterator[str]:
    """``CREATE DATABASE name`` on the server of ``admin_url`` (dropped first if left over); dropped after."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(url: str) -> Iterator[str]:
    """The Redis at ``url`` if it answers PING; otherwise Debian's redis-server on a free port, no
    persistence, stopped afterwards. -> the URL to use."""
    import redis

    with contextlib.suppress(redis.RedisError):
        if redis.Redis.from_url(url, socket_connect_timeout=1).ping():
            yield url
            return
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    started = urlunsplit(urlsplit(url)._replace(netloc=f"127.0.0.1:{port}"))
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.RedisError):
                if redis.Redis.from_url(started).ping():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer within 10 s")
            time.sleep(0.05)
        print(f"(started redis-server on port {port}: nothing answered at {url})", flush=True)
        yield started
    finally:
        worker_bench.stop(proc)  # type: ignore[arg-type]


def env_for(pg_url: str | None, redis_url: str | None) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": PG_SETTINGS, "PYTHONPATH": str(ROOT)}
    if pg_url:
        env["BENCH_PG_URL"] = pg_url
        env["PGDSN"] = pg_url  # pgqueuer's CLI
    if redis_url:
        env["BENCH_REDIS_URL"] = redis_url
    return env


def launch(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a worker command in its own process group, its output in a temporary file (a pipe nobody reads
    would fill and stop it)."""
    log = tempfile.TemporaryFile()  # noqa: SIM115  (closed with the process object)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=log)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def output_of(proc: subprocess.Popen[bytes]) -> str:
    log = proc.log  # type: ignore[attr-defined]
    log.seek(0)
    return str(log.read().decode(errors="replace")[-2000:])


def wait_all(procs: list[subprocess.Popen[bytes]], limit: float) -> None:
    deadline = time.monotonic() + limit
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for other in procs:
                worker_bench.stop(other)
            raise RuntimeError(f"{proc.args!r} did not finish within {limit:.0f} s") from None
        if proc.returncode != 0:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}: {output_of(proc)}")


def child(system: str, action: str, env: dict[str, str], *args: Any) -> Any:
    """Run ``--child system action args`` in a fresh interpreter; -> the JSON it printed last."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", system, action, *map(str, args)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
    )
    lines = out.stdout.decode().strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def pg_one(url: str, sql: str) -> Any:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchone()


def busy_from_epochs(n: int, done: int, first: float | None, last: float | None, name: str) -> float:
    if done != n or first is None or last is None:
        raise RuntimeError(f"{name}: {done} done of {n}")
    return n / (last - first)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


# ---------------------------------------------------------------------------------------------- systems


class System:
    """One queue under test: its store's set-up, its worker command, and where it records what it ran."""

    name = ""
    store = "postgres"  # or "redis", "lmdb"

    def __init__(self, pg_url: str | None, redis_url: str | None) -> None:
        self.pg_url, self.redis_url = pg_url, redis_url
        self.env = env_for(pg_url, redis_url)

    def busy_from_sql(self, n: int, sql: str) -> float:
        """``busy`` read from this system's own records in its database: one row of (jobs done, the first
        start, the last finish), the times as epochs."""
        assert self.pg_url
        done, first, last = pg_one(self.pg_url, sql)
        first, last = (None if value is None else float(value) for value in (first, last))
        return busy_from_epochs(n, done, first, last, self.name)

    def setup(self) -> None:
        """Create the system's tables (PostgreSQL) or empty its Redis database."""

    def prefill(self, n: int) -> None:
        child(self.name, "prefill", self.env, n)

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        raise NotImplementedError

    def drain(self, n: int) -> dict[str, Any]:
        self.prefill(n)
        began = time.monotonic()
        procs = self.workers(burst=True)
        try:
            wait_all(procs, 1800)
        finally:
            for proc in procs:
                worker_bench.stop(proc)
        wall = time.monotonic() - began
        return {"n": n, "busy_per_s": self.busy(n), "wall_per_s": n / wall}

    def busy(self, n: int) -> float:
        raise NotImplementedError

    def pickup(self, samples: int) -> dict[str, Any]:
        procs = self.workers(burst=False)
        try:
            return dict(child(self.name, "pickup", self.env, samples))
        finally:
            for proc in procs:
                worker_bench.stop(proc)

    def enqueue(self, single: int, batched: int) -> dict[str, Any]:
        return dict(child(self.name, "enqueue", self.env, single, batched))


class OursPg(System):
    name = "ours_pg"

    def setup(self) -> None:
        child(self.name, "migrate", self.env)

    def prefill(self, n: int) -> None:
        from queue_max_django.engine import Queue

        assert self.pg_url
        with Queue(self.pg_url) as queue:
            for start in range(0, n, 10_000):
                queue.put_many([{"args": [], "kwargs": {}}] * min(10_000, n - start), name=OUR_TASK)

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        args = ["queue_worker", "--processes", "2", "--no-scheduler", "-v", "0"]
        return [launch([sys.executable, "-m", "django", *args, *(["--burst"] if burst else [])], self.env)]

    def busy(self, n: int) -> float:
        from queue_max_django.engine import Queue

        assert self.pg_url
        with Queue(self.pg_url) as queue:
            done = queue.stats()["done"]
            first, last = worker_bench.span(queue)
        return busy_from_epochs(n, done, first, last, self.name)

    def atomic(self, count: int, rounds: int) -> dict[str, Any]:
        return dict(child(self.name, "atomic", self.env, count, rounds))


class OursLmdb(System):
    """The LMDB store, for reference: worker_bench.py's end-to-end run, in a temporary directory."""

    name = "ours_lmdb"
    store = "lmdb"

    def __init__(self, pg_url: str | None, redis_url: str | None) -> None:
        super().__init__(None, None)
        self.folder = Path(tempfile.mkdtemp(prefix="qm-peers-lmdb-"))
        self.env = worker_bench.env_for(self.folder)

    def drain(self, n: int) -> dict[str, Any]:
        return worker_bench.bench_ours(self.folder, n)

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        args = ["queue_worker", "--processes", "2", "--no-scheduler", "-v", "0"]
        return [launch([sys.executable, "-m", "django", *args, *(["--burst"] if burst else [])], self.env)]

    def teardown(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


class Procrastinate(System):
    name = "procrastinate"

    def setup(self) -> None:
        subprocess.run(
            [str(BIN / "procrastinate"), f"--app={PROCRASTINATE_APP}", "schema", "--apply"],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        argv = [str(BIN / "procrastinate"), f"--app={PROCRASTINATE_APP}", "worker", "--concurrency", "10"]
        argv += ["--one-shot"] if burst else []
        return [launch(argv, self.env) for _ in range(2)]

    def busy(self, n: int) -> float:
        return self.busy_from_sql(
            n,
            "SELECT count(*) FILTER (WHERE type = 'succeeded'), "
            "extract(epoch FROM min(at) FILTER (WHERE type = 'started')), "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) FROM procrastinate_events",
        )


class Pgqueuer(System):
    name = "pgqueuer"

    def setup(self) -> None:
        subprocess.run(
            [str(BIN / "pgq"), "install"],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        argv = [sys.executable, "-m", PGQUEUER_WORKER, "--batch-size", "10", *(["--drain"] if burst else [])]
        return [launch(argv, self.env) for _ in range(2)]

    def busy(self, n: int) -> float:
        return self.busy_from_sql(
            n,
            "SELECT count(*) FILTER (WHERE status = 'successful'), "
            "extract(epoch FROM min(created) FILTER (WHERE status = 'picked')), "
            "extract(epoch FROM max(created) FILTER (WHERE status = 'successful')) FROM pgqueuer_log",
        )


class TasksDb(System):
    name = "tasks_db"

    def setup(self) -> None:
        child(self.name, "migrate", self.env)

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        argv = [sys.executable, "-m", "django", "db_worker", "--no-startup-delay", "--interval", "0.01"]
        argv += ["--batch"] if burst else []
        return [launch([*argv, "--worker-id", f"w{i}"], self.env) for i in range(2)]

    def busy(self, n: int) -> float:
        return self.busy_from_sql(
            n,
            "SELECT count(*), extract(epoch FROM min(started_at)), extract(epoch FROM max(finished_at)) "
            "FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'",
        )


class RedisSystem(System):
    store = "redis"

    def setup(self) -> None:
        import redis

        assert self.redis_url
        redis.Redis.from_url(self.redis_url).flushdb()


class CelerySystem(RedisSystem):
    name = "celery"

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        argv = [
            str(BIN / "celery"),
            "-A",
            CELERY_APP,
            "worker",
            "-P",
            "solo",
            "-l",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return [launch([*argv, "-n", f"w{i}@%h"], self.env) for i in range(2)]

    def drain(self, n: int) -> dict[str, Any]:
        """Celery has no exit-when-empty mode and no record without a result backend: poll the broker."""
        import redis

        assert self.redis_url
        self.prefill(n)
        broker = redis.Redis.from_url(self.redis_url)

        def left() -> int:
            with broker.pipeline() as pipe:
                pipe.llen("celery")
                pipe.hlen("unacked")
                waiting, unacked = pipe.execute()
            return int(waiting) + int(unacked)

        began = time.monotonic()
        procs = self.workers(burst=True)
        first = None
        try:
            deadline = began + 1800
            while time.monotonic() < deadline:
                remaining = left()
                now = time.monotonic()
                if first is None and remaining < n:
                    first = now
                if remaining == 0:
                    break
                if any(proc.poll() is not None for proc in procs):
                    raise RuntimeError(f"a celery worker exited, {remaining} left: {output_of(procs[0])}")
                time.sleep(worker_bench.POLL)
            else:
                raise RuntimeError("celery did not drain its queue in time")
        finally:
            for proc in procs:
                worker_bench.stop(proc)
        assert first is not None
        return {"n": n, "busy_per_s": n / (now - first), "wall_per_s": n / (now - began)}


class RqSystem(RedisSystem):
    name = "rq"

    def workers(self, burst: bool) -> list[subprocess.Popen[bytes]]:
        assert self.redis_url
        argv = [str(BIN / "rq"), "worker", "--url", self.redis_url, "-w", "rq.worker.SimpleWorker", "-q"]
        argv += ["--burst"] if burst else []
        return [launch(argv, self.env) for _ in range(2)]

    def busy(self, n: int) -> float:
        import redis
        from rq import Queue

        assert self.redis_url
        conn = redis.Redis.from_url(self.redis_url)
        ids = Queue(connection=conn).finished_job_registry.get_job_ids()
        first, last = float("inf"), 0.0
        for start in range(0, len(ids), 5_000):
            with conn.pipeline() as pipe:
                for job_id in ids[start : start + 5_000]:
                    pipe.hmget(f"rq:job:{job_id}", "started_at", "ended_at")
                for started, ended in pipe.execute():
                    first = min(first, rq_time(started))
                    last = max(last, rq_time(ended))
        return busy_from_epochs(n, len(ids), first, last, self.name)


def rq_time(value: bytes | str | dt.datetime) -> float:
    """An RQ timestamp (UTC, ISO format in the job hash, or a datetime) -> unix seconds."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


SYSTEMS: dict[str, type[System]] = {
    "ours_pg": OursPg,
    "ours_lmdb": OursLmdb,
    "pgqueuer": Pgqueuer,
    "procrastinate": Procrastinate,
    "tasks_db": TasksDb,
    "celery": CelerySystem,
    "rq": RqSystem,
}


# ---------------------------------------------------------------------------------------------- child mode:
# clients that put jobs and read when they started, one per system, in a fresh interpreter


class Client:
    has_batch_api = True

    def put(self) -> Any:
        raise NotImplementedError

    def put_batch(self, count: int) -> None:
        raise NotImplementedError

    def started(self, ids: list[Any]) -> dict[Any, float]:
        """-> {job id: unix seconds it started} for those of ``ids`` that have."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class OursClient(Client):
    def __init__(self) -> None:
        import django

        django.setup()
        from benchmarks.bench_project.bench_app import tasks
        from queue_max_django.conf import get_queue

        self.tasks, self.queue = tasks, get_queue()

    def put(self) -> Any:
        return self.tasks.noop.delay().job_id

    def put_batch(self, count: int) -> None:
        self.tasks.noop_each.map(range(count))

    def started(self, ids: list[Any]) -> dict[Any, float]:
        jobs = {job_id: self.queue.job(job_id) for job_id in ids}
        return {job_id: job.started_at for job_id, job in jobs.items() if job and job.started_at is not None}


class TasksDbClient(Client):
    has_batch_api = False  # django.tasks has enqueue() only

    def __init__(self) -> None:
        import django

        django.setup()
        from benchmarks.bench_project.bench_app.tasks import tasks_noop

        self.task = tasks_noop

    def put(self) -> Any:
        return self.task.enqueue().id

    def put_batch(self, count: int) -> None:
        """Only for the prefill: ``count`` enqueue() calls in one transaction."""
        from django.db import transaction

        with transaction.atomic():
            for _ in range(count):
                self.task.enqueue()

    def started(self, ids: list[Any]) -> dict[Any, float]:
        from django_tasks_db.models import DBTaskResult

        rows = DBTaskResult.objects.filter(id__in=ids, started_at__isnull=False).values_list(
            "id", "started_at"
        )
        return {str(job_id): when.timestamp() for job_id, when in rows}


class ProcrastinateClient(Client):
    def __init__(self) -> None:
        from benchmarks.bench_project import procrastinate_app

        self.app = procrastinate_app.app
        self.app.open()
        self.task = procrastinate_app.noop

    def put(self) -> Any:
        return self.task.defer()

    def put_batch(self, count: int) -> None:
        self.task.batch_defer(*[{} for _ in range(count)])

    def started(self, ids: list[Any]) -> dict[Any, float]:
        import psycopg

        with psycopg.connect(os.environ["BENCH_PG_URL"]) as conn:
            rows = conn.execute(
                "SELECT job_id, extract(epoch FROM at) FROM procrastinate_events "
                "WHERE type = 'started' AND job_id = ANY(%s)",
                (ids,),
            ).fetchall()
        return {job_id: float(when) for job_id, when in rows}

    def close(self) -> None:
        self.app.close()


class PgqueuerClient(Client):
    """pgqueuer's Queries over asyncpg, driven from a private event loop (its API is async)."""

    def __init__(self) -> None:
        import asyncio

        import asyncpg
        from pgqueuer.queries import Queries

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(os.environ["BENCH_PG_URL"]))
        from pgqueuer.db import AsyncpgDriver

        self.queries = Queries(AsyncpgDriver(self.conn))

    def put(self) -> Any:
        return int(self.loop.run_until_complete(self.queries.enqueue("noop", None))[0])

    def put_batch(self, count: int) -> None:
        self.loop.run_until_complete(self.queries.enqueue(["noop"] * count, [None] * count, [0] * count))

    def started(self, ids: list[Any]) -> dict[Any, float]:
        rows = self.loop.run_until_complete(
            self.conn.fetch(
                "SELECT job_id, extract(epoch FROM created)::float8 AS at FROM pgqueuer_log "
                "WHERE status = 'picked' AND job_id = ANY($1::bigint[])",
                ids,
            )
        )
        return {row["job_id"]: float(row["at"]) for row in rows}

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


class CeleryClient(Client):
    def __init__(self) -> None:
        from benchmarks.bench_project import celery_app

        self.module = celery_app
        self.producer_pool = celery_app.app.producer_or_acquire

    def put(self) -> Any:
        key = f"stamp:{time.time_ns()}"
        self.module.stamp.delay(key)
        return key

    def put_prefill(self, count: int) -> None:
        with self.producer_pool() as producer:
            for _ in range(count):
                self.module.noop.apply_async(producer=producer)

    def put_batch(self, count: int) -> None:
        from celery import group

        group(self.module.noop.s() for _ in range(count)).apply_async()

    def started(self, ids: list[Any]) -> dict[Any, float]:
        values = self.module._stamps.mget(ids)
        return {key: float(value) for key, value in zip(ids, values, strict=True) if value is not None}


class RqClient(Client):
    def __init__(self) -> None:
        import redis
        from rq import Queue

        from benchmarks.bench_project import rq_app

        self.conn = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        self.queue = Queue(connection=self.conn)
        self.func = rq_app.noop

    def put(self) -> Any:
        return self.queue.enqueue(self.func).id

    def put_batch(self, count: int) -> None:
        from rq import Queue

        self.queue.enqueue_many([Queue.prepare_data(self.func) for _ in range(count)])

    def started(self, ids: list[Any]) -> dict[Any, float]:
        with self.conn.pipeline() as pipe:
            for job_id in ids:
                pipe.hget(f"rq:job:{job_id}", "started_at")
            values = pipe.execute()
        return {job_id: rq_time(value) for job_id, value in zip(ids, values, strict=True) if value}


CLIENTS: dict[str, Callable[[], Client]] = {
    "ours_pg": OursClient,
    "ours_lmdb": OursClient,
    "procrastinate": ProcrastinateClient,
    "pgqueuer": PgqueuerClient,
    "tasks_db": TasksDbClient,
    "celery": CeleryClient,
    "rq": RqClient,
}


def wait_started(client: Client, ids: list[Any], limit: float) -> dict[Any, float]:
    deadline = time.monotonic() + limit
    while True:
        started = client.started(ids)
        if len(started) == len(ids):
            return started
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(ids) - len(started)} of {len(ids)} jobs not started within {limit:.0f} s"
            )
        time.sleep(0.02)


def child_pickup(client: Client, samples: int) -> dict[str, Any]:
    """An idle worker (started by the parent): one warm-up job waited for, then one job every ~60 ms."""
    wait_started(client, [client.put()], 120)  # the worker is up and has run a job
    time.sleep(1.0)
    puts: list[tuple[Any, float, float]] = []
    for _ in range(samples):
        before = time.time()
        job_id = client.put()
        puts.append((job_id, before, time.time()))
        time.sleep(0.05 + random.random() * 0.02)
    started = wait_started(client, [job_id for job_id, _, _ in puts], 60)
    delays = [(started[job_id] - before) * 1000 for job_id, before, _ in puts]
    after = [(started[job_id] - returned) * 1000 for job_id, _, returned in puts]
    put_ms = [(returned - before) * 1000 for _, before, returned in puts]
    return {
        "samples": samples,
        "p50_ms": statistics.median(delays),
        "p99_ms": percentile(delays, 0.99),
        "max_ms": max(delays),
        "put_p50_ms": statistics.median(put_ms),
        "after_put_p50_ms": statistics.median(after),
        "after_put_p99_ms": percentile(after, 0.99),
    }


def child_enqueue(client: Client, single: int, batched: int) -> dict[str, Any]:
    for _ in range(20):  # warm: connections open, statements prepared
        client.put()
    began = time.perf_counter()
    for _ in range(single):
        client.put()
    result: dict[str, Any] = {"single_per_s": single / (time.perf_counter() - began), "batched_per_s": None}
    if client.has_batch_api:
        began = time.perf_counter()
        for start in range(0, batched, BATCH):
            client.put_batch(min(BATCH, batched - start))
        result["batched_per_s"] = batched / (time.perf_counter() - began)
    return result


def child_atomic(count: int, rounds: int) -> dict[str, Any]:
    """``.delay()`` inside ``atomic()`` against ``Row.objects.create()`` inside ``atomic()``, per call."""
    import django

    django.setup()
    from django.db import transaction

    from benchmarks.bench_project.bench_app.models import Row
    from benchmarks.bench_project.bench_app.tasks import noop

    def delay() -> None:
        with transaction.atomic():
            noop.delay()

    def create() -> None:
        with transaction.atomic():
            Row.objects.create(n=1)

    def per_call_us(func: Callable[[], None]) -> float:
        began = time.perf_counter()
        for _ in range(count):
            func()
        return (time.perf_counter() - began) / count * 1e6

    per_call_us(delay), per_call_us(create)  # warm
    delays, creates = [], []
    for index in range(rounds):
        pair = (delay, create) if index % 2 == 0 else (create, delay)
        timed = {func: per_call_us(func) for func in pair}
        delays.append(timed[delay])
        creates.append(timed[create])
    ratios = [d / c for d, c in zip(delays, creates, strict=True)]
    return {
        "delay_us": statistics.median(delays),
        "create_us": statistics.median(creates),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
    }


def child_main(system: str, action: str, args: list[str]) -> None:
    if action == "migrate":
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        result: Any = None
    elif action == "atomic":
        result = child_atomic(int(args[0]), int(args[1]))
    else:
        client = CLIENTS[system]()
        try:
            if action == "prefill":
                n = int(args[0])
                fill = getattr(client, "put_prefill", None)
                for start in range(0, n, 1_000):
                    (fill or client.put_batch)(min(1_000, n - start))
                result = None
            elif action == "pickup":
                result = child_pickup(client, int(args[0]))
            elif action == "enqueue":
                result = child_enqueue(client, int(args[0]), int(args[1]))
            else:
                raise SystemExit(f"unknown child action {action!r}")
        finally:
            client.close()
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------- main


@contextlib.contextmanager
def set_up(name: str, admin_url: str, redis_url: str) -> Iterator[Any]:
    """System ``name`` set up on a fresh database of its own (PostgreSQL) or the run's Redis; torn down and
    its database dropped after."""
    cls = SYSTEMS[name]
    with contextlib.ExitStack() as stack:
        pg_url = None
        if cls.store == "postgres":
            pg_url = stack.enter_context(fresh_database(admin_url, f"qm_peer_{name}"))
        system = cls(pg_url, redis_url if cls.store == "redis" else None)
        stack.callback(getattr(system, "teardown", lambda: None))
        system.setup()
        yield system


def run_system(
    name: str, admin_url: str, redis_url: str, sizes: dict[str, Any], report: dict[str, Any]
) -> None:
    with set_up(name, admin_url, redis_url) as system:
        load = os.getloadavg()[0]
        result: dict[str, Any] = {"load_1m": load}
        result["drain"] = drain = system.drain(sizes["drain"][name])
        print(
            f"{LABELS[name]}: busy {drain['busy_per_s']:,.0f} jobs/s, wall {drain['wall_per_s']:,.0f} "
            f"jobs/s (n={drain['n']:,}, load {load:.1f})",
            flush=True,
        )
        result["pickup"] = pickup = system.pickup(sizes["pickup"])
        print(
            f"  idle pickup from the put call p50 {pickup['p50_ms']:.1f} ms, p99 {pickup['p99_ms']:.1f} ms; "
            f"the put itself p50 {pickup['put_p50_ms']:.1f} ms; from its return p50 "
            f"{pickup['after_put_p50_ms']:.1f} ms, p99 {pickup['after_put_p99_ms']:.1f} ms",
            flush=True,
        )
        result["enqueue"] = enqueue = system.enqueue(sizes["single"], sizes["batched"])
        batched = enqueue["batched_per_s"]
        print(
            f"  enqueue: single {enqueue['single_per_s']:,.0f} jobs/s, batched "
            f"{'-' if batched is None else f'{batched:,.0f}'} jobs/s",
            flush=True,
        )
        if isinstance(system, OursPg):
            result["atomic"] = atomic = system.atomic(sizes["atomic"], sizes["atomic_rounds"])
            print(
                f"  .delay() in atomic(): {atomic['delay_us']:,.0f} us, ORM create() in atomic(): "
                f"{atomic['create_us']:,.0f} us: {atomic['ratio']:.2f}x",
                flush=True,
            )
        report["results"][name] = result


def drain_at(name: str, admin_url: str, redis_url: str, depth: int) -> dict[str, Any]:
    """One end-to-end drain of ``depth`` jobs by system ``name``, on a fresh database of its own."""
    with set_up(name, admin_url, redis_url) as system:
        load = os.getloadavg()[0]
        drain = system.drain(depth)
        drain["load_1m"] = load
        print(f"{LABELS[name]}: {depth:,} deep: busy {drain['busy_per_s']:,.0f} jobs/s, wall "
              f"{drain['wall_per_s']:,.0f} jobs/s (load {load:.1f})", flush=True)  # fmt: skip
        return drain


def run_depths(
    chosen: list[str], admin_url: str, redis_url: str, depths: list[int], rounds: int
) -> dict[str, Any]:
    """``--depths``: end to end only, each system at each depth, ``rounds`` times, the systems taking turns
    within a depth (the first one alternating by round). Prints ours on PostgreSQL / each peer per depth:
    the median of the per-round ratios of busy rates, and their range."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in chosen}
    for depth in depths:
        for index in range(rounds):
            order = chosen if index % 2 == 0 else chosen[::-1]
            for name in order:
                runs[name].setdefault(str(depth), []).append(drain_at(name, admin_url, redis_url, depth))
    if "ours_pg" in runs:
        print("\nratios, ours on PostgreSQL / theirs, busy rates, per round (same run):")
        for depth in depths:
            ours = [run["busy_per_s"] for run in runs["ours_pg"][str(depth)]]
            for name in chosen:
                if name == "ours_pg":
                    continue
                ratios = [a / run["busy_per_s"] for a, run in zip(ours, runs[name][str(depth)], strict=True)]
                print(f"  {depth:,} deep, vs {LABELS[name]}: {statistics.median(ratios):.2f}x "
                      f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
    return runs


def pass_or_miss(met: bool) -> str:
    return "PASS" if met else "MISS"


def summarize(report: dict[str, Any]) -> None:
    """Ratios of ours on PostgreSQL to each peer (busy, and wall), and each target PASS or MISS."""
    results = report["results"]
    verdicts: dict[str, Any] = {}
    print(
        "\n| system | end to end, busy jobs/s | wall jobs/s | enqueue single/s | enqueue batched/s "
        "| pickup p50 ms | p99 ms | put p50 ms | after the put p50 ms |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for name, result in results.items():
        drain, enqueue, pickup = result["drain"], result["enqueue"], result["pickup"]
        batched = "-" if enqueue["batched_per_s"] is None else f"{enqueue['batched_per_s']:,.0f}"
        print(
            f"| {LABELS[name]} (n={drain['n']:,}) | {drain['busy_per_s']:,.0f} | {drain['wall_per_s']:,.0f} "
            f"| {enqueue['single_per_s']:,.0f} | {batched} | {pickup['p50_ms']:.1f} "
            f"| {pickup['p99_ms']:.1f} | {pickup['put_p50_ms']:.1f} | {pickup['after_put_p50_ms']:.1f} |"
        )
    ours = results.get("ours_pg")
    if ours is None:
        return
    print("\nratios, ours on PostgreSQL / theirs, same run:")
    for name, result in results.items():
        if name == "ours_pg":
            continue
        busy = ours["drain"]["busy_per_s"] / result["drain"]["busy_per_s"]
        wall = ours["drain"]["wall_per_s"] / result["drain"]["wall_per_s"]
        target = TARGETS.get(name)
        verdict = (
            "" if target is None else f"  target >= {target:.1f}x: {'PASS' if busy >= target else 'MISS'}"
        )
        print(f"  vs {LABELS[name]}: busy {busy:.2f}x, wall {wall:.2f}x{verdict}")
        verdicts[name] = {
            "busy": busy,
            "wall": wall,
            "target": target,
            "pass": None if target is None else busy >= target,
        }
    p50 = ours["pickup"]["p50_ms"]
    verdicts["pickup_p50_ms"] = {"value": p50, "target": PICKUP_TARGET_MS, "pass": p50 <= PICKUP_TARGET_MS}
    print(
        f"  idle pickup p50 {p50:.1f} ms  target <= {PICKUP_TARGET_MS:.0f} ms: "
        f"{'PASS' if p50 <= PICKUP_TARGET_MS else 'MISS'}"
    )
    if "atomic" in ours:
        ratio = ours["atomic"]["ratio"]
        verdicts["atomic_delay"] = {"value": ratio, "target": ATOMIC_TARGET, "pass": ratio <= ATOMIC_TARGET}
        print(
            f"  .delay() in atomic() / ORM create(): {ratio:.2f}x  target <= {ATOMIC_TARGET:.0f}x: "
            f"{'PASS' if ratio <= ATOMIC_TARGET else 'MISS'}"
        )
    report["verdicts"] = verdicts


def server_settings(admin_url: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        names = ("server_version", "synchronous_commit", "fsync", "shared_buffers", "max_connections")
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in names}  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a server where this may CREATE and DROP databases qm_peer_*",
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/7",
        help="a Redis database this may flush (a redis-server is started if none answers)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a ~2-3 minute check")
    parser.add_argument("--only", help="comma-separated: " + ",".join(SYSTEMS))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--depths", help="comma-separated queue depths: end to end only, each system at each (issue 35)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="with --depths: drains per system and depth")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child_main(options.child[0], options.child[1], options.child[2:])
        return
    sizes = QUICK if options.quick else FULL
    chosen = options.only.split(",") if options.only else list(SYSTEMS)
    for name in chosen:
        if name not in SYSTEMS:
            parser.error(f"unknown system {name!r}")
    report: dict[str, Any] = {
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "server": server_settings(options.url),
        "sizes": sizes,
        "results": {},
        "skipped": {},
    }
    print(f"{report['machine']}; PostgreSQL {report['server']}", flush=True)
    if options.depths:
        depths = [int(depth) for depth in options.depths.split(",")]
        with redis_server(options.redis_url) as redis_url:
            report["depths"] = run_depths(chosen, options.url, redis_url, depths, options.rounds)
        if options.json:
            options.json.write_text(json.dumps(report, indent=2))
        return
    with redis_server(options.redis_url) as redis_url:
        for name in chosen:
            module = NEEDS.get(name)
            if module and importlib.util.find_spec(module) is None:
                report["skipped"][name] = f"{module} is not installed (uv sync --group bench)"
                print(f"{LABELS[name]}: skipped, {report['skipped'][name]}", flush=True)
                continue
            try:
                run_system(name, options.url, redis_url, sizes, report)
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                report["skipped"][name] = f"failed: {exc}"
                print(f"{LABELS[name]}: FAILED: {exc}", flush=True)
    summarize(report)
    if options.json:
        options.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
