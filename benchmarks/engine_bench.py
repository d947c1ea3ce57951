"""Side-by-side benchmark of the queue_max_django engine against lmdb-queue (EQueue) and persist-queue.

    uv run --group bench python benchmarks/engine_bench.py --quick          # ~1.5 minutes
    uv run --group bench python benchmarks/engine_bench.py --json out.json  # the full run, ~7 minutes
    uv run --group bench python benchmarks/engine_bench.py --only put --repeat 5

Method (see docs/benchmarks.md): every sub-run (one workload, one queue, one repetition) runs in a fresh
child process started with ``spawn``, on a fresh store in its own temporary directory, which is deleted
afterwards. Repetitions are interleaved (A, B, C, A, B, C, ... with the order rotated every round), so a
burst of load from other processes hits every side alike; the summary reports medians over repetitions and
the median of SAME-RUN ratios (the ratio is computed inside each round, then the median is taken).

Each child makes itself the leader of a new process group, so a child that overruns its timeout is killed
together with any process it started (workloads 5 and 8 start consumer processes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SPAWN = mp.get_context("spawn")
OURS = "queue_max_django"
LMDBQ = "lmdb-queue"
PERSISTQ = "persist-queue"


def payload(i: int) -> dict[str, Any]:
    return {"n": i, "to": "user@example.com"}


# ---------------------------------------------------------------------------------------------- sizes

QUICK = {
    "put_n": 5_000,
    "slow_put_n": 1_500,  # persist-queue commits with fsync (SQLite WAL, synchronous=FULL): fewer ops
    "put_many_n": 5_000,
    "rt_n": 2_000,
    "slow_rt_n": 500,
    "drain_n": 5_000,
    "slow_drain_n": 1_500,
    "procs_n": 6_000,
    "deep_fill": 100_000,
    "depth_drain": 20_000,
    "shallow_depth": 1_000,
    "durable_seconds": 1.0,
    "pickup_samples": 50,
    "repeat": 2,
}
FULL = {
    "put_n": 50_000,
    "slow_put_n": 6_000,
    "put_many_n": 50_000,
    "rt_n": 10_000,
    "slow_rt_n": 2_000,
    "drain_n": 30_000,
    "slow_drain_n": 5_000,
    "procs_n": 30_000,
    "deep_fill": 1_000_000,
    "depth_drain": 20_000,
    "shallow_depth": 1_000,
    "durable_seconds": 3.0,
    "pickup_samples": 200,
    "repeat": 5,
}
WARMUP = 200


# ---------------------------------------------------------------------------------------------- adapters
# One small interface over the three queues, used only inside child processes: put, put_many, take (claim
# one job or None), done (ack), close. The adapter call adds the same ~0.1 µs to every side.


class Ours:
    def __init__(self, path: str, **options: Any) -> None:
        from queue_max_django.engine import Queue, QueueEmpty

        self.empty = QueueEmpty
        self.q = Queue(path, **options)

    def put(self, item: Any) -> None:
        self.q.put(item)

    def put_many(self, items: list[Any]) -> None:
        self.q.put_many(items)

    def take(self, timeout: float) -> Any:
        try:
            return self.q.get(timeout)
        except self.empty:
            return None

    def done(self, record: Any) -> None:
        record.ack()

    def close(self) -> None:
        self.q.close()


class LmdbQueue:
    def __init__(self, path: str, **options: Any) -> None:
        import equeue

        self.empty = equeue.QueueEmpty
        self.q = equeue.Queue(path, **options)

    def put(self, item: Any) -> None:
        self.q.put(item)

    def put_many(self, items: list[Any]) -> None:  # no batch API: one transaction per job
        for item in items:
            self.q.put(item)

    def take(self, timeout: float) -> Any:
        try:
            # equeue's get(timeout=0) raises QueueEmpty before looking; any positive timeout looks first.
            return self.q.get(timeout=max(timeout, 0.001))
        except self.empty:
            return None

    def done(self, record: Any) -> None:
        record.ack()

    def close(self) -> None:
        self.q.close()


class PersistQueue:
    """persist-queue's SQLite ack queue (WAL, one commit per put/get/ack) with its msgpack serializer, so
    that all three encode payloads the same way. Ack by id (``raw=True``): its ack-by-item search is O(n)."""

    def __init__(self, path: str, **options: Any) -> None:
        import persistqueue
        from persistqueue.serializers import msgpack as pq_msgpack

        self.empty = persistqueue.Empty
        self.q = persistqueue.SQLiteAckQueue(path, serializer=pq_msgpack, **options)

    def put(self, item: Any) -> None:
        self.q.put(item)

    def put_many(self, items: list[Any]) -> None:
        for item in items:
            self.q.put(item)

    def take(self, timeout: float) -> Any:
        try:
            if timeout <= 0:
                return self.q.get(block=False, raw=True)
            return self.q.get(block=True, timeout=timeout, raw=True)
        except self.empty:
            return None

    def done(self, record: Any) -> None:
        self.q.ack(id=record["pqid"])

    def close(self) -> None:
        self.q.close()


ADAPTERS: dict[str, Callable[..., Any]] = {OURS: Ours, LMDBQ: LmdbQueue, PERSISTQ: PersistQueue}
MODULES = {OURS: "queue_max_django.engine", LMDBQ: "equeue", PERSISTQ: "persistqueue"}


@dataclass(frozen=True)
class Variant:
    kind: str  # OURS, LMDBQ or PERSISTQ
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # workload-specific settings
    ref: str | None = None  # the lmdb-queue variant this one is compared with ("vs lmdb-queue" column)

    def open(self, path: str) -> Any:
        return ADAPTERS[self.kind](path, **self.options)


# ---------------------------------------------------------------------------------------------- helpers


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; ``q`` in [0, 1]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def fill(queue: Any, n: int, *, batch: int = 100, start: int = 0) -> None:
    for first in range(start, start + n, batch):
        queue.put_many([payload(i) for i in range(first, min(first + batch, start + n))])


def drain(queue: Any, n: int) -> None:
    take, done = queue.take, queue.done
    for _ in range(n):
        record = take(5.0)
        if record is None:
            raise RuntimeError("the queue ran dry before the expected number of jobs was drained")
        done(record)


def timed(fn: Callable[[], None]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def kill_group(proc: Any) -> None:
    """SIGKILL the process group the child leads (itself and whatever it started), then the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.is_alive():
        proc.kill()


def wait_results(conns: list[Any], procs: list[Any], timeout: float) -> list[Any]:
    """One message from each grandchild within ``timeout`` s, else kill them all and raise."""
    deadline = time.monotonic() + timeout
    out = []
    try:
        for conn in conns:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"a helper process sent nothing within {timeout:.0f} s")
            message = conn.recv()
            if isinstance(message, tuple) and message and message[0] == "error":
                raise RuntimeError(f"a helper process failed:\n{message[1]}")
            out.append(message)
        return out
    except BaseException:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        raise


# ---------------------------------------------------------------------------------------------- workloads
# Each function runs inside a fresh child process: (variant, sizes, empty store directory) -> metrics.


def w_put(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """1 and 2. Enqueue throughput: single put, or put_many in batches of ``batch``."""
    q = v.open(path)
    try:
        batch = v.extra.get("batch", 1)
        n = p["slow_put_n"] if v.kind == PERSISTQ else p["put_many_n" if batch > 1 else "put_n"]
        if batch > 1:
            fill(q, WARMUP, batch=batch, start=-WARMUP)
            # Built before the clock starts, as the single puts' payloads are: only the calls are timed.
            batches = [
                [payload(i) for i in range(first, min(first + batch, n))] for first in range(0, n, batch)
            ]
            put_many = q.put_many

            def run_batches() -> None:
                for items in batches:
                    put_many(items)

            elapsed = timed(run_batches)
        else:
            put = q.put
            for i in range(-WARMUP, 0):
                put(payload(i))
            items = [payload(i) for i in range(n)]

            def run() -> None:
                for item in items:
                    put(item)

            elapsed = timed(run)
        return {"jobs_per_s": n / elapsed, "n": n}
    finally:
        q.close()


def w_roundtrip(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """3. put + get + ack of one job at a time on an empty queue: latency of the whole round trip."""
    q = v.open(path)
    try:
        n = p["slow_rt_n"] if v.kind == PERSISTQ else p["rt_n"]
        put, take, done = q.put, q.take, q.done
        clock = time.perf_counter
        samples: list[float] = []
        gc.collect()
        for i in range(-WARMUP, n):
            item = payload(i)
            t0 = clock()
            put(item)
            record = take(5.0)
            done(record)
            t1 = clock()
            if i >= 0:
                samples.append(t1 - t0)
        return {
            "p50_us": percentile(samples, 0.5) * 1e6,
            "p99_us": percentile(samples, 0.99) * 1e6,
            "mean_us": statistics.fmean(samples) * 1e6,
            "n": n,
        }
    finally:
        q.close()


def w_drain(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """4. In one process: N jobs waiting (filled untimed), then get + ack until all are done."""
    q = v.open(path)
    try:
        n = p["slow_drain_n"] if v.kind == PERSISTQ else p["drain_n"]
        fill(q, n + WARMUP)
        drain(q, WARMUP)
        elapsed = timed(lambda: drain(q, n))
        return {"jobs_per_s": n / elapsed, "n": n}
    finally:
        q.close()


def _drain_worker(conn: Any, v: Variant, path: str, go: Any) -> None:
    """Grandchild of workload 5: open the store, wait for the start signal, get + ack until empty."""
    try:
        q = v.open(path)
        try:
            take, done = q.take, q.done
            conn.send("ready")
            go.wait(60)
            start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes on Linux
            cpu_start = time.process_time()
            last = start
            cpu_last = cpu_start
            count = 0
            while True:
                record = take(0.2)
                if record is None:
                    break
                done(record)
                count += 1
                last = time.monotonic()
                cpu_last = time.process_time()
            conn.send((count, start, last, cpu_last - cpu_start))
        finally:
            q.close()
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def w_drain_procs(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """5. N jobs waiting; ``procs`` consumer processes drain them at once. Rate = N / (last ack - first
    start); the 0.2 s each worker waits to see the queue empty is not counted."""
    n = p["procs_n"]
    procs_wanted = v.extra["procs"]
    q = v.open(path)
    try:
        fill(q, n)
    finally:
        q.close()
    go = SPAWN.Event()
    conns, procs = [], []
    try:
        for _ in range(procs_wanted):
            recv, send = SPAWN.Pipe(duplex=False)
            proc = SPAWN.Process(target=_drain_worker, args=(send, v, path, go), daemon=True)
            proc.start()
            send.close()
            conns.append(recv)
            procs.append(proc)
        wait_results(conns, procs, 60)  # "ready" from every worker
        go.set()
        results = wait_results(conns, procs, 300)
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    total = sum(r[0] for r in results)
    if total != n:
        raise RuntimeError(f"drained {total} jobs, expected {n}")
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    cpu = sum(r[3] for r in results)
    return {
        "jobs_per_s": n / elapsed,
        "cpu_us_per_job": cpu / n * 1e6,  # all consumer processes' CPU time (user + system) per job
        "cpus_busy": cpu / elapsed,  # how many CPUs the consumers kept busy on average
        "n": n,
        "per_process": [r[0] for r in results],
    }


def w_depth(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """6. Drain rate at depth. deep: fill ``deep_fill`` jobs (put_many, batches of 100, untimed), then time
    get + ack of the first ``depth_drain``. shallow: the same number of jobs drained in rounds of
    (fill ``shallow_depth``, drain them), timing the drains only, so at most ``shallow_depth`` wait."""
    q = v.open(path)
    try:
        drained = p["depth_drain"]
        if v.extra["depth"] == "deep":
            depth = p["deep_fill"]
            fill_s = timed(lambda: fill(q, depth))
            elapsed = timed(lambda: drain(q, drained))
            return {"jobs_per_s": drained / elapsed, "depth": depth, "fill_jobs_per_s": depth / fill_s}
        depth = p["shallow_depth"]
        elapsed = 0.0
        for round_ in range(drained // depth):
            fill(q, depth, start=round_ * depth)
            elapsed += timed(lambda: drain(q, depth))
        return {"jobs_per_s": (drained // depth) * depth / elapsed, "depth": depth}
    finally:
        q.close()


class _OneTransactionPerPut:
    """Stands in for one shard's group committer: commits each request at once, in its own durable
    transaction, with the committer's own commit function (``Shard.enqueue(now, jobs, durable=True)``)."""

    forming = False  # never a batch to join: every put commits alone

    def __init__(self, committer: Any) -> None:
        self._commit = committer._commit

    def submit(self, items: Any) -> Any:
        return self._commit(items)


def bypass_group_commit(q: Any) -> None:
    """Workload 7's baseline: ``Queue.put`` exactly as it is (validation, routing, wake hint), but every put
    is its own durable transaction: the queue's per-shard group committers are swapped for pass-throughs.
    Uses private attributes (the LMDB store's ``_committers``, ``GroupCommitter._commit``; on engines before
    the store interface, ``Queue._committers``): benchmark only."""
    owner = getattr(q, "_store", q)
    committers = getattr(owner, "_committers", None)
    if not committers or not all(callable(getattr(c, "_commit", None)) for c in committers):
        raise RuntimeError("this engine has no per-shard group committers to bypass (LmdbStore._committers)")
    owner._committers = [_OneTransactionPerPut(c) for c in committers]


def _threaded_puts(
    put: Callable[[Any], None], threads: int, seconds: float
) -> tuple[int, float, list[float]]:
    """``threads`` threads call ``put`` until ``seconds`` have passed. -> (puts, elapsed, latencies)."""
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    finished = [0.0] * threads
    stop_at = [0.0]
    clock = time.perf_counter

    def worker(k: int) -> None:
        mine = latencies[k]
        i = k * 100_000_000
        barrier.wait()
        end = stop_at[0]
        while True:
            t0 = clock()
            if t0 >= end:
                break
            put(payload(i))
            mine.append(clock() - t0)
            i += 1
        finished[k] = clock()

    pool = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    gc.collect()
    start = clock()
    stop_at[0] = start + seconds
    barrier.wait()
    for t in pool:
        t.join(seconds + 60)
        if t.is_alive():
            raise TimeoutError("a producer thread did not finish")
    flat = [x for lat in latencies for x in lat]
    return len(flat), max(finished) - start, flat


def w_durable(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """7. Durable enqueue (ours sync=True: fdatasync before put returns; lmdb-queue sync=True for
    comparison). ``threads`` producers for ``durable_seconds``; ``mode``: put, direct (one transaction per
    put, no group commit) or put_many (batches of 100, one thread)."""
    q = v.open(path)
    try:
        seconds = p["durable_seconds"]
        mode = v.extra.get("mode", "put")
        if mode == "put_many":
            batch = 100
            fill(q, batch, batch=batch, start=-batch)
            latencies = []
            clock = time.perf_counter
            i = 0
            gc.collect()
            start = clock()
            end = start + seconds
            while True:
                t0 = clock()
                if t0 >= end:
                    break
                q.put_many([payload(j) for j in range(i, i + batch)])
                latencies.append(clock() - t0)
                i += batch
            elapsed = clock() - start
            return {
                "jobs_per_s": i / elapsed,
                "p50_ms": percentile(latencies, 0.5) * 1e3,
                "p99_ms": percentile(latencies, 0.99) * 1e3,
                "n": i,
                "latency_of": "batch of 100",
            }
        if mode == "direct":
            bypass_group_commit(q.q)
        put = q.put
        for i in range(-20, 0):
            put(payload(i))
        count, elapsed, latencies = _threaded_puts(put, v.extra.get("threads", 1), seconds)
        return {
            "jobs_per_s": count / elapsed,
            "p50_ms": percentile(latencies, 0.5) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3,
            "n": count,
        }
    finally:
        q.close()


def _pickup_consumer(conn: Any, v: Variant, path: str, samples: int) -> None:
    """Grandchild of workload 8: block in get(); stamp time.time() the moment get returns."""
    try:
        q = v.open(path)
        try:
            conn.send("ready")
            for _ in range(samples):
                record = q.take(30.0)
                now = time.time()
                if record is None:
                    raise RuntimeError("no job within 30 s")
                q.done(record)
                conn.send(now)
        finally:
            q.close()
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def w_pickup(v: Variant, p: dict[str, Any], path: str) -> dict[str, Any]:
    """8. An idle consumer in another process, blocked in get(). This process puts one job and stamps the
    time (just before put() and just after it returns); the consumer stamps the moment get() returns. The
    next job follows 10-30 ms (random) after the previous one was picked up, so the consumer is idle."""
    samples = p["pickup_samples"]
    warmup = 5
    rng = random.Random(8)
    q = v.open(path)
    recv, send = SPAWN.Pipe(duplex=False)
    proc = SPAWN.Process(target=_pickup_consumer, args=(send, v, path, samples + warmup), daemon=True)
    from_call: list[float] = []
    from_return: list[float] = []
    try:
        proc.start()
        send.close()
        wait_results([recv], [proc], 60)
        for i in range(-warmup, samples):
            time.sleep(rng.uniform(0.010, 0.030))
            before = time.time()
            q.put(payload(i))
            after = time.time()
            (picked,) = wait_results([recv], [proc], 60)
            if i >= 0:
                from_call.append(picked - before)
                from_return.append(picked - after)
        proc.join(30)
    finally:
        q.close()
        if proc.is_alive():
            proc.kill()
    return {
        "p50_us": percentile(from_call, 0.5) * 1e6,
        "p99_us": percentile(from_call, 0.99) * 1e6,
        "p50_from_return_us": percentile(from_return, 0.5) * 1e6,
        "p99_from_return_us": percentile(from_return, 0.99) * 1e6,
        "n": samples,
    }


# ---------------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    fmt: str = "{:,.0f}"


@dataclass(frozen=True)
class Ratio:
    label: str
    num: str
    den: str
    metric: str


@dataclass(frozen=True)
class Target:
    text: str
    check: Callable[[dict[str, Any]], tuple[float, bool]]  # summary of the workload -> (value, met)
    shown: str  # how the value reads, e.g. "{:.2f}x"


@dataclass(frozen=True)
class Workload:
    title: str
    run: Callable[[Variant, dict[str, Any], str], dict[str, Any]]
    variants: dict[str, Variant]
    metrics: list[Metric]
    ratios: list[Ratio]
    targets: list[Target] = field(default_factory=list)
    timeout: Callable[[dict[str, Any]], float] = lambda p: 180.0
    note: str = ""


def _ratio_at_least(label: str, threshold: float) -> Callable[[dict[str, Any]], tuple[float, bool]]:
    def check(summary: dict[str, Any]) -> tuple[float, bool]:
        value = summary["ratios"][label]
        return value, value >= threshold

    return check


def _ratio_at_most(label: str, threshold: float) -> Callable[[dict[str, Any]], tuple[float, bool]]:
    def check(summary: dict[str, Any]) -> tuple[float, bool]:
        value = summary["ratios"][label]
        return value, value <= threshold

    return check


def _metric_check(variant: str, key: str, threshold: float, *, at_most: bool = False) -> Callable[..., Any]:
    def check(summary: dict[str, Any]) -> tuple[float, bool]:
        value = summary["medians"][variant][key]
        return value, (value <= threshold if at_most else value >= threshold)

    return check


RATE = [Metric("jobs_per_s", "jobs/s")]
LATENCY_US = [Metric("p50_us", "p50 µs"), Metric("p99_us", "p99 µs")]
WM = {"writemap": True}

WORKLOADS: dict[str, Workload] = {
    "put": Workload(
        "1. single put, jobs/s",
        w_put,
        {
            "ours": Variant(OURS, {}, "queue_max_django, default (sync=False)"),
            "ours_writemap": Variant(OURS, WM, "queue_max_django, writemap=True"),
            "lmdb_queue": Variant(LMDBQ, {}, "lmdb-queue, default (writemap, no fsync)"),
            "persist_queue": Variant(PERSISTQ, {}, "persist-queue SQLiteAckQueue (WAL, fsync per commit)"),
        },
        RATE,
        [
            Ratio("ours / lmdb-queue", "ours", "lmdb_queue", "jobs_per_s"),
            Ratio("ours writemap / lmdb-queue", "ours_writemap", "lmdb_queue", "jobs_per_s"),
            Ratio("persist-queue / lmdb-queue", "persist_queue", "lmdb_queue", "jobs_per_s"),
        ],
        [
            Target(
                "put, fastest mode (writemap) >= 1.0x lmdb-queue",
                _ratio_at_least("ours writemap / lmdb-queue", 1.0),
                "{:.2f}x",
            ),
            Target(
                "put, safe default >= 0.5x lmdb-queue", _ratio_at_least("ours / lmdb-queue", 0.5), "{:.2f}x"
            ),
        ],
    ),
    "put_many": Workload(
        "2. put_many (batches of 100) vs single put, jobs/s",
        w_put,
        {
            "ours_put": Variant(OURS, {}, "queue_max_django put, default"),
            "ours_put_many": Variant(OURS, {}, "queue_max_django put_many(100), default", {"batch": 100}),
            "ours_writemap_put": Variant(OURS, WM, "queue_max_django put, writemap"),
            "ours_writemap_put_many": Variant(
                OURS, WM, "queue_max_django put_many(100), writemap", {"batch": 100}
            ),
            "lmdb_queue": Variant(LMDBQ, {}, "lmdb-queue put (it has no batch API)"),
        },
        RATE,
        [
            Ratio("put_many / put (default)", "ours_put_many", "ours_put", "jobs_per_s"),
            Ratio("put_many / put (writemap)", "ours_writemap_put_many", "ours_writemap_put", "jobs_per_s"),
            Ratio("put_many default / lmdb-queue put", "ours_put_many", "lmdb_queue", "jobs_per_s"),
            Ratio("put_many writemap / lmdb-queue put", "ours_writemap_put_many", "lmdb_queue", "jobs_per_s"),
        ],
        [
            Target(
                "put_many >= 5x single put per job (default mode)",
                _ratio_at_least("put_many / put (default)", 5.0),
                "{:.2f}x",
            ),
            Target(
                "put_many >= 5x single put per job (writemap)",
                _ratio_at_least("put_many / put (writemap)", 5.0),
                "{:.2f}x",
            ),
        ],
        note="lmdb-queue has no batch API (put_many): its single put is shown for reference.",
    ),
    "roundtrip": Workload(
        "3. put + get + ack round trip, one job at a time, µs",
        w_roundtrip,
        {
            "ours": Variant(OURS, {}, "queue_max_django, default"),
            "ours_writemap": Variant(OURS, WM, "queue_max_django, writemap"),
            "lmdb_queue": Variant(LMDBQ, {}, "lmdb-queue, default"),
            "persist_queue": Variant(PERSISTQ, {}, "persist-queue SQLiteAckQueue"),
        },
        [*LATENCY_US, Metric("mean_us", "mean µs")],
        [
            Ratio("ours p50 / lmdb-queue p50", "ours", "lmdb_queue", "p50_us"),
            Ratio("ours writemap p50 / lmdb-queue p50", "ours_writemap", "lmdb_queue", "p50_us"),
            Ratio("ours writemap p99 / lmdb-queue p99", "ours_writemap", "lmdb_queue", "p99_us"),
            Ratio("persist-queue p50 / lmdb-queue p50", "persist_queue", "lmdb_queue", "p50_us"),
        ],
        [
            Target(
                "round-trip p50, fastest mode <= lmdb-queue's (ratio <= 1)",
                _ratio_at_most("ours writemap p50 / lmdb-queue p50", 1.0),
                "{:.2f}x",
            ),
            Target(
                "round-trip p50, safe default <= lmdb-queue's (ratio <= 1; not an issue target)",
                _ratio_at_most("ours p50 / lmdb-queue p50", 1.0),
                "{:.2f}x",
            ),
        ],
    ),
    "drain": Workload(
        "4. in-process drain (N waiting, get + ack until empty), jobs/s",
        w_drain,
        {
            "ours": Variant(OURS, {}, "queue_max_django, default"),
            "ours_writemap": Variant(OURS, WM, "queue_max_django, writemap"),
            "lmdb_queue": Variant(LMDBQ, {}, "lmdb-queue, default"),
            "persist_queue": Variant(PERSISTQ, {}, "persist-queue SQLiteAckQueue"),
        },
        RATE,
        [
            Ratio("ours / lmdb-queue", "ours", "lmdb_queue", "jobs_per_s"),
            Ratio("ours writemap / lmdb-queue", "ours_writemap", "lmdb_queue", "jobs_per_s"),
            Ratio("persist-queue / lmdb-queue", "persist_queue", "lmdb_queue", "jobs_per_s"),
        ],
    ),
    "drain_procs": Workload(
        "5. drain by 2 processes vs 1 process, jobs/s",
        w_drain_procs,
        {
            "ours_1proc": Variant(OURS, {}, "queue_max_django, default, 1 process", {"procs": 1}),
            "ours_2proc": Variant(OURS, {}, "queue_max_django, default, 2 processes", {"procs": 2}),
            "ours_writemap_1proc": Variant(OURS, WM, "queue_max_django, writemap, 1 process", {"procs": 1}),
            "ours_writemap_2proc": Variant(OURS, WM, "queue_max_django, writemap, 2 processes", {"procs": 2}),
            "lmdb_queue_1proc": Variant(LMDBQ, {}, "lmdb-queue, 1 process", {"procs": 1}),
            "lmdb_queue_2proc": Variant(LMDBQ, {}, "lmdb-queue, 2 processes", {"procs": 2}),
        },
        [*RATE, Metric("cpu_us_per_job", "consumer CPU µs/job"), Metric("cpus_busy", "CPUs busy", "{:.2f}")],
        [
            Ratio("ours 2 proc / 1 proc", "ours_2proc", "ours_1proc", "jobs_per_s"),
            Ratio(
                "ours writemap 2 proc / 1 proc", "ours_writemap_2proc", "ours_writemap_1proc", "jobs_per_s"
            ),
            Ratio("lmdb-queue 2 proc / 1 proc", "lmdb_queue_2proc", "lmdb_queue_1proc", "jobs_per_s"),
            Ratio("ours 2 proc / lmdb-queue 2 proc", "ours_2proc", "lmdb_queue_2proc", "jobs_per_s"),
            Ratio("ours 1 proc / lmdb-queue 1 proc", "ours_1proc", "lmdb_queue_1proc", "jobs_per_s"),
        ],
        [
            Target(
                "2-process drain >= 1.4x one process (default mode)",
                _ratio_at_least("ours 2 proc / 1 proc", 1.4),
                "{:.2f}x",
            ),
            Target(
                "2-process drain >= 1.4x one process (writemap)",
                _ratio_at_least("ours writemap 2 proc / 1 proc", 1.4),
                "{:.2f}x",
            ),
        ],
    ),
    "depth": Workload(
        "6. drain rate with a deep vs a shallow queue (queue_max_django, default mode), jobs/s",
        w_depth,
        {
            "deep": Variant(OURS, {}, "deep (1,000,000 waiting; --quick: 100,000)", {"depth": "deep"}),
            "shallow": Variant(OURS, {}, "shallow (at most 1,000 waiting)", {"depth": "shallow"}),
        },
        [*RATE, Metric("fill_jobs_per_s", "fill jobs/s (put_many 100)")],
        [Ratio("deep / shallow", "deep", "shallow", "jobs_per_s")],
        [Target("deep drain >= 0.9x shallow", _ratio_at_least("deep / shallow", 0.9), "{:.2f}x")],
        timeout=lambda p: 120 + p["deep_fill"] / 1_000,
        note="lmdb-queue and persist-queue are not run here (the issue asks for ours).",
    ),
    "durable": Workload(
        "7. durable put (fsync before put returns), jobs/s and latency",
        w_durable,
        {
            "ours_1t": Variant(OURS, {"sync": True}, "queue_max_django sync=True, 1 thread", {"threads": 1}),
            "ours_16t": Variant(
                OURS, {"sync": True}, "queue_max_django sync=True, 16 threads (group commit)", {"threads": 16}
            ),
            "ours_16t_txn_per_put": Variant(
                OURS,
                {"sync": True},
                "queue_max_django sync=True, 16 threads, one transaction per put",
                {"threads": 16, "mode": "direct"},
            ),
            "ours_1shard_16t": Variant(
                OURS,
                {"sync": True, "shards": 1},
                "queue_max_django sync=True, 1 shard, 16 threads (group)",
                {"threads": 16},
            ),
            "ours_1shard_16t_txn_per_put": Variant(
                OURS,
                {"sync": True, "shards": 1},
                "queue_max_django sync=True, 1 shard, 16 threads, one transaction per put",
                {"threads": 16, "mode": "direct"},
            ),
            "ours_put_many": Variant(
                OURS, {"sync": True}, "queue_max_django sync=True, put_many(100)", {"mode": "put_many"}
            ),
            "lmdb_queue_1t": Variant(LMDBQ, {"sync": True}, "lmdb-queue sync=True, 1 thread", {"threads": 1}),
            "lmdb_queue_16t": Variant(
                LMDBQ, {"sync": True}, "lmdb-queue sync=True, 16 threads", {"threads": 16}
            ),
        },
        [*RATE, Metric("p50_ms", "p50 ms", "{:.2f}"), Metric("p99_ms", "p99 ms", "{:.2f}")],
        [
            Ratio(
                "16 threads group commit / one txn per put", "ours_16t", "ours_16t_txn_per_put", "jobs_per_s"
            ),
            Ratio(
                "1 shard: 16 threads group commit / one txn per put",
                "ours_1shard_16t",
                "ours_1shard_16t_txn_per_put",
                "jobs_per_s",
            ),
            Ratio("16 threads / 1 thread", "ours_16t", "ours_1t", "jobs_per_s"),
            Ratio("ours 1 thread / lmdb-queue 1 thread", "ours_1t", "lmdb_queue_1t", "jobs_per_s"),
            Ratio("ours 16 threads / lmdb-queue 16 threads", "ours_16t", "lmdb_queue_16t", "jobs_per_s"),
        ],
        [
            Target(
                "durable, 16 threads >= 3x one transaction per put (same run)",
                _ratio_at_least("16 threads group commit / one txn per put", 3.0),
                "{:.2f}x",
            ),
            Target(
                "durable put_many >= 50,000 jobs/s",
                _metric_check("ours_put_many", "jobs_per_s", 50_000),
                "{:,.0f} jobs/s",
            ),
        ],
        note=(
            "one transaction per put: the same Queue.put, with each shard's group committer swapped for a "
            "pass-through that commits every put in its own durable transaction (bypass_group_commit in "
            "this script). lmdb-queue's sync=True opens LMDB with map_async=True (msync MS_ASYNC): it is "
            "not durable against an OS crash."
        ),
    ),
    "pickup": Workload(
        "8. idle consumer in another process: put -> get() returns, µs",
        w_pickup,
        {
            "ours": Variant(OURS, {}, "queue_max_django, default (inotify wake-up)"),
            "lmdb_queue": Variant(LMDBQ, {}, "lmdb-queue, default (polls every 10 ms)"),
        },
        [
            *LATENCY_US,
            Metric("p50_from_return_us", "p50 µs from put() return"),
            Metric("p99_from_return_us", "p99 µs from put() return"),
        ],
        [Ratio("ours p50 / lmdb-queue p50", "ours", "lmdb_queue", "p50_us")],
        [
            Target(
                "cross-process pickup p50 <= 1 ms",
                _metric_check("ours", "p50_us", 1000, at_most=True),
                "{:,.0f} µs",
            )
        ],
        note=(
            "latency is from just before put() to the consumer's get() returning (time.time() in both "
            "processes). persist-queue is not run: its blocking get() waits on an in-process "
            "threading.Event, so a consumer in another process only notices a put after its 10 s tick."
        ),
    ),
}


# Which lmdb-queue variant each variant is compared with in the "vs lmdb-queue" column (same-run ratio of
# the workload's first metric). One name: every variant of the workload; a dict: per variant.
_REFS: dict[str, str | dict[str, str]] = {
    "put": "lmdb_queue",
    "put_many": "lmdb_queue",
    "roundtrip": "lmdb_queue",
    "drain": "lmdb_queue",
    "pickup": "lmdb_queue",
    "drain_procs": {
        "ours_1proc": "lmdb_queue_1proc",
        "ours_writemap_1proc": "lmdb_queue_1proc",
        "lmdb_queue_1proc": "lmdb_queue_1proc",
        "ours_2proc": "lmdb_queue_2proc",
        "ours_writemap_2proc": "lmdb_queue_2proc",
        "lmdb_queue_2proc": "lmdb_queue_2proc",
    },
    "durable": {
        "ours_1t": "lmdb_queue_1t",
        "ours_put_many": "lmdb_queue_1t",
        "lmdb_queue_1t": "lmdb_queue_1t",
        "ours_16t": "lmdb_queue_16t",
        "ours_16t_txn_per_put": "lmdb_queue_16t",
        "ours_1shard_16t": "lmdb_queue_16t",
        "ours_1shard_16t_txn_per_put": "lmdb_queue_16t",
        "lmdb_queue_16t": "lmdb_queue_16t",
    },
}
for _name, _refs in _REFS.items():
    _variants = WORKLOADS[_name].variants
    for _key, _variant in _variants.items():
        _ref = _refs if isinstance(_refs, str) else _refs.get(_key)
        _variants[_key] = dataclasses.replace(_variant, ref=_ref)


# ---------------------------------------------------------------------------------------------- parent side


def _child_main(conn: Any, workload: str, variant: str, params: dict[str, Any], path: str) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # lead a process group: a timeout kills this child and whatever it started
    try:
        w = WORKLOADS[workload]
        result = w.run(w.variants[variant], params, path)
        engine = sys.modules.get("queue_max_django")
        if engine is not None:
            result["engine_path"] = os.path.dirname(engine.__file__ or "")
        conn.send(("ok", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_subrun(workload: str, variant: str, params: dict[str, Any], root: str) -> dict[str, Any]:
    timeout = WORKLOADS[workload].timeout(params)
    path = tempfile.mkdtemp(prefix=f"{workload}-{variant}-", dir=root)
    recv, send = SPAWN.Pipe(duplex=False)
    proc = SPAWN.Process(target=_child_main, args=(send, workload, variant, params, path))
    load = os.getloadavg()[0]
    busy_before, ours_before = machine_busy_seconds(), children_cpu_seconds()
    started = time.monotonic()
    try:
        proc.start()
        send.close()
        try:
            if recv.poll(timeout):
                status, value = recv.recv()
                proc.join(15)  # it has sent its result: let it close its stores and exit
            else:
                status, value = "error", f"timed out after {timeout:.0f} s (killed)"
        except EOFError:
            proc.join(5)
            status, value = "error", f"the child process died without a result (exit code {proc.exitcode})"
    finally:
        kill_group(proc)
        proc.join(5)
        recv.close()
        wall = time.monotonic() - started
        busy, ours = machine_busy_seconds(), children_cpu_seconds()
        shutil.rmtree(path, ignore_errors=True)
    others = None
    if busy is not None and busy_before is not None:
        # CPUs kept busy by everything else on the machine (other processes, and steal time in a VM)
        others = max(0.0, (busy - busy_before) - (ours - ours_before)) / wall
    if status != "ok":
        return {"error": value, "load1": load, "other_cpus": others}
    value.update(load1=load, other_cpus=others, wall_s=wall)
    return value


def machine_busy_seconds() -> float | None:
    """CPU seconds all CPUs spent busy since boot (user, nice, system, irq, softirq, steal), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds used by this process's finished children and their waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summarise(name: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    w = WORKLOADS[name]
    medians: dict[str, dict[str, float]] = {}
    for variant, results in runs.items():
        ok = [r for r in results if "error" not in r]
        keys = [m.key for m in w.metrics]
        medians[variant] = {
            k: statistics.median([r[k] for r in ok if k in r]) for k in keys if any(k in r for r in ok)
        }
    ratios: dict[str, float] = {}
    for ratio in w.ratios:
        per_round = []
        for a, b in zip(runs.get(ratio.num, []), runs.get(ratio.den, []), strict=False):
            if "error" not in a and "error" not in b and b.get(ratio.metric):
                per_round.append(a[ratio.metric] / b[ratio.metric])
        if per_round:
            ratios[ratio.label] = statistics.median(per_round)
    vs_ref: dict[str, float] = {}
    primary = w.metrics[0].key
    for variant in runs:
        ref = w.variants[variant].ref
        if ref is None or ref not in runs:
            continue
        per_round = [
            a[primary] / b[primary]
            for a, b in zip(runs[variant], runs[ref], strict=False)
            if "error" not in a and "error" not in b and b.get(primary)
        ]
        if per_round:
            vs_ref[variant] = statistics.median(per_round)
    summary: dict[str, Any] = {"medians": medians, "ratios": ratios, "vs_lmdb_queue": vs_ref, "targets": []}
    for target in w.targets:
        try:
            value, met = target.check(summary)
        except (KeyError, statistics.StatisticsError):
            summary["targets"].append({"target": target.text, "value": None, "met": None})
            continue
        summary["targets"].append(
            {"target": target.text, "value": value, "met": met, "shown": target.shown.format(value)}
        )
    return summary


def print_summary(name: str, runs: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> None:
    w = WORKLOADS[name]
    print(f"\n### {w.title}\n")
    header = ["queue", *[m.label for m in w.metrics], f"{w.metrics[0].label} vs lmdb-queue", "runs"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for variant, results in runs.items():
        cells = [w.variants[variant].label]
        for m in w.metrics:
            value = summary["medians"].get(variant, {}).get(m.key)
            cells.append("-" if value is None else m.fmt.format(value))
        ratio = summary["vs_lmdb_queue"].get(variant)
        cells.append("n/a" if ratio is None else f"{ratio:.2f}x")
        errors = sum("error" in r for r in results)
        cells.append(f"{len(results) - errors}" + (f" ({errors} failed)" if errors else ""))
        print("| " + " | ".join(cells) + " |")
    if summary["ratios"]:
        print("\n| same-run ratio (median over rounds) | value |\n|---|---|")
        for label, value in summary["ratios"].items():
            print(f"| {label} | {value:.2f}x |")
    loads = [r["load1"] for results in runs.values() for r in results if "load1" in r]
    others = [
        r["other_cpus"] for results in runs.values() for r in results if r.get("other_cpus") is not None
    ]
    if loads:
        print(f"\n1-minute load average when the sub-runs started: {min(loads):.2f} to {max(loads):.2f}")
    if others:
        print(
            f"CPUs kept busy by other processes during the sub-runs (of {os.cpu_count()}): median "
            f"{statistics.median(others):.2f}, max {max(others):.2f}"
        )
    if w.note:
        print(f"\n{w.note}")
    for variant, results in runs.items():
        for r in results:
            if "error" in r:
                print(f"\n{variant} FAILED:\n{r['error']}")


def machine_info() -> dict[str, Any]:
    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    versions = {}
    for dist in ("lmdb", "msgpack", "lmdb-queue", "persist-queue", "queue-max-django"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        import lmdb

        versions["liblmdb"] = ".".join(map(str, lmdb.version()))
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.find_spec("queue_max_django")
    engine_path = os.path.dirname(spec.origin) if spec and spec.origin else None
    return {
        "engine_path": engine_path,  # which copy of the engine was imported (PYTHONPATH can point elsewhere)
        "nproc": os.cpu_count(),
        "lscpu": "\n".join(run(["lscpu"]).splitlines()[:15]),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "git": run(["git", "-C", here, "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(run(["git", "-C", here, "status", "--porcelain", "--", "../queue_max_django"])),
        "tmp_fs": run(["stat", "-f", "-c", "%T", tempfile.gettempdir()]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 rounds (under 3 minutes)")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(WORKLOADS),
        metavar="NAME",
        help=f"run only this workload (repeatable): {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--repeat", type=int, default=None, help="rounds per workload (quick 2, full 5)")
    parser.add_argument("--json", metavar="PATH", help="write every sub-run's raw result and the summary")
    args = parser.parse_args(argv)

    params = dict(QUICK if args.quick else FULL)
    repeat = args.repeat if args.repeat is not None else params["repeat"]
    if repeat < 1:
        parser.error("--repeat must be >= 1")
    names = args.only or list(WORKLOADS)
    missing = {kind for kind, module in MODULES.items() if importlib.util.find_spec(module) is None}
    if missing:
        print(f"not installed, skipped: {sorted(missing)} (run with `uv run --group bench`)", file=sys.stderr)

    info = machine_info()
    print(f"# engine benchmark ({'quick' if args.quick else 'full'}, {repeat} rounds)")
    print(f"machine: {info['nproc']} CPUs, {info['platform']}, python {info['python']}, {info['versions']}")
    print(
        f"engine: {info['engine_path']} (checkout at git {info['git']}, engine edited: {info['git_dirty']})"
    )
    print(f"load average at start: {os.getloadavg()}")
    root = tempfile.mkdtemp(prefix="qmd-bench-")
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    summaries: dict[str, Any] = {}
    started = time.monotonic()
    try:
        for name in names:
            w = WORKLOADS[name]
            variants = [v for v, spec in w.variants.items() if spec.kind not in missing]
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            t0 = time.monotonic()
            for round_ in range(repeat):
                shift = round_ % len(variants)
                for variant in variants[shift:] + variants[:shift]:  # A B C, B C A, ...: interleaved
                    result = run_subrun(name, variant, params, root)
                    runs[variant].append(result)
                    shown = {k: round(v, 1) for k, v in result.items() if isinstance(v, float)}
                    status = "FAILED" if "error" in result else shown
                    print(f"  [{name} round {round_ + 1}/{repeat}] {variant}: {status}", flush=True)
            raw[name] = runs
            summaries[name] = summarise(name, runs)
            print_summary(name, runs, summaries[name])
            print(f"\n({name}: {time.monotonic() - t0:.0f} s)", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print("\n## Targets (medians of interleaved rounds, same-run ratios)\n")
    print("| target | measured | met |\n|---|---|---|")
    for name in names:
        for t in summaries[name]["targets"]:
            met = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
            print(f"| {t['target']} | {t.get('shown', '-')} | {met} |")
    elapsed = time.monotonic() - started
    print(f"\ntotal {elapsed:.0f} s; load average at end: {os.getloadavg()}")
    if args.json:
        document = {
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "mode": "quick" if args.quick else "full",
            "repeat": repeat,
            "params": params,
            "machine": info,
            "elapsed_s": elapsed,
            "results": raw,
            "summary": summaries,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, default=str)
            handle.write("\n")
        print(f"raw results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
