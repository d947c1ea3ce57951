"""Several hosts on one machine: the PostgreSQL store with its server, two ``queue_worker`` commands and the
producers on four simulated machines (network namespaces), while one worker host is killed whole and the
other's link is cut for longer than the lease; then prove that nothing acknowledged was lost, that only jobs
the faulted hosts held ran twice, and that the cut host's late outcomes were refused.

    uv run python benchmarks/multihost.py                       # 100,000 jobs (as root: ip netns)
    uv run python benchmarks/multihost.py --jobs 10000 --lease-time 1 --cut-at 0.1 --kill-at 0.3
    uv run python benchmarks/multihost.py --json report.json

The machines (``benchmarks/netns.py``): ``db`` runs a throwaway PostgreSQL cluster of its own (initdb and
pg_ctl from the installed server binaries, as the tests' ``tests/pgserver.py`` starts one; fsync off), which
listens on its end of each host's link; ``w1`` and ``w2`` each run ``manage.py queue_worker --processes 2
--worker-id wN`` (settings: ``tests/multihost/settings.py``, ``QUEUE_MAX = {"STORE": "postgresql", "URL":
"postgresql://postgres@10.213.N.1:5432/postgres", "LEASE_TIME": ...}``); once every worker process has
registered, ``prod`` runs ``--producers`` producer processes that put jobs of the task
``tests.multihost.hostapp.tasks.record`` (``--put-batch`` per ``put_many``, 1 for one ``put`` each; pausing
while more than ``--backlog`` wait), a token of their own as each job's argument, and append ``token
job_id`` to their log once the call has returned. Each host reaches the server over its own link (a veth
pair). The task appends ``token host pid`` to its process's execution log. This process watches the store
through the server's Unix socket.

The faults: when ``--cut-at`` of the jobs are finished and ``w1`` holds jobs, the link of ``w1`` is
cut at the server's end (``ip link set ... down``: its packets are dropped, its connections wait) for
``--cut-seconds`` (3 lease times by default), then restored; when ``--kill-at`` are finished (and ``w1`` had
a lease time to resume), every process of ``w2`` is SIGKILLed at once, the machine dying whole. ``w2`` stays
dead; ``w1`` finishes the run. The jobs each host held (running, claimed by it) just before and just after
its fault are recorded.

Then ``w1`` gets SIGTERM and must exit 0, ``manage.py queue_check`` runs on the ``prod`` host, and the logs
are compared with the store:

- lost: an acknowledged put whose job is missing or not finished (neither done nor dead-lettered);
- duplicated: a job that ran more than once; each must be one the killed host held at the kill, or one the
  cut host held at the cut or whose outcome from the cut host was refused (a claim that the cut caught in
  flight commits late, with its lease already expired);
- the cut host's worker: its supervisor never exited, none of its processes was replaced, and every job it
  ran after another worker had taken the job (the job's last holder is not ``w1``) is one whose outcome the
  store refused (each refusal is logged with the job's id; the count is the sum of the processes' last lines);
- ``queue_check``: no problem.

Exit status 0 when every property holds. Bounded: ``--time-limit`` seconds; every process and namespace is
removed at the end, also after an error or Ctrl-C, and namespaces a killed run left are removed at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the checkout's packages (benchmarks, tests)
    sys.path.insert(0, str(ROOT))

from benchmarks import netns  # noqa: E402

SETTINGS = "tests.multihost.settings"
TASK = "tests.multihost.hostapp.tasks.record"
PREFIX = "qmmh"  # the namespaces' names: qmmh<pid>-db, qmmh<pid>-w1, ...
CUT, KILLED, PRODUCERS = "w1", "w2", "prod"
HOSTS = [CUT, KILLED, PRODUCERS]
POLL = 0.05
PORT = 5432
REFUSED = re.compile(r"job (\d+) (?:finished but was not acknowledged|was taken back while it ran)")
EXITING = re.compile(
    r"worker (\S+): exiting: ran (\d+) job\(s\), (\d+) failed; (\d+) late outcome\(s\) refused"
)
ABANDONED = re.compile(r"acknowledging (\d+) job\(s\) failed \d+ times")


@dataclass
class Config:
    folder: Path
    jobs: int = 100_000
    producers: int = 2
    processes: int = 2  # worker processes per worker host
    threads: int = 1
    lease_time: float = 2.0
    cut_seconds: float | None = None  # None: 3 lease times
    cut_at: float = 0.2  # the fraction of the jobs finished when the link is cut
    kill_at: float = 0.5  # ... when the other host is killed
    produce_rate: float = 0.0  # jobs/s per producer; 0: as fast as the backlog allows
    put_batch: int = 50  # jobs per put_many of a producer (1: put() one at a time)
    backlog: int = 20_000  # producers pause while more jobs than this wait
    time_limit: float = 1800.0
    prefix: str = PREFIX
    verbose: bool = False  # print the timeline as it happens

    @property
    def cut_for(self) -> float:
        return 3 * self.lease_time if self.cut_seconds is None else self.cut_seconds


@dataclass
class Report:
    jobs: int
    acknowledged: int = 0  # puts whose put() returned (logged by the producers)
    done: int = 0
    dead_lettered: int = 0
    executions: int = 0
    runs_by_host: dict[str, int] = field(default_factory=dict)
    lost: list[int] = field(default_factory=list)
    done_without_running: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    duplicated_held_by_cut_host: int = 0  # held by the cut host at the cut, or its outcome refused
    refused_not_held_at_cut: int = 0  # refused, not seen held: claimed as the cut came, committed late
    duplicated_held_by_killed_host: int = 0
    duplicated_elsewhere: list[int] = field(default_factory=list)  # must be empty
    cut: dict[str, Any] = field(default_factory=dict)
    kill: dict[str, Any] = field(default_factory=dict)
    cut_host_exit: int | None = None
    cut_host_replaced: list[str] = field(default_factory=list)  # log lines of processes restarted
    refused: int = 0  # late outcomes of the cut host the store refused (its processes' last lines)
    refused_logged: int = 0  # ... each logged with the job id
    late_runs: int = 0  # jobs the cut host ran after another worker had taken them
    late_runs_not_refused: list[int] = field(default_factory=list)  # must be empty
    abandoned_acks: int = 0  # acknowledgements the cut host gave up on (the jobs ran again elsewhere)
    check_problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)  # (seconds since the start, what)
    seconds: float = 0.0
    jobs_per_second: float = 0.0  # acknowledged jobs / (first put to last finish)
    machine: str = ""

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.done_without_running
            or self.duplicated_elsewhere
            or self.cut_host_replaced
            or self.cut_host_exit != 0
            or self.late_runs_not_refused
            or self.refused != self.refused_logged
            or self.check_problems
            or self.errors
            or not self.cut
            or not self.kill
        )

    def lines(self) -> list[str]:
        cut, kill, by_host = self.cut, self.kill, sorted(self.runs_by_host.items())
        problems = [*self.check_problems, *self.errors]
        return [
            f"{self.jobs:,} jobs in {self.seconds:.0f} s; {self.jobs_per_second:,.0f} jobs/s from the first "
            f"put to the last finish; {self.machine}",
            f"cut: {CUT}'s link down at {cut.get('finished', 0):,} finished, for "
            f"{cut.get('seconds', 0):.1f} s (lease {cut.get('lease_time', 0):g} s); {CUT} held "
            f"{len(cut.get('held', []))} job(s); {cut.get('done_meanwhile', 0):,} done meanwhile",
            f"kill: every process of {KILLED} ({len(kill.get('pids', []))}) SIGKILLed at "
            f"{kill.get('finished', 0):,} finished; it held {len(kill.get('held', []))} job(s)",
            f"acknowledged puts: {self.acknowledged:,}; done {self.done:,}, dead-lettered "
            f"{self.dead_lettered:,}; lost: {len(self.lost)}",
            f"executions: {self.executions:,} ({', '.join(f'{h} {n:,}' for h, n in by_host)}); "
            f"done without running: {len(self.done_without_running)}",
            f"duplicated: {len(self.duplicated)} (lost by {CUT} to the cut: "
            f"{self.duplicated_held_by_cut_host}; held by {KILLED} at the kill: "
            f"{self.duplicated_held_by_killed_host}; neither: {len(self.duplicated_elsewhere)})",
            f"{CUT}'s worker: exit {self.cut_host_exit}; processes replaced: {len(self.cut_host_replaced)}; "
            f"late outcomes refused: {self.refused} (logged with their job: {self.refused_logged}; of "
            f"jobs not seen held at the cut: {self.refused_not_held_at_cut})",
            f"{CUT} ran {self.late_runs} job(s) after another worker had taken them; not refused: "
            f"{len(self.late_runs_not_refused)}; acknowledgements given up: {self.abandoned_acks}",
            f"queue_check problems: {len(self.check_problems)}; errors: {len(self.errors)}",
            *(f"  {problem}" for problem in problems[:20]),
            "OK" if self.ok else "FAILED",
        ]


# ---------------------------------------------------------------------------------------------- producer


def produce(folder: Path, url: str, index: int, quota: int, rate: float, batch: int, backlog: int) -> None:
    """A producer process (on the ``prod`` host): put ``quota`` jobs, ``batch`` per ``put_many`` (or one
    ``put`` each), at most ``rate`` a second if not 0, pausing while more than ``backlog`` wait; each job's
    token and id are logged once its put returned."""
    from queue_max_django.engine import Queue

    fd = os.open(folder / "puts" / f"p{index}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    began = time.monotonic()
    checked = -500
    with Queue(url, do_recover=False, do_vacuum=False) as queue:
        for seq in range(0, quota, batch):
            if rate and (ahead := seq / rate - (time.monotonic() - began)) > 0:
                time.sleep(ahead)
            if seq - checked >= 500:
                checked = seq
                while queue.stats()["pending"] > backlog:
                    time.sleep(0.05)
            tokens = [f"{index}.{n}" for n in range(seq, min(seq + batch, quota))]
            if batch == 1:
                ids = [queue.put({"args": tokens, "kwargs": {}}, name=TASK)]
            else:
                ids = queue.put_many([{"args": [token], "kwargs": {}} for token in tokens], name=TASK)
            os.write(
                fd, "".join(f"{token} {job_id}\n" for token, job_id in zip(tokens, ids, strict=True)).encode()
            )
    os.close(fd)


def complete_lines(path: Path) -> list[str]:
    """The lines of a log that were written whole (the last piece is "" or a line cut by a kill)."""
    return path.read_text(encoding="utf-8").split("\n")[:-1]


# ---------------------------------------------------------------------------------------------- the run


class MultiHost:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.folder = config.folder
        for name in ("exec", "puts", "logs"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        self.report = Report(jobs=config.jobs, machine=machine())
        self.net = netns.Network(config.prefix, "db", HOSTS)
        self.cluster: Any = None
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.began = time.monotonic()

    def event(self, what: str) -> None:
        at = round(time.monotonic() - self.began, 2)
        self.report.timeline.append((at, what))
        if self.config.verbose:
            print(f"{at:8.2f} s  {what}", flush=True)

    def url(self, host: str) -> str:
        """The store's URL as ``host`` reaches the server: the server's address on ``host``'s link."""
        return f"postgresql://postgres@{self.net.hub_address(host)}:{PORT}/postgres"

    def env(self, host: str) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "PYTHONPATH": str(ROOT),
            "QUEUE_MAX_MULTIHOST_URL": self.url(host),
            "QUEUE_MAX_MULTIHOST_HOST": host,
            "QUEUE_MAX_MULTIHOST_DIR": str(self.folder),
            "QUEUE_MAX_MULTIHOST_LEASE_TIME": str(self.config.lease_time),
        }

    def _popen(self, name: str, host: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.folder / "logs" / f"{name}.log", "wb") as log:
            popen = subprocess.Popen(
                self.net.argv(host, argv), cwd=ROOT, env=self.env(host), stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.procs[name] = popen
        return popen

    def log(self, name: str) -> str:
        path = self.folder / "logs" / f"{name}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------ set up, tear down

    def start_server(self) -> str:
        """The throwaway cluster on ``db``, listening on the server's end of every link. -> its URL by
        its Unix socket (this process's way in)."""
        from queue_max_django.engine.stores.postgres import schema
        from tests.pgserver import Cluster, connect, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.cluster = Cluster(bindir, netns=self.net.namespace("db"))
        listen = ",".join(self.net.hub_address(host) for host in HOSTS)
        url: str = self.cluster.start(listen=listen, hba=(f"host all all {netns.SUBNET} trust",))
        with contextlib.closing(connect(url)) as conn:
            schema.create(conn)
        return url

    def start_worker(self, host: str) -> None:
        c = self.config
        self._popen(host, host, [
            sys.executable, "-m", "django", "queue_worker", "--processes", str(c.processes), "--threads",
            str(c.threads), "--no-scheduler", "--worker-id", host, "--shutdown-timeout", "10",
        ])  # fmt: skip

    def start_producer(self, index: int) -> None:
        c = self.config
        quota = c.jobs // c.producers + (1 if index < c.jobs % c.producers else 0)
        self._popen(f"p{index}", PRODUCERS, [
            sys.executable, __file__, "--produce", str(self.folder), "--url", self.url(PRODUCERS),
            "--producer", str(index), "--quota", str(quota), "--produce-rate", str(c.produce_rate),
            "--put-batch", str(c.put_batch), "--backlog", str(c.backlog),
        ])  # fmt: skip

    def cleanup(self) -> None:
        """Every process of the run killed, the server stopped, the namespaces removed."""
        for popen in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
        for popen in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(10)
        if self.cluster is not None:
            self.cluster.stop()  # pg_ctl stop runs in the server's namespace: before it goes
            self.cluster = None
        self.net.down()

    # ------------------------------------------------------------------ the run

    def run(self) -> Report:
        from queue_max_django.engine import Queue

        stale = netns.clean_stale(self.config.prefix)
        self.event(f"namespaces left by an earlier run removed: {stale}" if stale else "no stale namespaces")
        self.net.up()
        self.event(f"namespaces and links up: {[self.net.namespace(h) for h in ['db', *HOSTS]]}")
        url = self.start_server()
        self.event("PostgreSQL started on db, listening on " + ", ".join(map(self.net.hub_address, HOSTS)))
        with Queue(url, do_recover=False, do_vacuum=False) as queue:
            for host in (CUT, KILLED):
                self.start_worker(host)
            self._wait_for_workers(queue)
            self.event("every worker process registered")
            for index in range(self.config.producers):
                self.start_producer(index)
            first_put = time.monotonic()
            self.event("producers started")
            try:
                self._loop(queue)
            finally:
                if self.report.cut and "restored_s" not in self.report.cut:
                    self.net.restore(CUT)  # the run ended early: the cut host must be reachable to stop
            last_finish = time.monotonic()
            self.event(f"every job finished: {queue.stats()}")
            self._stop_cut_host()
            self.event(f"{CUT}'s worker stopped (SIGTERM): exit {self.report.cut_host_exit}")
            self._check()
            self.event(f"queue_check on {PRODUCERS}: {len(self.report.check_problems)} problem(s)")
            self._analyse(queue)
            self.event("logs compared with the store")
        self.report.seconds = time.monotonic() - self.began
        self.report.jobs_per_second = self.report.acknowledged / max(last_finish - first_put, 1e-9)
        return self.report

    def _loop(self, queue: Any) -> None:
        c = self.config
        cut_until: float | None = None
        restored_at: float | None = None
        while True:
            if time.monotonic() - self.began > c.time_limit:
                self.report.errors.append(f"time limit of {c.time_limit} s reached: {queue.stats()}")
                return
            for name, popen in self.procs.items():
                code = popen.poll()
                worker = name in (CUT, KILLED)  # a worker must not exit by itself, even with 0
                if code is not None and (code != 0 or worker) and not (name == KILLED and self.report.kill):
                    self.report.errors.append(f"{name} exited with {code}: {self.log(name)[-2000:]}")
                    return
            stats = queue.stats()
            finished = stats["done"] + stats["failed"]
            now = time.monotonic()
            if not self.report.cut and finished >= c.cut_at * c.jobs and (held := self._held(queue, CUT)):
                self.net.cut(CUT)  # while it holds jobs
                cut_until = time.monotonic() + c.cut_for
                time.sleep(0.2)  # what the server received before the cut has committed by now
                after = self._held(queue, CUT)
                held |= after
                backends = self._backends(queue, CUT)
                self.report.cut = {"at_s": round(now - self.began, 2), "finished": finished,
                                   "seconds": c.cut_for, "lease_time": c.lease_time,
                                   "held": sorted(held), "held_after": len(after),
                                   "server_backends": backends}  # fmt: skip
                self.event(f"{CUT}'s link cut at {finished:,} finished; it held {len(held)} job(s) just "
                           f"before or after, {len(after)} 0.2 s after; its "
                           f"connections on the server not idle: {backends}")  # fmt: skip
                continue
            if cut_until is not None and restored_at is None and now >= cut_until:
                self.report.cut["waiting_on_locks"] = waiting = self._lock_waits(queue)
                self.report.cut["server_backends_at_end"] = open_ = self._backends(queue, CUT)
                self.event(f"at the end of the cut, {CUT}'s connections on the server not idle: {open_}; "
                           f"backends waiting for a lock: {waiting}")  # fmt: skip
                self.net.restore(CUT)
                restored_at = time.monotonic()
                self.report.cut["done_meanwhile"] = finished - self.report.cut["finished"]
                self.report.cut["restored_s"] = round(restored_at - self.began, 2)
                self.event(f"{CUT}'s link restored at {finished:,} finished")
            if (
                not self.report.kill
                and restored_at is not None
                and now >= restored_at + c.lease_time
                and finished >= c.kill_at * c.jobs
            ):
                held = self._held(queue, KILLED)
                pids = self.net.kill(KILLED)
                time.sleep(0.2)
                held |= self._held(queue, KILLED)
                self.report.kill = {"at_s": round(now - self.began, 2), "finished": finished,
                                    "pids": pids, "held": sorted(held)}  # fmt: skip
                self.event(f"{KILLED} killed at {finished:,} finished ({len(pids)} processes); it held "
                           f"{len(held)} job(s)")  # fmt: skip
                continue
            producing = any(self.procs[f"p{i}"].poll() is None for i in range(c.producers))
            busy = stats["pending"] + stats["scheduled"] + stats["running"]
            if not producing and busy == 0:
                if not self.report.kill:
                    self.report.errors.append("every job finished before both faults: use more --jobs")
                return
            time.sleep(POLL)

    def _wait_for_workers(self, queue: Any) -> None:
        """Until every worker process of both hosts has reported to the store (the jobs then flow at once,
        however long Django took to start on a loaded machine)."""
        wanted = {f"{host}/{i}" for host in (CUT, KILLED) for i in range(self.config.processes)}
        while not wanted <= {w.worker_id for w in queue.workers()}:
            if time.monotonic() - self.began > self.config.time_limit:
                raise RuntimeError(f"the workers did not start in time: {self.log(CUT)} {self.log(KILLED)}")
            for host in (CUT, KILLED):
                if self.procs[host].poll() is not None:
                    raise RuntimeError(f"{host}'s worker exited at start: {self.log(host)[-3000:]}")
            time.sleep(POLL)

    def _backends(self, queue: Any, host: str) -> list[str]:
        """The server's connections from ``host`` that are not idle (``pg_stat_activity``): what a cut
        leaves open on the server (an open transaction keeps its row locks until the link is back)."""
        from tests.pgserver import connect

        with contextlib.closing(connect(queue.path)) as conn:
            rows = conn.execute(
                "SELECT state, coalesce(wait_event_type || '/' || wait_event, '-'), "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_activity "
                "WHERE client_addr = %s AND state <> 'idle' ORDER BY state",
                (self.net.address(host),),
            ).fetchall()
        return [f"{state} ({wait}) [{query}]" for state, wait, query in rows]

    def _lock_waits(self, queue: Any) -> list[str]:
        """The server's backends waiting for a lock: who (client address), for how long, on what."""
        from tests.pgserver import connect

        with contextlib.closing(connect(queue.path)) as conn:
            rows = conn.execute(
                "SELECT coalesce(host(client_addr), 'local'), "
                "round(extract(epoch FROM now() - query_start)::numeric, 1), "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 90), "
                "(SELECT string_agg(coalesce(host(b.client_addr), 'local') || ' ' || b.state || ': ' "
                "|| left(regexp_replace(b.query, '\\s+', ' ', 'g'), 60), '; ') "
                "FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(a.pid))) "
                "FROM pg_stat_activity a WHERE wait_event_type = 'Lock' ORDER BY query_start"
            ).fetchall()
        return [
            f"{addr} waiting {secs} s on [{query}] blocked by [{blockers}]"
            for addr, secs, query, blockers in rows
        ]

    def _held(self, queue: Any, host: str) -> set[int]:
        """The jobs running, claimed last by a process of ``host``."""
        from queue_max_django.engine import State

        running = every_job(queue, State.RUNNING)
        return {job.job_id for job in running if job.worker_ids and job.worker_ids[-1].startswith(f"{host}/")}

    def _stop_cut_host(self) -> None:
        popen = self.procs[CUT]
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
        try:
            self.report.cut_host_exit = popen.wait(60)
        except subprocess.TimeoutExpired:
            self.report.errors.append(f"{CUT}'s worker did not stop within 60 s of SIGTERM")

    def _check(self) -> None:
        """``manage.py queue_check`` on the producers' host, over its link."""
        done = subprocess.run(
            self.net.argv(PRODUCERS, [sys.executable, "-m", "django", "queue_check", "--json"]),
            cwd=ROOT, env=self.env(PRODUCERS), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        try:
            self.report.check_problems += json.loads(done.stdout)["problems"]
        except (ValueError, KeyError):
            self.report.check_problems.append(f"queue_check exited {done.returncode}: {done.stderr[-2000:]}")

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
        hosts: defaultdict[str, set[str]] = defaultdict(set)
        by_host: Counter[str] = Counter()
        for path in (self.folder / "exec").iterdir():
            for line in complete_lines(path):
                token, host, _pid = line.split()
                runs[token] += 1
                hosts[token].add(host)
                by_host[host] += 1
        report.acknowledged = len(puts)
        report.executions = sum(runs.values())
        report.runs_by_host = dict(by_host)
        if report.acknowledged != report.jobs:
            report.errors.append(f"{report.acknowledged} puts acknowledged of {report.jobs}")
        cut_held, killed_held = set(report.cut.get("held", ())), set(report.kill.get("held", ()))

        log = self.log(CUT)
        refused_ids = {int(found) for found in REFUSED.findall(log)}
        report.refused_not_held_at_cut = len(refused_ids - cut_held)
        report.refused_logged = len(REFUSED.findall(log))
        report.refused = sum(int(found[3]) for found in EXITING.findall(log))
        report.abandoned_acks = sum(int(found) for found in ABANDONED.findall(log))
        report.cut_host_replaced = [line for line in log.splitlines() if "starting a new one" in line]
        exited = {found[0] for found in EXITING.findall(log)}
        if len(exited) != self.config.processes:
            report.errors.append(f"{CUT}'s processes that logged their last line: {sorted(exited)}")

        stored = {job.job_id: job for state in State for job in every_job(queue, state)}
        for token, job_id in puts.items():
            job = stored.get(job_id)
            if job is None or job.state not in (State.DONE, State.FAILED):
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
                if job_id in cut_held or job_id in refused_ids:
                    report.duplicated_held_by_cut_host += 1
                elif job_id in killed_held:
                    report.duplicated_held_by_killed_host += 1
                else:
                    report.duplicated_elsewhere.append(job_id)
            last = job.worker_ids[-1] if job.worker_ids else ""
            if CUT in hosts[token] and not last.startswith(f"{CUT}/"):
                report.late_runs += 1
                if job_id not in refused_ids:
                    report.late_runs_not_refused.append(job_id)


def every_job(queue: Any, state: Any) -> Any:
    """Every job in ``state``, a page of 1,000 at a time."""
    after = None
    while page := queue.jobs(state, after=after, limit=1000):
        yield from page
        after = page[-1].job_id


def machine() -> str:
    cpus = os.cpu_count()
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpus} CPUs ({model}), load average at the end {load}"


def run_multihost(config: Config) -> Report:
    """The whole run (see the module); everything it made is removed whatever happens."""
    run = MultiHost(config)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        raise SystemExit(1)  # the finally below cleans up

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return run.run()
    finally:
        run.cleanup()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="worker processes per worker host")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lease-time", type=float, default=2.0)
    parser.add_argument(
        "--cut-seconds", type=float, help="how long the link is down (default: 3 lease times)"
    )
    parser.add_argument("--cut-at", type=float, default=0.2, help="fraction of the jobs finished at the cut")
    parser.add_argument(
        "--kill-at", type=float, default=0.5, help="fraction of the jobs finished at the kill"
    )
    parser.add_argument("--produce-rate", type=float, default=0.0, help="jobs/s per producer (0: unlimited)")
    parser.add_argument("--put-batch", type=int, default=50, help="jobs per put_many (1: one put each)")
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--dir", type=Path, help="where the logs go (default: a new temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--quiet", action="store_true", help="print the report only, not the timeline")
    parser.add_argument("--produce", type=Path, help=argparse.SUPPRESS)  # the producer child's mode
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--producer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quota", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs < 1 or args.put_batch < 1 or args.producers < 1 or args.processes < 1:
        parser.error("--jobs, --put-batch, --producers and --processes must be at least 1")
    if not 0 <= args.cut_at < args.kill_at < 1:
        parser.error("0 <= --cut-at < --kill-at < 1")
    if args.produce is not None:
        produce(
            args.produce, args.url, args.producer, args.quota, args.produce_rate, args.put_batch, args.backlog
        )
        return 0
    reason = netns.unavailable(PREFIX)
    if reason is not None:
        print(f"multihost: cannot run here: {reason}", file=sys.stderr)
        return 2
    folder = args.dir or Path(tempfile.mkdtemp(prefix="queue-max-multihost-"))
    config = Config(folder=folder, jobs=args.jobs, producers=args.producers, processes=args.processes,
                    threads=args.threads, lease_time=args.lease_time, cut_seconds=args.cut_seconds,
                    cut_at=args.cut_at, kill_at=args.kill_at, produce_rate=args.produce_rate,
                    put_batch=args.put_batch, backlog=args.backlog,
                    time_limit=args.time_limit, verbose=not args.quiet)  # fmt: skip
    print(f"multihost: {args.jobs:,} jobs, lease {args.lease_time:g} s, cut {config.cut_for:g} s, "
          f"in {folder}", flush=True)  # fmt: skip
    report = run_multihost(config)
    print("\n".join(report.lines()))
    if args.json:
        args.json.write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=1), encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
