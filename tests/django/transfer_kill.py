"""The kill test of ``manage.py queue_transfer``, shared by the test suite (a few thousand jobs, a few
kills: ``test_transfer_kill.py``) and ``benchmarks/transfer_kill.py`` (100,000 jobs): fill a source store
with jobs of every state that moves, run the command in a real process and SIGKILL it at random instants,
run it again until it finishes, then check that every job is in exactly one store, once, as it was."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_max_django.engine import Queue, State

ROOT = Path(__file__).resolve().parent.parent.parent
BOUND = 600.0  # seconds a run of the command may take before the test gives up on it


@dataclass
class Outcome:
    jobs: int
    kills: int = 0  # runs killed while they were still running
    runs: int = 0
    seconds: float = 0.0  # the whole move, kills and reruns included
    last_report: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def where(spec: dict[str, Any]) -> str:
    return str(spec["URL"] if spec["STORE"] == "postgresql" else spec["DATA_DIR"])


def fill(spec: dict[str, Any], jobs: int, seed: int) -> dict[int, tuple[str, Any]]:
    """``jobs`` jobs in the store ``spec``: most pending (over three priorities and two queues), some
    scheduled, some done with a result, some dead letters. -> {id: (state, payload)}."""
    rng = random.Random(seed)
    expected: dict[int, tuple[str, Any]] = {}
    shards = spec.get("SHARDS")
    with Queue(where(spec), **({"shards": shards} if shards else {})) as queue:
        finished = max(2, jobs // 20)
        scheduled = max(1, jobs // 10)
        pending = jobs - finished - scheduled
        n = 0
        while n < pending:
            chunk = [{"n": n + i} for i in range(min(1000, pending - n))]
            ids = queue.put_many(
                chunk, priority=rng.choice((-1, 0, 5)), queue=rng.choice(("default", "mail"))
            )
            expected.update((job_id, ("pending", p)) for job_id, p in zip(ids, chunk, strict=True))
            n += len(chunk)
        chunk = [{"later": i} for i in range(scheduled)]
        ids = queue.put_many(chunk, delay=3600)
        expected.update((job_id, ("scheduled", p)) for job_id, p in zip(ids, chunk, strict=True))
        chunk = [{"ended": i} for i in range(finished)]
        ids = queue.put_many(chunk, queue="ending", max_retries=0)
        for i, job_id in enumerate(ids):
            record = queue.claim(job_id)
            assert record is not None
            if i % 2:
                record.ack({"result": i})
                expected[job_id] = ("done", chunk[i])
            else:
                record.nack(ValueError("dead"))
                expected[job_id] = ("failed", chunk[i])
    return expected


def run_with_kills(
    source: dict[str, Any], target: dict[str, Any], kills: int, seed: int, *, batch: int = 500
) -> Outcome:
    """Run ``queue_transfer --from source --to target`` in a process and SIGKILL it ``kills`` times, each
    when the source's jobs have dropped past a random fraction of the move (sorted, from 5% to 95%: read
    from the source's counts every 10 ms, so the kill lands wherever the command then is, within a
    batch or between two), then let a last run finish."""
    rng = random.Random(seed)
    points = sorted(rng.uniform(0.05, 0.95) for _ in range(kills))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.django.transfer_settings",
        "PYTHONPATH": str(ROOT),
        "QUEUE_MAX_TEST_TRANSFER": json.dumps({"source": source, "target": target}),
    }
    argv = [sys.executable, "-m", "django", "queue_transfer", "--from", "source", "--to", "target", "--json",
            "--batch", str(batch)]  # fmt: skip
    started = time.monotonic()
    with Queue(where(source)) as watched:
        total = _waiting(watched)
        outcome = Outcome(jobs=total)
        while True:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)  # fmt: skip
            outcome.runs += 1
            if outcome.kills < kills:
                threshold = total * (1.0 - points[outcome.kills])
                deadline = time.monotonic() + BOUND
                while proc.poll() is None and _waiting(watched) > threshold and time.monotonic() < deadline:
                    time.sleep(0.01)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate(timeout=BOUND)  # reaps it and closes its pipes
                    outcome.kills += 1
                    continue
            out, err = proc.communicate(timeout=BOUND)
            if proc.returncode != 0:
                raise AssertionError(f"queue_transfer exited {proc.returncode}: {err[-2000:]}")
            outcome.last_report = json.loads(out)
            break
    outcome.seconds = time.monotonic() - started
    return outcome


def _waiting(queue: Queue) -> int:
    """The source's jobs that a move takes (from its counters)."""
    stats = queue.stats()
    return sum(stats[state] for state in ("pending", "scheduled", "done", "failed"))


def check(source: dict[str, Any], target: dict[str, Any], expected: dict[int, tuple[str, Any]]) -> list[str]:
    """Every expected job in the target, once, in its state with its payload; none left in the source;
    no mark left; both stores consistent (``verify``)."""
    problems: list[str] = []
    with Queue(where(source)) as src, Queue(where(target)) as dst:
        left = {state: n for state, n in src.stats().items() if state in {s.value for s in State} and n}
        if left:
            problems.append(f"left in the source: {left}")
        seen: Counter[int] = Counter()
        for state in State:
            after = None
            while page := dst.jobs(state, after=after, limit=1000):
                for job in page:
                    seen[job.job_id] += 1
                    want = expected.get(job.job_id)
                    if want is None:
                        problems.append(f"job {job.job_id} in the target was never put")
                    elif (want[0], want[1]) != (job.state.value, job.payload):
                        problems.append(f"job {job.job_id}: {job.state.value} {job.payload!r}, not {want}")
                after = page[-1].job_id  # keyset paging: on from the last job's place
        missing = set(expected) - set(seen)
        if missing:
            problems.append(f"{len(missing)} job(s) missing from the target, e.g. {sorted(missing)[:5]}")
        twice = [job_id for job_id, n in seen.items() if n > 1]
        if twice:
            problems.append(f"{len(twice)} job(s) listed twice in the target, e.g. {twice[:5]}")
        counts = Counter(state for state, _payload in expected.values())
        stats = dst.stats()
        for state, n in counts.items():
            if stats[state] != n:
                problems.append(f"target counts {stats[state]} {state}, expected {n}")
        problems += [f"source: {p}" for p in src.verify()] + [f"target: {p}" for p in dst.verify()]
        marks = dst._store.transfer.marks()
        if marks:
            problems.append(f"{marks} mark(s) left in the target")
    return problems
