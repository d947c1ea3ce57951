"""Cost of encrypting jobs at rest (issue 36): the same task with ``encrypt=True`` and without, side by side
in one process, alternating rounds: per put (``.delay()``: arguments and user metadata sealed) and per job end
to end (``.delay()`` then ``testing.run_queued()``: claim, open, call, seal the result, ack).

    uv run python benchmarks/encryption_bench.py                     # LMDB, 2,000 jobs a round
    uv run python benchmarks/encryption_bench.py --pg postgresql://127.0.0.1:5432/bench_enc --n 500
    uv run python benchmarks/encryption_bench.py --worker 3000 --rounds 5   # a real queue_worker, e2e

Each figure is the median over ``--rounds`` rounds of µs per job; the ratio on/off is of the medians, and the
spread is the range of the per-round ratios (each on round against the off round next to it)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.test import override_settings  # noqa: E402

from queue_max_django import conf, task  # noqa: E402
from queue_max_django.testing import run_queued  # noqa: E402

KEY = base64.urlsafe_b64encode(os.urandom(32)).decode()
ARGS = {"email": "someone@example.com", "token": "t" * 40, "invoice": list(range(10))}


def send(email: str, token: str, invoice: list[int]) -> dict[str, Any]:
    return {"sent": email, "lines": len(invoice)}


plain = task(send, name="bench.plain")
sealed = task(send, name="bench.sealed", encrypt=True)


def one_round(which: Any, n: int, e2e: bool) -> float:
    variant = which.using(metadata={"customer": 42}, enqueue_on_commit=False)
    started = time.perf_counter()
    for _ in range(n):
        variant.delay(**ARGS)
    if e2e:
        ran = run_queued()
        assert len(ran) == n and all(o.state.value == "done" for o in ran)
    return (time.perf_counter() - started) / n * 1e6


def measure(n: int, rounds: int, e2e: bool) -> dict[str, Any]:
    off: list[float] = []
    on: list[float] = []
    for r in range(rounds):
        order = [(plain, off), (sealed, on)] if r % 2 == 0 else [(sealed, on), (plain, off)]
        for which, out in order:
            out.append(one_round(which, n, e2e))
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    return {
        "off_us": round(statistics.median(off), 1),
        "on_us": round(statistics.median(on), 1),
        "added_us": round(statistics.median(on) - statistics.median(off), 1),
        "ratio": round(statistics.median(on) / statistics.median(off), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def worker_round(encrypt: bool, n: int) -> float:
    """µs per job of a real ``queue_worker --burst --processes 1`` draining ``n`` jobs of one task, with
    ``QUEUE_MAX["ENCRYPT"]`` on or off: first job started -> last job finished, read from the store."""
    import subprocess

    from queue_max_django.conf import get_queue
    from queue_max_django.engine import State
    from tests.testapp import encrypted_tasks as et

    et.register()
    with tempfile.TemporaryDirectory() as folder:
        given = {"DATA_DIR": str(Path(folder) / "store"), "ENCRYPT": encrypt, "ENCRYPTION_KEYS": {"k1": KEY}}
        with override_settings(QUEUE_MAX=given):
            et.follows.using(enqueue_on_commit=False).map(["someone@example.com"] * n)
            conf.reset()
            env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django.encryption_settings",
                   "PYTHONPATH": str(ROOT), "QUEUE_MAX_TEST_ENCRYPTION": json.dumps(given)}  # fmt: skip
            argv = [sys.executable, "-m", "django", "queue_worker", "--burst", "--processes", "1",
                    "--no-scheduler", "-v", "0"]  # fmt: skip
            subprocess.run(argv, cwd=ROOT, env=env, check=True, timeout=600)
            queue = get_queue()
            started, finished, count, after = [], [], 0, None
            while jobs := queue.jobs(State.DONE, after=after, limit=1000):
                after = jobs[-1].job_id
                count += len(jobs)
                started += [j.started_at for j in jobs if j.started_at]
                finished += [j.finished_at for j in jobs if j.finished_at]
            assert count == n, count
            conf.reset()
    return (max(finished) - min(started)) / n * 1e6


def measure_worker(n: int, rounds: int) -> dict[str, Any]:
    off: list[float] = []
    on: list[float] = []
    for r in range(rounds):
        for encrypt in (False, True) if r % 2 == 0 else (True, False):
            (on if encrypt else off).append(worker_round(encrypt, n))
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    return {
        "off_us": round(statistics.median(off), 1),
        "on_us": round(statistics.median(on), 1),
        "added_us": round(statistics.median(on) - statistics.median(off), 1),
        "ratio": round(statistics.median(on) / statistics.median(off), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pg", help="a postgresql:// URL of an empty database (default: LMDB)")
    worker = "instead: a real queue_worker draining N jobs, ENCRYPT on vs off (LMDB)"
    parser.add_argument("--worker", type=int, metavar="N", help=worker)
    options = parser.parse_args()
    if options.worker:
        found = {"store": "lmdb", "worker_n": options.worker, "rounds": options.rounds}
        found["worker"] = measure_worker(options.worker, options.rounds)
        print(json.dumps({**found, "load": os.getloadavg()}, indent=2))
        return
    with tempfile.TemporaryDirectory() as folder:
        where: dict[str, Any] = (
            {"STORE": "postgresql", "URL": options.pg} if options.pg else {"DATA_DIR": Path(folder) / "store"}
        )
        if options.pg:
            import psycopg

            from queue_max_django.engine.stores.postgres import schema

            with psycopg.connect(options.pg, autocommit=True) as conn:
                schema.create(conn)
        with override_settings(QUEUE_MAX={**where, "ENCRYPTION_KEYS": {"k1": KEY}, "RESULT_TTL": 3600}):
            one_round(plain, 50, True)  # warm up both paths (cipher objects, caches)
            one_round(sealed, 50, True)
            report = {
                "store": "postgresql" if options.pg else "lmdb",
                "n": options.n,
                "rounds": options.rounds,
                "put": measure(options.n, options.rounds, e2e=False),
            }
            run_queued()  # the puts' jobs, out of the way
            report["e2e"] = measure(options.n, options.rounds, e2e=True)
            conf.reset()
    report["load"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
