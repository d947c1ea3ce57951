"""What a limited job costs the PostgreSQL server, by the CPU time of the claiming connection's backend
(``/proc/<pid>/stat``, so the server must run on this machine): one connection claims up to 16 jobs at a time
and completes them (``complete_many``), N jobs put with no limit, under a task limit of 64, and under a keyed
limit of 64 over 10 keys. Less disturbed by other load than a wall-clock rate; the store's tables in the
database are dropped and made again for each mode.

    uv run --locked --group bench python benchmarks/limits_server_cpu.py --pg postgresql://postgres@127.0.0.1/bench
    uv run --locked --group bench python benchmarks/limits_server_cpu.py --pg ... --root /tmp/base
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import psycopg
from queue_max_django.engine import Queue
from queue_max_django.engine.stores.postgres import schema
from queue_max_django.engine.tokens import new_token

url, mode, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
tick = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("DROP TABLE IF EXISTS qm_limit_slots")
    schema.drop(conn)
    schema.create(conn)
with Queue(url) as q:
    item = {"args": [], "kwargs": {}}
    for start in range(0, n, 1000):
        if mode == "none":
            q.put_many([item] * 1000, name="t")
        elif mode == "task":
            q.put_many([item] * 1000, name="t", concurrency=(("task:t", 64),))
        else:
            for key in range(10):
                q.put_many([item] * 100, name="t", concurrency=((f"task:t:k{key}", 64),))
    store = q._store
    pid = store.one("SELECT pg_backend_pid()", None)[0]
    before, started, done = cpu(pid), time.perf_counter(), 0
    while done < n:
        now = time.time()
        if mode == "none":
            got = store.claim(0, now, None, 30, new_token(), None, "w", 16).claimed
        else:
            got = store.concurrency.claim(0, now, None, 30, new_token(), "w", None, 16).claimed
        assert got
        store.complete_many(now, [(c.job_id, c.token, None) for c in got], False)
        done += len(got)
    assert store.one("SELECT pg_backend_pid()", None)[0] == pid
    print(f"{mode:6} server cpu {(cpu(pid) - before) / n * 1e6:6.0f} µs/job   "
          f"wall {(time.perf_counter() - started) / n * 1e6:6.0f} µs/job")
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pg", required=True, help="a PostgreSQL URL (its queue_max tables are dropped)")
    parser.add_argument("--n", type=int, default=6000, help="jobs per mode, a multiple of 1,000")
    parser.add_argument("--modes", default="none,task,keyed")
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout whose store runs")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        subprocess.run(
            [sys.executable, "-c", CHILD, str(args.root), args.pg, mode, str(args.n)],
            check=True,
        )


if __name__ == "__main__":
    main()
