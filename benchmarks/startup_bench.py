"""Start-up benchmark: ``manage.py queue_worker --processes 2`` of the example project, from the launch of
the command to the start of its first job, on the LMDB store and on the PostgreSQL store.

    uv run python benchmarks/startup_bench.py                       # both stores, 7 runs each
    uv run python benchmarks/startup_bench.py --store lmdb --runs 15
    uv run python benchmarks/startup_bench.py --checkout /tmp/before --checkout .   # alternating runs

Method (docs/benchmarks.md, "Start-up"): each run gets a fresh store (an LMDB folder, or a new PostgreSQL
database with the queue's schema on a throwaway cluster the script starts, or on the server of ``--url``)
holding one waiting job of ``example_app.tasks.count_primes``. The clock starts just before the command is
launched (``time.time()``) and stops at the job's ``started_at`` as the store recorded it when a worker
process claimed it: the command started Python and Django, opened the store, started its processes, and one
of them claimed the job. Then the command gets SIGTERM and must exit 0. Prints each run and the median.
With several ``--checkout`` (another checkout's code, run with this one's virtualenv) their runs alternate,
so that a machine whose load wanders treats them alike.

Python's bytecode cache: a deployed project has its ``.pyc`` files (pip writes them; so do most images),
while a checkout run with ``PYTHONDONTWRITEBYTECODE`` compiles every module on every start. By default the
runs use a cache of their own (``PYTHONPYCACHEPREFIX`` in a temporary folder, filled by one untimed run
first); ``--no-pyc-cache`` runs with the environment as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
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


def command_env(checkout: Path, state: Path, store: RunStore, pyc: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
        "PYTHONPATH": f"{checkout}{os.pathsep}{checkout / 'example_project'}",
        "EXAMPLE_STATE_DIR": str(state),
    }
    env.pop("EXAMPLE_POSTGRES_URL", None)
    if store.kind == "postgresql":
        env["EXAMPLE_POSTGRES_URL"] = str(store.target)
    if pyc is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pyc)
    return env


def one_run(checkout: Path, folder: Path, store: RunStore, pyc: Path | None) -> float:
    """Launch -> first job started, in seconds, for one fresh store."""
    from queue_max_django.engine import Queue

    state = Path(tempfile.mkdtemp(dir=folder))
    target = state / "queue_max_data" if store.kind == "lmdb" else store.target
    with Queue(target, do_recover=False, do_vacuum=False) as queue:
        job_id = queue.put({"args": [10], "kwargs": {}}, name=TASK, queue="cpu")
    log = state / "worker.log"
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
                    started = job.started_at
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
    return started - launched


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


def bench(kind: str, args: argparse.Namespace, folder: Path, pyc: Path | None) -> dict[Path, list[float]]:
    checkouts = [Path(checkout).resolve() for checkout in args.checkout or [ROOT]]
    with contextlib.ExitStack() as stack:
        base = None
        if kind == "postgresql":
            base = stack.enter_context(open_store(kind, folder, args.url, fsync=False))
            base.admin_url = base.admin_url or admin_url(base)
        seconds: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
        for number in range(0 if pyc is not None else 1, args.runs + 1):  # run 0 fills the bytecode cache
            for checkout in checkouts:
                with fresh_store(kind, folder, base, number) as store:
                    took = one_run(checkout, folder, store, pyc)
                if number:
                    seconds[checkout].append(took)
                    print(f"  {kind} run {number} {checkout}: {took:.3f} s", flush=True)
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
    parser.add_argument("--no-pyc-cache", action="store_true", help="no bytecode cache of the runs' own")
    args = parser.parse_args()
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"{machine}; load {os.getloadavg()[0]:.2f}", flush=True)
    kinds = KINDS if args.store == "both" else (args.store,)
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as name:
        folder = Path(name)
        pyc = None if args.no_pyc_cache else folder / "pycache"
        for kind in kinds:
            for checkout, seconds in bench(kind, args, folder, pyc).items():
                median = statistics.median(seconds)
                print(f"{kind} {checkout}: launch -> first job started, median {median:.3f} s "
                      f"(min {min(seconds):.3f}, max {max(seconds):.3f}, {len(seconds)} runs)",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
