"""An idle ``queue_worker`` is idle, also with rate limits set: it waits for a hint or the next token instead
of polling the store (issue 28: with a limit set, one idle worker made 6,500 PostgreSQL transactions a
second). What an idle worker costs is counted: the CPU time of its processes (both stores) and the
transactions of its database (PostgreSQL: ``pg_stat_database``), each over a bounded window.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import TASKS, Site, wait_for

WINDOW = 4.0  # seconds an idle worker is watched
# Bounds of an idle worker with one process of two threads, hints on: each thread looks at the store about
# four times a second (the worker's POLL), so a dozen or two transactions a second; a worker that polls
# without waiting makes thousands (and keeps a core busy).
MAX_TRANSACTIONS_PER_SECOND = 40.0
MAX_CPU_SHARE = 0.25  # of one core, for the whole worker (supervisor and worker process)
_TICK = os.sysconf("SC_CLK_TCK")


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = [root]
    for pid in found:
        found.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def _transactions(url: str) -> int:
    """Every transaction committed or rolled back in ``url``'s database so far (as the server's statistics
    have it: each backend reports its own at most a second late)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _idle_cost(site: Site, worker_pid: int) -> tuple[float, float | None]:
    """What the idle worker costs over WINDOW: (the share of one core its processes used, the transactions
    a second in its database; None on the LMDB store). Each backend reports its transactions at most a
    second late, at both ends of the window alike: over a few seconds the count is a fair rate."""
    pids = _tree(worker_pid)
    postgres = site.location.kind == "postgres"
    cpu = _cpu_seconds(pids)
    xacts = _transactions(site.location.where) if postgres else 0
    started = time.monotonic()
    time.sleep(WINDOW)
    elapsed = time.monotonic() - started
    cpu_share = (_cpu_seconds(pids) - cpu) / elapsed
    if not postgres:
        return cpu_share, None
    return cpu_share, (_transactions(site.location.where) - xacts) / elapsed


def _limit(site: Site, key: str, rate: str) -> None:
    """Set a rate limit in the store and in the workers' settings: a worker applies the settings' store-wide
    and queue limits when it starts (and removes the others); a task's limit stays in the store."""
    with site.queue() as queue:
        queue.set_rate_limit(key, rate)
    if key == "*":
        site.env["QUEUE_MAX_TEST_RATE_LIMIT"] = rate
    elif key.startswith("queue:"):
        site.env["QUEUE_MAX_TEST_QUEUE_RATE_LIMITS"] = json.dumps({key.removeprefix("queue:"): rate})


def _start_idle(site: Site, *args: str) -> int:
    worker = site.start("--processes", "1", "--threads", "2", "--no-scheduler", "--worker-id", "idle", *args)
    with site.queue() as queue:
        wait_for(lambda: len(queue.workers()) == 1, 30, "the worker to register")
    time.sleep(1.5)  # its threads are waiting by now, and what came before reached the statistics
    return worker.proc.pid


def _stop(site: Site) -> None:
    for worker in site.workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()


def _assert_idle(site: Site, what: str, *args: str) -> None:
    """Start an idle worker (``args``: more options), watch it over WINDOW, stop it: it stayed within the
    bounds, and ran nothing."""
    cpu, xacts = _idle_cost(site, _start_idle(site, *args))
    _stop(site)
    print(f"idle worker, {what}: {cpu:.1%} of a core, {xacts} transactions/s")
    assert cpu <= MAX_CPU_SHARE, cpu
    assert xacts is None or xacts <= MAX_TRANSACTIONS_PER_SECOND, xacts
    assert site.marks("finished") == []


def test_an_idle_worker_with_rate_limits_and_no_job_waits_instead_of_polling(site: Site) -> None:
    """Limits of every kind at once, on a key of the application's own (``try_acquire``: no job falls under
    it), on the queue the worker serves, on a task and store-wide, and no job: the worker waits (for a hint
    or its poll), it does not ask the store again and again. (One worker for the four: each bound below is
    an upper bound, so a path that polls shows in the sum.)"""
    for key in ("app:mine", "queue:default", f"name:{TASKS}finish", "*"):
        _limit(site, key, "1/h")
    _assert_idle(site, "four limits")


@pytest.mark.parametrize("key", ["queue:default", f"name:{TASKS}finish", "*"], ids=["queue", "task", "store"])
def test_an_idle_worker_with_a_job_a_rate_limit_holds_back_waits_instead_of_polling(
    site: Site, key: str
) -> None:
    """A limit on a queue the worker serves, on a task, or store-wide, with a job that the empty bucket holds
    back for an hour: the worker waits for the next token, it does not ask the store again and again. (One
    test each: a store-wide bucket that holds the job would hide the queue's or the task's.)"""
    _limit(site, key, "1/h")
    with site.queue() as queue:
        assert queue.try_acquire(key)  # the bucket's one token: the next comes in an hour
        queue.put({"args": [1], "kwargs": {}}, name=TASKS + "finish")
    _assert_idle(site, f"limit {key!r}, a job held back")


def test_an_idle_worker_ignores_the_limit_of_a_queue_it_does_not_serve(site: Site) -> None:
    """A limit on another queue, with jobs of that queue held back by it: the worker that serves "default"
    only neither polls nor runs them."""
    _limit(site, "queue:other", "1/h")
    with site.queue() as queue:
        queue.put({"args": [1], "kwargs": {}}, name=TASKS + "finish", queue="other")
    _assert_idle(site, "limit on a queue it does not serve", "--queue", "default")


def test_a_limited_job_starts_as_soon_as_its_token_is_due(site: Site) -> None:
    """Jobs held back by an empty bucket: the worker waits for the next token, and starts the next job as
    soon as that token is due (not a poll later)."""
    _limit(site, "queue:slow", "1/2s")  # a token every 2 s, burst 1
    with site.queue() as queue:
        ids = [queue.put({"args": [n], "kwargs": {}}, name=TASKS + "finish", queue="slow") for n in range(2)]
        _start_idle(site)
        wait_for(lambda: len(site.marks("finished")) == 2, 10, "both jobs to run")
        first, second = (queue.job(job_id) for job_id in ids)
    _stop(site)
    assert first is not None and second is not None
    assert first.started_at is not None and second.started_at is not None
    gap = second.started_at - first.started_at
    assert 2.0 - 0.05 <= gap <= 2.0 + 0.3, gap  # no sooner than the token, and soon after it
