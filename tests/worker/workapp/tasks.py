"""Tasks that the worker tests run in real ``queue_worker`` subprocesses. They leave marks in files under
``$QUEUE_MAX_TEST_MARKS`` so that a test can see, on disk, what ran, where and how often."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from queue_max_django import Retry, current_job, periodic_task, task

from .marks import mark
from .outcomes import unfinishable as unfinishable  # registered where the worker discovers tasks


@task
def noop() -> None:
    return None


@task
def finish(value: int) -> int:
    """Marks ``value`` once it has finished."""
    mark("finished", value)
    return value


@task
def slow(value: int, seconds: float) -> int:
    """Marks ``value`` when it starts and when it has finished."""
    mark("started", value)
    time.sleep(seconds)
    mark("finished", value)
    return value


@task
async def async_finish(value: int) -> int:
    await asyncio.sleep(0.01)
    mark("finished", value)
    return value


@task
def progress(steps: int) -> int:
    """Saves its progress (``{"done": n}``) after each of ``steps`` steps, marks "saved", waits (60 s at
    most) for a file "go" in the marks folder, then sets ``finished`` (saved with the outcome)."""
    job = current_job()
    for step in range(1, steps + 1):
        job.metadata["done"] = step
        job.save_metadata()
    mark("saved", job.id)
    go = Path(os.environ["QUEUE_MAX_TEST_MARKS"]) / "go"
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    job.metadata["finished"] = True
    return steps


@task(timeout=0.5, max_retries=1)
def hang(value: int) -> None:
    """Never returns in time: the worker stops it after 0.5 s (and the retry too)."""
    mark("started", value)
    time.sleep(3600)


@task(rate_limit="10/s")
def limited(value: int) -> int:
    """At most 10 a second (a burst of 10), however many workers share the store."""
    mark("limited", value)
    return value


@task
def boom() -> None:
    raise ValueError("boom")


@task
def retry_later(seconds: float) -> None:
    mark("retry_later", seconds)
    raise Retry("not yet", delay=seconds)


@periodic_task(interval=1)
def every_second() -> None:
    mark("ticks", time.time())


@task
def stored_tick(label: str) -> None:
    """The task of a schedule kept in the store (tests/worker/test_stored_schedules.py)."""
    mark("stored_ticks", f"{label}@{time.time()}")


@task
def exits(code: int) -> None:
    """``sys.exit()`` in a task, as argparse or click code given bad arguments does."""
    mark("exits", code)
    sys.exit(code)


@task
def interrupts() -> None:
    mark("interrupts", 0)
    raise KeyboardInterrupt


if os.environ.get("QUEUE_MAX_TEST_NEW_CODE"):  # a release that adds a task: the worker has it once updated

    @task
    def added_later(value: int) -> int:
        mark("added_later", value)
        return value


@task
def poison() -> None:
    """Kills its worker process, as a segfault or the OOM killer would."""
    mark("poison", 0)
    os._exit(1)


@task(max_retries=3)
def cooperative(value: int) -> str:
    """Works in small steps and stops when the worker says a cancel of its job was requested; marks the ids
    the process had cancel requests for then (this process runs one job at a time: this job's)."""
    from queue_max_django.running import cancels

    mark("started", value)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cancels.requested():
            mark("stopped", ",".join(str(job_id) for job_id in sorted(cancels.requested_ids())))
            return "stopped early"
        time.sleep(0.02)
    return "ran to the end"


@task(max_retries=3)
def stubborn(value: int) -> None:
    """Ignores cancel requests: the worker ends its process after the cancel grace period."""
    mark("started", value)
    time.sleep(3600)


@task(concurrency=2)
def capped(value: int, seconds: float) -> int:
    """At most 2 run at once, store-wide: marks "span" with ``value:start:end`` (wall-clock seconds)."""
    started = time.time()
    time.sleep(seconds)
    mark("span", f"{value}:{started:.6f}:{time.time():.6f}")
    return value


@task(concurrency=1, concurrency_key="account")
def per_account(account: str, value: int, seconds: float) -> int:
    """At most 1 per ``account``: marks "span" with ``account:value:start:end``."""
    started = time.time()
    time.sleep(seconds)
    mark("span", f"{account}:{value}:{started:.6f}:{time.time():.6f}")
    return value


@task(concurrency=1)
def hold_once(value: int, seconds: float) -> int:
    """At most 1 at once. The first run of each ``value`` marks "held" and sleeps ``seconds`` (a test kills
    its worker then); a later run marks "finished" at once."""
    folder = Path(os.environ["QUEUE_MAX_TEST_MARKS"])
    held = folder / "held"
    if not held.exists() or f"{value} " not in held.read_text():
        mark("held", value)
        time.sleep(seconds)
    mark("finished", value)
    return value
