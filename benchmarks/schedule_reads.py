"""What the leading scheduler pays at each step (every 0.5 s) for the schedules kept in the store: one read of
them and their tickers (``scheduling/ticking.py``), with 0, 10 and 100 kept, µs per step (median of 7 rounds
of 50 steps).

    uv run python benchmarks/schedule_reads.py lmdb
    uv run python benchmarks/schedule_reads.py postgresql://postgres@127.0.0.1:5432/an_empty_database

(the PostgreSQL database gets the store's tables, and its schedules are removed between sizes)."""

import os
import statistics
import sys
import tempfile
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from queue_max_django.engine import Queue  # noqa: E402
from queue_max_django.engine.schedulestate import StoredSchedule  # noqa: E402
from queue_max_django.periodic import periodic_tasks  # noqa: E402
from queue_max_django.scheduling.ticking import tickers  # noqa: E402

TASK = "tests.testapp.tasks.add"


def step_cost(q, n):
    for name in q.schedule_names():
        q.change_schedule(name, lambda old: None)
    for i in range(n):
        made = StoredSchedule(f"s{i:03}", TASK, [1, 2], interval=60.0)
        q.change_schedule(made.name, lambda old, made=made: made)
    samples = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(50):
            tickers(q, periodic_tasks, time.time())
        samples.append((time.perf_counter() - started) / 50 * 1e6)
    return statistics.median(samples)


def main():
    where = sys.argv[1]
    if where == "lmdb":
        where = tempfile.mkdtemp()
    else:
        import psycopg

        from queue_max_django.engine.stores.postgres import schema

        with psycopg.connect(where) as conn:
            schema.create(conn)
    with Queue(where, do_recover=False, do_vacuum=False) as q:
        for n in (0, 10, 100):
            print(f"{n:>3} kept schedules: {step_cost(q, n):,.0f} µs per step")


if __name__ == "__main__":
    main()
