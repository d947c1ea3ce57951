"""Code that the multi-process and crash tests run in child processes, and the parent's helpers to start,
watch and kill them.

Children are fresh interpreters (``subprocess`` + ``sys.executable``, never ``fork``: the parent has stores
open) that import their target from this module by name, with JSON arguments. (multiprocessing's spawn would
do too, but under pytest's console script every spawned child re-imports pytest first: 0.6 s each.)
Children report through files (one ``os.write`` per line, then ``fsync``: a line written before a SIGKILL is
complete and stays) or through JSON lines on their stdout. Each child opens its own ``Queue``, on the store
its ``StoreLocation`` argument names (tests/engine/locations.py: it crosses the JSON argument line); a plain
path is an LMDB store's (the tests marked ``lmdb``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from queue_max_django.engine import Queue, QueueEmpty, State
from tests.engine.locations import StoreLocation, as_location, encode
from tests.engine.probes import LmdbProbe

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 60.0  # generous: the machine is shared, but a child that hangs must not hang the suite
_BOOT = (
    "import importlib, json, sys; from tests.engine.locations import decode; "
    "getattr(importlib.import_module(sys.argv[1]), sys.argv[2])(*json.loads(sys.argv[3], object_hook=decode))"
)

# ---------------------------------------------------------------------------------------------- parent side


class Child:
    """One child interpreter running ``target(*args)``: a function of an importable module (procs.py,
    flowprocs.py), found again by module and name in the child."""

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.name = target.__name__
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _BOOT, target.__module__, self.name, json.dumps(args, default=encode)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        self.pid = self.popen.pid
        self._buffer = b""

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float = CHILD_TIMEOUT) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)

    def recv(self, timeout: float = CHILD_TIMEOUT) -> Any:
        """The next JSON message the child sent (one per line on its stdout)."""
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise AssertionError(f"no message from {self.name} within {timeout} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"{self.name} ended (exit code {self.popen.wait()}) without a message")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(10)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


class Children:
    """The processes one test started; ``kill_all()`` (at teardown) SIGKILLs those still alive, by pid."""

    def __init__(self) -> None:
        self.started: list[Child] = []

    def start(self, target: Callable[..., Any], *args: Any) -> Child:
        child = Child(target, args)
        self.started.append(child)
        return child

    def kill_all(self) -> None:
        for child in self.started:
            child.close()

    def together(self, go: Path, children: list[Child]) -> list[Any]:
        """Wait until each child said "ready", then let them all go at once. -> their ready messages."""
        ready = [child.recv() for child in children]
        go.touch()
        return ready


def kill(child: Child) -> None:
    """A real SIGKILL, then reap it."""
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    assert child.exitcode == -signal.SIGKILL, child.exitcode


def finish(child: Child, timeout: float = CHILD_TIMEOUT) -> None:
    """Wait for a child that should end by itself, and require a clean exit."""
    child.join(timeout)
    assert child.exitcode == 0, f"child {child.name} ended with {child.exitcode}"


def wait_for(predicate: Callable[[], Any], timeout: float = CHILD_TIMEOUT, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def read_lines(path: str | Path) -> list[list[str]]:
    """The complete lines of a child's log, split into words (a line cut by a kill has no newline)."""
    try:
        data = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [line.split() for line in data.split("\n")[:-1] if line]


# ---------------------------------------------------------------------------------------------- child side


def send(message: Any) -> None:
    """To the parent: one JSON line on stdout."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Log:
    """An append-only line log that survives a SIGKILL of the writer: one write per line, then fsync."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def line(self, *words: object) -> None:
        os.write(self.fd, (" ".join(str(word) for word in words) + "\n").encode())
        os.fsync(self.fd)


Where = StoreLocation | str
"""A child's store: its location, or an LMDB store's path."""


def _quiet(where: Where, **options: Any) -> Queue:
    """A queue with no background recovery or vacuum: the parent decides when those run."""
    return as_location(where).open_queue(**options)


def put_jobs(where: Where, log_path: str, tag: str, singles: int, batches: int, batch_size: int) -> None:
    """Producer: ``singles`` puts, then ``batches`` put_many calls; logs every id it got back."""
    log = Log(log_path)
    with _quiet(where) as q:
        for n in range(singles):
            log.line(q.put({"tag": tag, "n": n}))
        for b in range(batches):
            ids = q.put_many([{"tag": tag, "b": b, "i": i} for i in range(batch_size)])
            log.line(*ids)


def get_one(where: Where) -> None:
    """Take one job, ack it, send back [job id, payload]."""
    with _quiet(where) as q:
        record = q.get(timeout=CHILD_TIMEOUT)
        record.ack(result="acked by a child")
        send([record.job_id, record.payload])


def put_one(where: Where, payload: Any, options: dict[str, Any] | None = None) -> None:
    with _quiet(where) as q:
        send(q.put(payload, **(options or {})))


def drain(where: Where, log_path: str, expected_done: int) -> None:
    """Consumer: get + ack until the store has ``expected_done`` done jobs; logs every id it acked."""
    log = Log(log_path)
    deadline = time.monotonic() + CHILD_TIMEOUT
    with _quiet(where) as q:
        while time.monotonic() < deadline:
            try:
                record = q.get(timeout=0.2)
            except QueueEmpty:
                if q.stats()["done"] >= expected_done:
                    return
                continue
            record.ack()
            log.line(record.job_id)
    raise SystemExit("drain(): deadline passed")


def claim_and_hold(where: Where, log_path: str, count: int, lease_time: float) -> None:
    """Claim ``count`` jobs, log each (id, lease expiry), then wait to be killed."""
    log = Log(log_path)
    q = _quiet(where, lease_time=lease_time)
    for _ in range(count):
        record = q.get(timeout=CHILD_TIMEOUT)
        log.line(record.job_id, repr(record.lease_until))
    log.line("holding")
    time.sleep(CHILD_TIMEOUT)


def recover_once(where: Where, log_path: str) -> None:
    with _quiet(where) as q:
        Log(log_path).line(q.recover())


def claim_then_die(where: Where, log_path: str, lease_time: float) -> None:
    """A job that kills its holder: take it, log it, SIGKILL ourselves."""
    q = _quiet(where, lease_time=lease_time)
    record = q.get(timeout=CHILD_TIMEOUT)
    Log(log_path).line(record.job_id, record.retries)
    os.kill(os.getpid(), signal.SIGKILL)


def hold_with_touch(where: Where, log_path: str, lease_time: float, hold: float, every: float) -> None:
    """A live holder: take a job, ``touch()`` it every ``every`` s for ``hold`` s, then ack it."""
    log = Log(log_path)
    with _quiet(where, lease_time=lease_time) as q:
        record = q.get(timeout=CHILD_TIMEOUT)
        log.line("claimed", record.job_id)
        end = time.monotonic() + hold
        touches = 0
        while time.monotonic() < end:
            time.sleep(every)
            record.touch()
            touches += 1
        record.ack()
        log.line("acked", record.job_id, touches)


def chaos(where: Where, log_path: str, ready_path: str, seed: int) -> None:
    """Random put / put_many / get+ack / get+nack until killed. Logs, AFTER each call returned:
    ``p <id>`` for a put, ``b <batch> <first id> <last id>`` for a put_many of 200."""
    rng = random.Random(seed)
    log = Log(log_path)
    q = _quiet(where, retry_backoff=0, max_retries=1, lease_time=300)
    Path(ready_path).touch()
    n = 0
    while True:
        n += 1
        roll = rng.random()
        if roll < 0.25:
            job_id = q.put({"seed": seed, "n": n}, priority=rng.randint(-2, 2))
            log.line("p", job_id)
        elif roll < 0.3:
            batch = f"{seed}-{n}"
            ids = q.put_many([{"batch": batch, "i": i} for i in range(200)], delay=rng.choice([None, 60]))
            log.line("b", batch, ids[0], ids[-1])
        else:
            try:
                record = q.get(timeout=0)
            except QueueEmpty:
                continue
            if roll < 0.8:
                record.ack(result={"n": n})
            else:
                record.nack(RuntimeError("chaos"), permanent=rng.random() < 0.3)


def put_forever(where: Where, log_path: str, ready_path: str, sync: bool) -> None:
    """Put until killed; log each id only after put() returned (the put was acknowledged)."""
    log = Log(log_path)
    q = _quiet(where, sync=sync)
    Path(ready_path).touch()
    n = 0
    while True:
        n += 1
        log.line(q.put({"n": n, "pad": "x" * 100}))


def hold_reader(where: Where, ready_path: str, environment: str = "shard") -> None:
    """Keep a read transaction open until killed, on shard 0 or (``"control"``) on the control data
    (limits, breakers, locks): its reader slot goes stale."""
    q = _quiet(where)
    probe = LmdbProbe(q)
    if environment == "control":
        control = probe._coordination_env()  # the control data's environment (locks live there too)
        txn = control.env.begin()
        txn.stat(control.dbs["limits"])
    else:
        txn = probe.read_txn(0)
    Path(ready_path).touch()
    time.sleep(CHILD_TIMEOUT)
    del txn  # held open until the SIGKILL


def grow(where: Where, log_path: str, tag: str, count: int, size: int) -> None:
    """Put ``count`` payloads of ``size`` bytes (the map must grow) while reading between puts."""
    log = Log(log_path)
    with _quiet(where, map_size=1 << 20) as q:
        for n in range(count):
            job_id = q.put({"tag": tag, "n": n, "blob": bytes([n % 256]) * size})
            log.line(job_id)
            if n % 10 == 0:
                q.stats()
                job = q.job(job_id)
                assert job is not None and job.payload["n"] == n
            if n % 25 == 0:
                with contextlib.suppress(QueueEmpty):
                    q.get(timeout=0).ack()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wake_consumer(where: Where, rounds: int, idle: float) -> None:
    """Idle in ``get()`` for ``idle`` s (reports CPU used), then ``rounds`` times: say "ready", block in
    ``get(timeout=5)``, and send the wall time at which it returned."""
    with _quiet(where) as q:
        cpu, start = _cpu_seconds(), time.monotonic()
        with contextlib.suppress(QueueEmpty):
            q.get(timeout=idle)
        send(["idle", _cpu_seconds() - cpu, time.monotonic() - start])
        for _ in range(rounds):
            send(["ready"])
            record = q.get(timeout=5)
            send(["got", record.job_id, time.time()])
            record.ack()


@contextlib.contextmanager
def opened(where: Where | Path, **options: Any) -> Iterator[Queue]:
    q = _quiet(where if isinstance(where, StoreLocation) else str(where), **options)
    try:
        yield q
    finally:
        q.close()


def all_jobs(q: Queue) -> list[Any]:
    """Every job of every state (keyset paging through ``jobs()``)."""
    out = []
    for state in State:
        after = None
        while True:
            page = q.jobs(state, after=after, limit=1000)
            out.extend(page)
            if len(page) < 1000:
                break
            after = page[-1].job_id
    return out


def open_repeatedly(where: Where, log_path: str, times: int) -> None:
    """Open a fresh Queue ``times`` times (each a new LMDB open) and read through it; log each outcome."""
    log = Log(log_path)
    for _ in range(times):
        try:
            with _quiet(where, map_size=1 << 20) as q:
                log.line("ok", q.stats()["total"])
        except Exception as exc:
            log.line("error", type(exc).__name__, str(exc).replace("\n", " "))
