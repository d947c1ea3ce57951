"""Celery's side of benchmarks/peers_postgres.py: Redis at $BENCH_REDIS_URL as the broker, no result backend
(``task_ignore_result``), the prefetch raised for short tasks as Celery's "Optimizing" guide advises, and
the no-op task. ``stamp`` writes the time it started into Redis: the idle pickup latency (Celery keeps no
record of when a task started without a result backend)."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
app = Celery("bench", broker=URL)
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=64,
    worker_disable_rate_limits=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
_stamps = redis.Redis.from_url(URL)


@app.task(name="noop")
def noop(*_args: object) -> None:
    return None


@app.task(name="stamp")
def stamp(key: str) -> None:
    _stamps.set(key, repr(time.time()))
