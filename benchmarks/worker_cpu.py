"""CPU per job of `queue_worker --burst --processes 2`, this checkout against another, alternating.

    uv run --group bench python benchmarks/worker_cpu.py --base /path/to/worktree --rounds 6

The base is another checkout of this repository with its own environment (``uv sync --locked --group bench``
in it: its ``.venv/bin/python`` runs its side). Each round, for each side: prefill a fresh store with N
no-op jobs (``--n``, 100,000) and with ``--small`` (10,000), drain each with the worker command of that side,
and take the user + system CPU of the command and every process under it (``os.wait4``: a process's own
and its reaped children's). (CPU at N - CPU at small) / (N - small) is the CPU per job with start-up
cancelled out. CPU per job is steadier than a rate on a shared machine: other load changes how long a job
waits for a core, much less how many cycles it takes. The medians and ranges are printed per side, and the
ratio of the medians (this checkout / base). ``--compete N``: N CPU-bound processes (benchmarks/competitor.py)
run while each worker command runs (started after the prefill, stopped once the command ended).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competitor import Competitors

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = "benchmarks.bench_project.settings"
TASK = "benchmarks.bench_project.bench_app.tasks.noop"
PREFILL = """
import sys
from queue_max_django.engine import Queue
n = int(sys.argv[2])
with Queue(sys.argv[1]) as q:
    for start in range(0, n, 10_000):
        count = min(10_000, n - start)
        shard = (start // 10_000) % q.shard_count
        q.put_many_to_shard(shard, [{"args": [], "kwargs": {}}] * count, name=sys.argv[3])
"""


def cpu_seconds(side: Path, python: str, n: int, compete: int = 0) -> float:
    """Prefill a fresh store on ``side`` with ``n`` jobs, drain it with that side's worker: -> CPU seconds."""
    with tempfile.TemporaryDirectory(prefix="qm-cpu-") as folder:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_DIR": folder, "PYTHONPATH": str(side)}
        subprocess.run([python, "-c", PREFILL, str(Path(folder) / "store"), str(n), TASK], cwd=side, env=env,
                       check=True)  # fmt: skip
        with Competitors(compete):
            return _drain(side, python, env)


def _drain(side: Path, python: str, env: dict[str, str]) -> float:
    """Run ``side``'s worker command on the store of ``env``: -> its CPU seconds (and its children's)."""
    worker = ["queue_worker", "--burst", "--processes", "2", "--no-scheduler", "-v", "0"]
    command = [python, "-m", "django", *worker]
    proc = subprocess.Popen(command, cwd=side, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"queue_worker on {side} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="another checkout, with its own .venv")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--compete", type=int, default=0, metavar="N", help="N CPU-bound processes compete")
    options = parser.parse_args()
    base_python = options.base / ".venv" / "bin" / "python"
    if not base_python.exists():
        parser.error(f"{base_python} does not exist: run `uv sync --locked --group bench` in {options.base}")
    sides = {"new": (ROOT, sys.executable), "base": (options.base.resolve(), str(base_python))}
    per_job: dict[str, list[float]] = {name: [] for name in sides}
    for round_no in range(1, options.rounds + 1):
        for name, (side, python) in sides.items():
            big = cpu_seconds(side, python, options.n, options.compete)
            small = cpu_seconds(side, python, options.small, options.compete)
            micros = (big - small) / (options.n - options.small) * 1e6
            per_job[name].append(micros)
            load = os.getloadavg()[0]
            print(f"round {round_no} {name}: {micros:.1f} us of CPU per job (load {load:.1f})", flush=True)
    medians = {name: statistics.median(values) for name, values in per_job.items()}
    for name, values in per_job.items():
        print(f"{name}: median {medians[name]:.1f} us ({min(values):.1f}-{max(values):.1f})")
    print(f"new / base: {medians['new'] / medians['base']:.2f}x")


if __name__ == "__main__":
    main()
