"""What the flow-control multi-process tests run in their child processes.

The children are fresh interpreters started by ``procs.Children`` (``subprocess`` + ``sys.executable``,
never ``fork``), running a target of this module. Each child opens its own ``Queue`` on the store its
location names (``procs.Where``), on the real clock, and reports JSON lines on its stdout (``procs.send``).
Children that must act together wait for a "go" file the parent creates once every child said it is
ready, so that interpreter start-up (a few hundred ms on a busy machine) is not part of what is measured.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from queue_max_django.engine import QueueEmpty
from queue_max_django.engine.stores.postgres.control import VERSION_TTL

from .procs import CHILD_TIMEOUT, Where, opened, send

# ---------------------------------------------------------------------------------------------- child side


def _wait_for_go(go: str) -> None:
    send({"ready": True})
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go file")
        time.sleep(0.001)


def take_tokens(where: Where, key: str, seconds: float, go: str) -> None:
    """try_acquire ``key`` in a tight loop for ``seconds``; report the grants, the calls and the wall-clock
    span (unix seconds) from before the first call to after the last one."""
    with opened(where) as q:
        q.remaining(key)  # open and warm up before the clock starts
        _wait_for_go(go)
        granted = calls = 0
        start = time.time()
        end_at = time.monotonic() + seconds
        while time.monotonic() < end_at:
            calls += 1
            if q.try_acquire(key):
                granted += 1
        end = time.time()
    send({"granted": granted, "calls": calls, "start": start, "end": end})


def drain_for(where: Where, seconds: float, go: str) -> None:
    """get + ack for ``seconds``; report the ids it took, and the span."""
    with opened(where) as q:
        q.stats()
        _wait_for_go(go)
        taken = []
        start = time.time()
        end_at = time.monotonic() + seconds
        while (left := end_at - time.monotonic()) > 0:
            try:
                record = q.get(timeout=min(left, 0.2))
            except QueueEmpty:
                continue
            record.ack()
            taken.append(record.job_id)
        end = time.time()
    send({"taken": taken, "start": start, "end": end})


def fail_jobs(where: Where, count: int) -> None:
    """Take ``count`` jobs and nack each (a task whose downstream is down); report the breakers after."""
    with opened(where) as q:
        failed = []
        for _ in range(count):
            record = q.get(timeout=CHILD_TIMEOUT)
            record.nack(RuntimeError("downstream is down"))
            failed.append(record.job_id)
        send({"failed": failed, "breakers": q.circuit_breakers()})


def _take_all(q: Any) -> list[list[Any]]:
    taken = []
    while True:
        try:
            record = q.get(0)
        except QueueEmpty:
            return taken
        record.ack()
        taken.append([record.job_id, record.name])


def take_in_rounds(where: Where, rounds: int, step_dir: str) -> None:
    """``rounds`` times: wait for the file ``<step_dir>/<round>``, take every job it may (get(0) until
    QueueEmpty, acking each), and report what it took and the breakers it sees. One long-lived Queue: what
    it sees of the breakers must follow what other processes change.

    What it sees may be as old as the store allows: the PostgreSQL store reuses its reading of the flow
    version for ``VERSION_TTL`` (5 ms), and the parent may create the step file sooner than that after this
    child's last claim. So a round starts twice that long after the file appears: the claim then sees every
    change the parent made before creating it, as the store promises (without the wait, a reset breaker
    could still look open to it: one CI run took nothing in round 1)."""
    with opened(where) as q:
        send({"ready": True, "breakers": q.stats().get("circuit_breakers")})  # also fills its flow cache
        for round_ in range(rounds):
            step = Path(step_dir) / str(round_)
            deadline = time.monotonic() + CHILD_TIMEOUT
            while not step.exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"no step file {step}")
                time.sleep(0.002)
            time.sleep(2 * VERSION_TTL)
            send({"taken": _take_all(q), "breakers": q.circuit_breakers()})
