"""Start-up benchmark: ``manage.py queue_worker --processes 2`` of the example project, from the launch of
the command to the start of its first job, on the LMDB store and on the PostgreSQL store.

    uv run python benchmarks/startup_bench.py                       # both stores, 7 runs each
    uv run python benchmarks/startup_bench.py --store lmdb --runs 15
    uv run python benchmarks/startup_bench.py --checkout /tmp/before --checkout .   # alternating runs
    uv run python benchmarks/startup_bench.py --store lmdb --bytecode package --bytecode none   # issue 35

Method (docs/benchmarks.md, "Start-up"): each run gets a fresh store (an LMDB folder, or a new PostgreSQL
database with the queue's schema on a throwaway cluster the script starts, or on the server of ``--url``)
holding one waiting job of ``example_app.tasks.count_primes``. The clock starts just before the command is
launched (``time.time()``) and stops at the job's ``started_at`` as the store recorded it when a worker
process claimed it: the command started Python and Django, opened the store, started its processes, and one
of them claimed the job. Then the command gets SIGTERM and must exit 0. Prints each run and the median.
With several ``--checkout`` (another checkout's code, run with this one's virtualenv) their runs alternate,
so that a machine whose load wanders treats them alike.

Python's bytecode cache (``--bytecode``, repeatable: each kind its own rows, alternating with the rest): a
deployed project has its ``.pyc`` files (pip writes them; so do most images), while a checkout run with
``PYTHONDONTWRITEBYTECODE`` compiles every module on every start.

- ``cached`` (the default): a cache of the runs' own (``PYTHONPYCACHEPREFIX`` in a temporary folder,
  filled by one untimed run first).
- ``package``: that cache, but without the ``.pyc`` of the checkout's own modules (this package and the
  example project), taken out before each run: the first start after an upgrade of the package alone.
- ``none``: ``PYTHONDONTWRITEBYTECODE=1`` and no cache: every module that has no ``.pyc`` beside it is
  compiled on every start (the interpreter's standard library usually has them: its installer wrote them;
  a virtualenv that ``uv sync`` made without ``--compile-bytecode`` has none). ``--no-pyc-cache`` is the
  same as ``--bytecode none``.

The command's own CPU time (user + system, from /proc, 10 ms ticks) when the job is seen started is
printed too: on a machine that other work keeps busy it moves less than the wall clock.

Where the time goes: each run's command traces its start-up phases (``QUEUE_MAX_STARTUP_TRACE``,
worker/earlystop.py, on checkouts that have it): the median of launch -> each phase is printed too ("app":
Django imported this app, "ready": the apps are set up, "command": the command's module is loaded,
"checks": its system checks passed, "launcher": the fork server runs, "store": the store is open,
"supervisor": the supervisor starts), and "job", the first job's start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runstore import KINDS, RunStore, open_store, scratch_database  # noqa: E402

TASK = "example_app.tasks.count_primes"
LIMIT = 60.0  # seconds a run may take before it is called a failure


BYTECODE = ("cached", "package", "none")
TRACE_ENV = "QUEUE_MAX_STARTUP_TRACE"  # worker/earlystop.py (not imported: a checkout may lack it)


def command_env(checkout: Path, state: Path, store: RunStore, pyc: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
        "PYTHONPATH": f"{checkout}{os.pathsep}{checkout / 'example_project'}",
        "EXAMPLE_STATE_DIR": str(state),
        TRACE_ENV: str(state / "trace"),
    }
    env.pop("EXAMPLE_POSTGRES_URL", None)
    if store.kind == "postgresql":
        env["EXAMPLE_POSTGRES_URL"] = str(store.target)
    if pyc is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pyc)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def cpu_seconds(pid: int) -> float:
    """The user + system CPU seconds process ``pid`` (the command's, not its children's) has used so far
    (Linux: /proc; NaN elsewhere). Steadier than the wall clock on a machine that other work keeps busy."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drop_own_bytecode(pyc: Path, checkout: Path) -> None:
    """Take the cached ``.pyc`` of the checkout's own modules (the package, the example project) out of
    the cache ``pyc`` (``PYTHONPYCACHEPREFIX`` mirrors the source folders' absolute paths)."""
    for own in ("queue_max_django", "example_project"):
        shutil.rmtree(pyc / checkout.relative_to(checkout.anchor) / own, ignore_errors=True)


def one_run(checkout: Path, folder: Path, store: RunStore, pyc: Path | None) -> dict[str, float]:
    """One fresh store's run. -> seconds from launch to each start-up phase the command traced, and to the
    first job's start (``"job"``)."""
    from queue_max_django.engine import Queue

    state = Path(tempfile.mkdtemp(dir=folder))
    target = state / "queue_max_data" if store.kind == "lmdb" else store.target
    with Queue(target, do_recover=False, do_vacuum=False) as queue:
        job_id = queue.put({"args": [10], "kwargs": {}}, name=TASK, queue="cpu")
    log, trace = state / "worker.log", state / "trace"
    with open(log, "wb") as out:
        launched = time.time()
        proc = subprocess.Popen(
            [sys.executable, str(checkout / "example_project" / "manage.py"), "queue_worker",
             "--processes", "2", "--no-scheduler"],
            cwd=checkout, env=command_env(checkout, state, store, pyc), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with Queue(target, do_recover=False, do_vacuum=False) as queue:
            deadline = time.monotonic() + LIMIT
            while True:
                job = queue.job(job_id)
                if job is not None and job.started_at is not None:
                    started, cpu = job.started_at, cpu_seconds(proc.pid)
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"no job started (exit {proc.returncode}):\n{log.read_text()}")
                time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(LIMIT)
        if code != 0:
            raise RuntimeError(f"queue_worker exited with {code}:\n{log.read_text()}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = {"job": started - launched, "cpu": cpu}
    if trace.exists():
        for line in trace.read_text(encoding="utf-8").splitlines():
            phase, when = line.split()
            seconds.setdefault(phase, float(when) - launched)
    return seconds


@contextlib.contextmanager
def fresh_store(kind: str, folder: Path, base: RunStore | None, number: int) -> Any:
    """A new, empty store for one run: LMDB's lives in the run's state folder; a PostgreSQL run gets a new
    database on the cluster of ``base``."""
    if kind == "lmdb":
        yield RunStore("lmdb", "")
        return
    assert base is not None and base.admin_url is not None
    url = scratch_database(base.admin_url, f"qm_startup_{os.getpid()}_{number}")
    run = RunStore("postgresql", url, admin_url=base.admin_url)
    try:
        yield run
    finally:
        run.close()


Row = tuple[str, Path]  # (bytecode, checkout)


def bench(kind: str, args: argparse.Namespace, folder: Path) -> dict[Row, list[dict[str, float]]]:
    """Every (bytecode, checkout) row's runs on ``kind``, alternating between the rows."""
    checkouts = [Path(checkout).resolve() for checkout in args.checkout or [ROOT]]
    rows = [(bytecode, checkout) for bytecode in args.bytecode for checkout in checkouts]
    pyc = folder / "pycache"
    with contextlib.ExitStack() as stack:
        base = None
        if kind == "postgresql":
            base = stack.enter_context(open_store(kind, folder, args.url, fsync=False))
            base.admin_url = base.admin_url or admin_url(base)
        seconds: dict[Row, list[dict[str, float]]] = {row: [] for row in rows}
        cached = any(bytecode != "none" for bytecode in args.bytecode)
        for number in range(0 if cached else 1, args.runs + 1):  # run 0 fills the bytecode cache
            for bytecode, checkout in rows:
                if number == 0 and bytecode == "none":
                    continue
                if bytecode == "package":
                    drop_own_bytecode(pyc, checkout)
                with fresh_store(kind, folder, base, number) as store:
                    took = one_run(checkout, folder, store, None if bytecode == "none" else pyc)
                if number:
                    seconds[bytecode, checkout].append(took)
                    print(f"  {kind} run {number} {bytecode} {checkout}: {took['job']:.3f} s", flush=True)
        return seconds


def admin_url(store: RunStore) -> str:
    """The URL of the cluster's ``postgres`` database, from which a run's scratch databases are made."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(str(store.target))._replace(path="/postgres"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=(*KINDS, "both"), default="both")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--url", help="a PostgreSQL server URL whose user may create databases (default: a "
                        "throwaway cluster)")  # fmt: skip
    parser.add_argument("--checkout", action="append", help="the checkout whose code runs (default: this "
                        "one; repeat to alternate between several)")  # fmt: skip
    parser.add_argument("--bytecode", action="append", choices=BYTECODE, help="cached (default), package "
                        "or none: see above (repeat to alternate between several)")  # fmt: skip
    parser.add_argument("--no-pyc-cache", action="store_true", help="the same as --bytecode none")
    args = parser.parse_args()
    args.bytecode = args.bytecode or (["none"] if args.no_pyc_cache else ["cached"])
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"{machine}; load {os.getloadavg()[0]:.2f}", flush=True)
    kinds = KINDS if args.store == "both" else (args.store,)
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as name:
        folder = Path(name)
        for kind in kinds:
            for (bytecode, checkout), runs in bench(kind, args, folder).items():
                seconds = [run["job"] for run in runs]
                median = statistics.median(seconds)
                print(f"{kind} {bytecode} {checkout}: launch -> first job started, median {median:.3f} s "
                      f"(min {min(seconds):.3f}, max {max(seconds):.3f}, {len(seconds)} runs)",
                      flush=True)  # fmt: skip
                cpu = statistics.median(run["cpu"] for run in runs)
                print(f"    the command's own CPU until then: median {cpu:.3f} s", flush=True)
                phases = [p for p in runs[0] if p not in ("job", "cpu") and all(p in run for run in runs)]
                if phases:
                    print("    launch -> " + ", ".join(
                        f"{phase} {statistics.median(run[phase] for run in runs):.3f}"
                        for phase in [*phases, "job"]
                    ) + " s (medians)", flush=True)  # fmt: skip
    print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
