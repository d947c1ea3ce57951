"""Cost of a unique key per job: put+get+ack with and without unique_key (distinct keys,
unique_until="started"), and a duplicate put that is skipped.

    uv run python benchmarks/unique_cost.py lmdb 3000

(or a postgresql:// URL of an empty database instead of ``lmdb``, and a smaller n)."""

import statistics
import sys
import tempfile
import time

from queue_max_django.engine import Queue


def rounds(q, n, keyed, tag):
    out = []
    for r in range(7):
        t = time.perf_counter()
        for i in range(n):
            if keyed:
                q.put({"i": i}, unique_key=f"{tag}:{r}:{i}", unique_until="started")
            else:
                q.put({"i": i})
        for _ in range(n):
            rec = q.get(5)
            rec.ack()
        out.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(out)


def dup_rounds(q, n):
    q.put("x", unique_key="hot", unique_until="started")
    out = []
    for _round in range(7):
        t = time.perf_counter()
        for i in range(n):
            q.put({"i": i}, unique_key="hot", unique_until="started")
        out.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(out)


where = sys.argv[1]
n = int(sys.argv[2])
if where != "lmdb":
    import psycopg

    from queue_max_django.engine.stores.postgres import schema

    with psycopg.connect(where, autocommit=True) as conn:
        schema.create(conn)
q = Queue(tempfile.mkdtemp() if where == "lmdb" else where)
res = {}
for turn in range(2):
    res.setdefault("plain", []).append(rounds(q, n, False, "p"))
    res.setdefault("keyed", []).append(rounds(q, n, True, f"k{turn}"))
print(
    where.split("@")[-1],
    "put+get+ack µs/job: plain",
    [round(x, 1) for x in res["plain"]],
    "keyed",
    [round(x, 1) for x in res["keyed"]],
)
print("  a duplicate put (skipped) µs:", round(dup_rounds(q, n), 1))
q.close()
