"""Chaos run: jobs through real ``queue_worker`` commands and producer processes while random worker
processes, supervisors and producers are SIGKILLed; then prove that nothing acknowledged was lost.

    uv run python benchmarks/chaos.py                       # 200,000 jobs, 20 kills (a few minutes)
    uv run python benchmarks/chaos.py --jobs 20000 --kills 6 --seed 7
    uv run python benchmarks/chaos.py --json report.json
    uv run python benchmarks/chaos.py --store postgresql     # + 2 server restarts (a throwaway cluster)

Method (docs/benchmarks.md): ``--supervisors`` ``queue_worker`` commands (each ``--processes`` worker
processes) and ``--producers`` producer processes run against one store. Each producer ``put``s jobs of the
task ``tests.chaos.chaosapp.tasks.record`` one at a time, with a token of its own as argument, and appends
``token job_id`` to its log once ``put`` has returned (so the log holds exactly the acknowledged puts, or one
fewer if it was killed in between). The task appends the token to its process's execution log. When the
number of finished jobs passes each of ``--kills`` thresholds drawn from the seeded random source, the driver
SIGKILLs one victim, chosen by the same source among the live kinds: a worker process (its pid from the
store's worker registry; its supervisor starts another; drawn while none is registered, the kill waits up to
15 s for one), a supervisor (restarted at once; its orphaned processes stop by themselves) or a producer
(restarted; it resumes its quota). After every kill (a round) ``manage.py queue_check`` (or, with
``--check verify``, the engine's ``verify()`` in this process) must find nothing wrong. Once everything is
produced and finished, the supervisors get SIGTERM, every process group the run started is SIGKILLed, and
the logs are compared with the store:

- lost: an acknowledged put whose job is missing or not finished (neither done nor dead-lettered);
- duplicated: a job that ran more than once. Each must have lost a lease (a lease-expired attempt in
  ``Job.errors``, or, claimed in a batch, an attempt that ended with no outcome: ``lost_a_lease``) and
  have been held by a process that was killed (``Job.worker_ids``);
- checked: the acknowledged puts compared, and the rounds of ``queue_check``.

On the PostgreSQL store (``--store postgresql``, benchmarks/runstore.py) the run also restarts the server
``--restarts`` times (2 by default, when the run started the server itself) at finished counts drawn from a
random source of their own (so that the kills are those of the LMDB run of the same seed): the first with
``pg_ctl restart -m immediate`` (every server process killed, as in a crash; the server recovers from its
WAL), the next ``-m fast``, alternating; a round of checks follows each. A producer whose ``put`` raises
(the server is going down or restarting) logs the token as not returned (``raised/``) and puts the job again
under a new token, as a real producer retries: a put that raised but had committed shows up as an
unacknowledged put that ran. A duplicated job none of whose holders was killed is accounted to a restart if
it was enqueued before a restart ended and its last attempt started after that restart began (the worker's
batched acknowledgement did not get through before the lease expired): at-least-once, as for a kill.

Exit status 0 when every property holds. Seeded (``--seed``): the kill schedule and the victims' choice
repeat; the exact instants depend on the machine. Bounded: ``--time-limit`` seconds in all.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.runstore import RunStore, add_options, open_store, target_from_env

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = "tests.chaos.settings"
TASK = "tests.chaos.chaosapp.tasks.record"
POLL = 0.05
WORKER_WAIT = 15.0  # seconds a drawn worker-process kill waits for one to register before taking a supervisor


@dataclass
class Config:
    folder: Path
    jobs: int = 200_000
    kills: int = 20
    seed: int = 1
    supervisors: int = 2
    processes: int = 2  # worker processes per supervisor
    threads: int = 1
    producers: int = 2
    produce_rate: float = 0.0  # jobs/s per producer; 0: as fast as the backlog allows
    backlog: int = 20_000  # producers pause while more jobs than this wait
    lease_time: float = 3.0
    kill_gap: float = 0.5  # seconds at least between two kills
    time_limit: float = 1800.0
    check: str = "command"  # "command": manage.py queue_check after each round; "verify": Queue.verify()
    store: RunStore | None = None  # None: an LMDB store in folder / "store"
    restarts: int = 0  # server restarts (a PostgreSQL store on a cluster the run started)


@dataclass
class Report:
    seed: int
    acknowledged: int = 0  # puts whose put() returned (logged by the producers)
    unacknowledged_ran: int = 0  # jobs that ran whose producer was killed before it logged the put
    executions: int = 0
    done: int = 0
    dead_lettered: int = 0
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    duplicated_without_lost_lease: list[int] = field(default_factory=list)
    duplicated_not_held_by_a_killed_process: list[int] = field(default_factory=list)
    done_without_running: list[int] = field(default_factory=list)
    rounds_checked: int = 0
    check_problems: list[str] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    store: str = "lmdb"
    restarts: list[dict[str, Any]] = field(default_factory=list)  # server restarts: mode, when, how long
    raised_puts: int = 0  # puts that raised (the server restarting); each was put again under a new token
    raised_puts_ran: int = 0  # of those, jobs that had been stored anyway and ran
    duplicated_across_a_restart: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated_without_lost_lease
            or self.duplicated_not_held_by_a_killed_process
            or self.done_without_running
            or self.check_problems
            or self.errors
        )

    def lines(self) -> list[str]:
        by_kind = Counter(kill["kind"] for kill in self.kills)
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(by_kind.items()))
        return [
            f"seed {self.seed}: {len(self.kills)} kills ({kinds}) in {self.seconds:.0f} s",
            f"checked: {self.acknowledged:,} acknowledged puts; {self.rounds_checked} rounds of queue_check",
            f"lost: {len(self.lost)}",
            f"duplicated: {len(self.duplicated)} (without a lost lease: "
            f"{len(self.duplicated_without_lost_lease)}; not held by a killed process: "
            f"{len(self.duplicated_not_held_by_a_killed_process)})",
            f"done {self.done:,}, dead-lettered {self.dead_lettered:,}, executions {self.executions:,}; "
            f"unacknowledged puts that ran: {self.unacknowledged_ran}",
            *self._restart_lines(),
            f"queue_check problems: {len(self.check_problems)}; errors: {len(self.errors)}",
            *(f"  {problem}" for problem in [*self.check_problems, *self.errors][:20]),
            "OK" if self.ok else "FAILED",
        ]

    def _restart_lines(self) -> list[str]:
        if self.store == "lmdb":
            return []
        restarts = ", ".join(
            f"-m {r['mode']} at {r['at_s']:.0f} s ({r['seconds']:.1f} s)" for r in self.restarts
        )
        return [
            f"server restarts: {len(self.restarts)}{': ' + restarts if restarts else ''}",
            f"puts that raised: {self.raised_puts} (stored anyway and ran: {self.raised_puts_ran}); "
            f"duplicated across a server restart: {len(self.duplicated_across_a_restart)}",
        ]


# ---------------------------------------------------------------------------------------------- producer


def produce(folder: Path, index: int, quota: int, rate: float, backlog: int) -> None:
    """A producer process: put jobs until this producer's logs (of every life) hold ``quota`` puts. On the
    PostgreSQL store a put that raises is logged to ``raised/`` and made again under a new token."""
    from queue_max_django.engine import Queue, StoreError

    target = target_from_env(folder)
    transient = (StoreError,) if isinstance(target, str) else ()  # a server restart, on PostgreSQL
    logs = folder / "puts"
    made = sum(len(complete_lines(path)) for path in logs.glob(f"p{index}-*"))
    fd = os.open(logs / f"p{index}-{os.getpid()}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    raised = folder / "raised" / f"p{index}-{os.getpid()}"
    began = time.monotonic()
    with retrying(lambda: Queue(target, do_recover=False, do_vacuum=False), transient) as queue:
        for seq in range(made, quota):
            if rate and (ahead := (seq - made) / rate - (time.monotonic() - began)) > 0:
                time.sleep(ahead)
            if seq % 500 == 0:
                while retrying(queue.stats, transient)["pending"] > backlog:
                    time.sleep(0.05)
            for attempt in itertools.count():
                token = f"{index}.{os.getpid()}.{seq}" + (f".{attempt}" if attempt else "")
                try:
                    job_id = queue.put({"args": [token], "kwargs": {}}, name=TASK)
                    break
                except transient as exc:
                    with open(raised, "a", encoding="utf-8") as log:
                        log.write(f"{token} {type(exc).__name__}\n")
                    time.sleep(0.1)
            os.write(fd, f"{token} {job_id}\n".encode())
    os.close(fd)


def retrying(call: Callable[[], Any], transient: tuple[type[Exception], ...], seconds: float = 120.0) -> Any:
    """``call()``, called again every 0.1 s while it raises one of ``transient``, for ``seconds`` at most."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except transient:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def complete_lines(path: Path) -> list[str]:
    """The lines of a log that were written whole (one write per line: a kill cuts none, but be sure)."""
    data = path.read_text(encoding="utf-8")
    lines = data.split("\n")
    return lines[:-1]  # the last piece is "" after a final newline, or a cut line


# ---------------------------------------------------------------------------------------------- driver


@dataclass
class Proc:
    kind: str  # "supervisor" or "producer"
    index: int
    popen: subprocess.Popen[bytes]
    name: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


class Chaos:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.folder = config.folder
        self.store = config.store or RunStore("lmdb", self.folder / "store")
        if config.restarts and not self.store.restartable:
            raise ValueError(
                "server restarts need a PostgreSQL store on a cluster the run started (no --url)"
            )
        for name in ("exec", "puts", "raised", "logs"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "QUEUE_MAX_CHAOS_DIR": str(self.folder),
            "QUEUE_MAX_CHAOS_LEASE_TIME": str(config.lease_time),
            "PYTHONPATH": str(ROOT),
            **self.store.env,
        }
        self.rng = random.Random(config.seed)
        self.report = Report(seed=config.seed, store=self.store.kind)
        # The restarts' own source: the kills and victims of a seed stay those of the LMDB run.
        self.restart_rng = random.Random(f"restarts {config.seed}")
        self.transient: tuple[type[Exception], ...] = ()  # errors the driver waits out (a server restart)
        self.groups: list[int] = []  # every process group started: SIGKILLed at the end
        self.supervisors: dict[int, Proc] = {}
        self.producers: dict[int, Proc] = {}
        self.finished_producers: set[int] = set()
        self.generation = 0
        self.killed_workers: set[str] = set()  # worker ids of processes that were SIGKILLed
        self.drawn: tuple[str, float] | None = None  # a kind drawn, waiting for its victim (since when)
        self.began = time.monotonic()

    # ------------------------------------------------------------------ processes

    def _popen(self, kind: str, index: int, argv: list[str]) -> Proc:
        self.generation += 1
        name = f"{kind[0]}{index}g{self.generation}"
        with open(self.folder / "logs" / f"{name}.log", "wb") as log:
            popen = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.groups.append(popen.pid)
        return Proc(kind, index, popen, name)

    def start_supervisor(self, index: int) -> None:
        c = self.config
        name = f"s{index}g{self.generation + 1}"
        self.supervisors[index] = self._popen(
            "supervisor",
            index,
            [sys.executable, "-m", "django", "queue_worker", "--processes", str(c.processes), "--threads",
             str(c.threads), "--no-scheduler", "--worker-id", name, "--shutdown-timeout", "5", "-v", "0"],
        )  # fmt: skip

    def start_producer(self, index: int) -> None:
        c = self.config
        quota = c.jobs // c.producers + (1 if index < c.jobs % c.producers else 0)
        self.producers[index] = self._popen(
            "producer",
            index,
            [sys.executable, __file__, "--produce", str(self.folder), "--producer", str(index), "--quota",
             str(quota), "--produce-rate", str(c.produce_rate), "--backlog", str(c.backlog)],
        )  # fmt: skip

    def cleanup(self) -> None:
        """SIGKILL every process group this run started (orphaned worker processes included)."""
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for proc in [*self.supervisors.values(), *self.producers.values()]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(10)

    # ------------------------------------------------------------------ the run

    def run(self) -> Report:
        from queue_max_django.engine import StoreError

        c = self.config
        thresholds = sorted(self.rng.uniform(0.03, 0.9) * c.jobs for _ in range(c.kills))
        restarts = sorted(self.restart_rng.uniform(0.1, 0.85) * c.jobs for _ in range(c.restarts))
        if self.store.kind == "postgresql":
            self.transient = (StoreError,)
        with self.store.queue() as queue:
            try:
                for index in range(c.producers):
                    self.start_producer(index)
                for index in range(c.supervisors):
                    self.start_supervisor(index)
                self._loop(queue, thresholds, restarts)
                self._stop_supervisors(queue)
            finally:
                self.cleanup()
            self._analyse(queue)
        self._check(None)  # the final round, always through the command
        self.report.seconds = time.monotonic() - self.began
        return self.report

    def _loop(self, queue: Any, thresholds: list[float], restarts: list[float]) -> None:
        c = self.config
        next_kill = 0.0
        while True:
            if time.monotonic() - self.began > c.time_limit:
                self.report.errors.append(f"time limit of {c.time_limit} s reached: {queue.stats()}")
                return
            self._watch_producers()
            for index, proc in list(self.supervisors.items()):
                if not proc.alive():
                    self.report.errors.append(f"supervisor {proc.name} exited with {proc.popen.returncode}")
                    self.start_supervisor(index)
            stats = retrying(queue.stats, self.transient)
            finished = stats["done"] + stats["failed"]
            if restarts and finished >= restarts[0] and time.monotonic() >= next_kill:
                restarts.pop(0)
                self._restart(finished)
                self._check(queue)
                next_kill = time.monotonic() + c.kill_gap
                continue
            due = thresholds and finished >= thresholds[0] and time.monotonic() >= next_kill
            if due and self._kill(queue, finished):
                thresholds.pop(0)
                self._check(queue)
                next_kill = time.monotonic() + c.kill_gap
                continue
            busy = stats["pending"] + stats["scheduled"] + stats["running"]
            if not (thresholds or restarts) and len(self.finished_producers) == c.producers and busy == 0:
                return
            time.sleep(POLL)

    def _watch_producers(self) -> None:
        for index, proc in list(self.producers.items()):
            code = proc.popen.poll()
            if code is None or index in self.finished_producers:
                continue
            if code == 0:
                self.finished_producers.add(index)
            else:
                self.report.errors.append(f"producer {proc.name} exited with {code}")
                self.start_producer(index)

    def _kill(self, queue: Any, finished: int) -> bool:
        """SIGKILL one victim. -> False when a worker process was drawn and none is registered yet (they
        are all starting: their supervisor was just restarted): the kill waits for one, up to WORKER_WAIT
        seconds, then takes their supervisor instead."""
        if self.drawn is None:
            kinds = ["worker", "supervisor"]
            if any(p.alive() and i not in self.finished_producers for i, p in self.producers.items()):
                kinds.append("producer")
            self.drawn = (self.rng.choice(kinds), time.monotonic())
        kind, since = self.drawn
        live = {proc.name for proc in self.supervisors.values() if proc.alive()}
        workers = sorted(
            (w for w in queue.workers() if w.worker_id.split("/")[0] in live and _alive(w.pid)),
            key=lambda w: w.worker_id,
        )
        if kind == "worker" and not workers:
            if time.monotonic() - since < WORKER_WAIT:
                return False
            kind = "supervisor"
        self.drawn = None
        when = round(time.monotonic() - self.began, 2)
        if kind == "worker":
            victim = workers[self.rng.randrange(len(workers))]
            os.kill(victim.pid, signal.SIGKILL)
            self.killed_workers.add(victim.worker_id)
            detail = {"worker_id": victim.worker_id, "pid": victim.pid, "jobs": list(victim.current_jobs)}
        elif kind == "supervisor":
            index = self.rng.randrange(len(self.supervisors))
            proc = self.supervisors[index]
            os.kill(proc.pid, signal.SIGKILL)
            proc.popen.wait(10)
            detail = {"name": proc.name, "pid": proc.pid}
            self.start_supervisor(index)
        else:
            running = sorted(
                i for i, p in self.producers.items() if p.alive() and i not in self.finished_producers
            )
            index = running[self.rng.randrange(len(running))]
            proc = self.producers[index]
            os.kill(proc.pid, signal.SIGKILL)
            proc.popen.wait(10)
            detail = {"name": proc.name, "pid": proc.pid}
            self.start_producer(index)
        self.report.kills.append({"at_s": when, "finished": finished, "kind": kind, **detail})
        return True

    def _restart(self, finished: int) -> None:
        """Restart the server: ``-m immediate`` (a crash) first, then ``-m fast``, alternating."""
        mode = "fast" if len(self.report.restarts) % 2 else "immediate"
        when = round(time.monotonic() - self.began, 2)
        seconds = self.store.restart(mode)
        self.report.restarts.append({"at_s": when, "finished": finished, "mode": mode, "seconds": seconds})

    def _check(self, queue: Any) -> None:
        """One round's consistency check: the queue_check command, or verify() in this process."""
        self.report.rounds_checked += 1
        if queue is not None and self.config.check == "verify":
            self.report.check_problems += retrying(queue.verify, self.transient)
            return
        done = subprocess.run(
            [sys.executable, "-m", "django", "queue_check", "--json"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        try:
            self.report.check_problems += json.loads(done.stdout)["problems"]
        except (ValueError, KeyError):
            self.report.check_problems.append(f"queue_check exited {done.returncode}: {done.stderr[-2000:]}")

    def _stop_supervisors(self, queue: Any) -> None:
        """SIGTERM, once each has its processes registered (a supervisor still starting Django has no
        handler yet: SIGTERM would just end it), and require a clean exit."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            registered = {w.worker_id.split("/")[0] for w in retrying(queue.workers, self.transient)}
            if all(proc.name in registered for proc in self.supervisors.values()):
                break
            time.sleep(POLL)
        for proc in self.supervisors.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.supervisors.values():
            try:
                code = proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.report.errors.append(f"supervisor {proc.name} did not stop within 30 s of SIGTERM")
                continue
            if code != 0:
                self.report.errors.append(f"supervisor {proc.name} exited with {code} after SIGTERM")

    # ------------------------------------------------------------------ the verdict

    def _analyse(self, queue: Any) -> None:
        from queue_max_django.engine import State

        report = self.report
        puts: dict[str, int] = {}
        for path in (self.folder / "puts").iterdir():
            for line in complete_lines(path):
                token, job_id = line.split()
                puts[token] = int(job_id)
        runs: Counter[str] = Counter()
        for path in (self.folder / "exec").iterdir():
            runs.update(complete_lines(path))
        raised = {
            line.split()[0] for path in (self.folder / "raised").iterdir() for line in complete_lines(path)
        }
        report.acknowledged = len(puts)
        report.executions = sum(runs.values())
        report.unacknowledged_ran = len(set(runs) - set(puts))
        report.raised_puts = len(raised)
        report.raised_puts_ran = len(raised & set(runs))
        finished = {
            job.job_id: job for state in (State.DONE, State.FAILED) for job in every_job(queue, state)
        }
        for token, job_id in puts.items():
            job = finished.get(job_id)
            if job is None:  # missing, or neither done nor dead-lettered
                report.lost.append(job_id)
                continue
            if job.state is State.DONE:
                report.done += 1
                if runs[token] == 0:
                    report.done_without_running.append(job_id)
            else:
                report.dead_lettered += 1
            if runs[token] > 1:
                report.duplicated.append(job_id)
                if not lost_a_lease(job):
                    report.duplicated_without_lost_lease.append(job_id)
                if set(job.worker_ids[:-1]) & self.killed_workers:
                    continue
                if self._across_a_restart(job):
                    report.duplicated_across_a_restart.append(job_id)
                else:
                    report.duplicated_not_held_by_a_killed_process.append(job_id)

    def _across_a_restart(self, job: Any) -> bool:
        """Was ``job`` enqueued before a server restart ended, and its last attempt started after it began?"""
        return any(
            job.enqueued_at <= restart["ended"] and (job.started_at or 0.0) >= restart["began"]
            for restart in self.store.restarts
        )


def every_job(queue: Any, state: Any, page: int = 1000) -> Iterator[Any]:
    """Every job in ``state``, a page of ``jobs()`` at a time (one look-up a job is slow on PostgreSQL)."""
    after = None
    while True:
        jobs = queue.jobs(state, after=after, limit=page)
        yield from jobs
        if len(jobs) < page:
            return
        after = jobs[-1].job_id


def lost_a_lease(job: Any) -> bool:
    """Did an attempt of ``job`` end with its lease expiring? Charged, it left a LeaseExpired error; a job
    claimed in a batch goes back uncharged (no error), so an attempt with no outcome recorded says so:
    every attempt ends in the success (a done job's last), an error, or a lease lost in a batch."""
    from queue_max_django.engine import State

    if any(kind == "LeaseExpired" for kind, _error in job.errors):
        return True
    return bool(job.attempts > len(job.errors) + (1 if job.state is State.DONE else 0))


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_chaos(config: Config) -> Report:
    chaos = Chaos(config)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        chaos.cleanup()
        raise SystemExit(1)

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, on_sigterm)  # never leave a process behind
    try:
        return chaos.run()
    finally:
        chaos.cleanup()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--supervisors", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="worker processes per supervisor")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--produce-rate", type=float, default=0.0, help="jobs/s per producer (0: unlimited)")
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--lease-time", type=float, default=3.0)
    parser.add_argument("--kill-gap", type=float, default=0.5, help="seconds at least between two kills")
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--check", choices=["command", "verify"], default="command")
    add_options(parser)
    parser.add_argument(
        "--restarts", type=int, help="server restarts (default: 2 with a cluster the run starts, else 0)"
    )
    parser.add_argument("--dir", type=Path, help="where the store and logs go (default: a new temp dir)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--produce", type=Path, help=argparse.SUPPRESS)  # the producer child's mode
    parser.add_argument("--producer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quota", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce is not None:
        produce(args.produce, args.producer, args.quota, args.produce_rate, args.backlog)
        return 0
    import tempfile

    folder = args.dir or Path(tempfile.mkdtemp(prefix="queue-max-chaos-"))
    with open_store(args.store, folder, args.url) as store:
        restarts = args.restarts if args.restarts is not None else (2 if store.restartable else 0)
        config = Config(folder=folder, jobs=args.jobs, kills=args.kills, seed=args.seed,
                        supervisors=args.supervisors, processes=args.processes, threads=args.threads,
                        producers=args.producers, produce_rate=args.produce_rate, backlog=args.backlog,
                        lease_time=args.lease_time, kill_gap=args.kill_gap, time_limit=args.time_limit,
                        check=args.check, store=store, restarts=restarts)  # fmt: skip
        print(f"chaos: {args.jobs:,} jobs, {args.kills} kills, seed {args.seed}, in {folder}", flush=True)
        if store.kind != "lmdb":
            print(f"{store.describe()}; {restarts} server restarts", flush=True)
        report = run_chaos(config)
    print("\n".join(report.lines()))
    if args.json:
        args.json.write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=1), encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
