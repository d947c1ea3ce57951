"""A CPU-bound process that competes with a benchmark for the machine's cores: a pure-Python busy loop, as a
web server's request handling or another service on a shared node would be. ``Competitors(n)`` starts ``n``
of them (each its own process) and stops them, by their PIDs, when its ``with`` block ends.

    python benchmarks/competitor.py            # one busy loop, until interrupted or terminated

worker_bench.py and worker_cpu.py start them with ``--compete N``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import TracebackType


def spin() -> None:
    """Burn CPU until terminated."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    total = 0
    while True:
        for i in range(100_000):
            total = (total + i * i) % 1_000_003


class Competitors:
    """``n`` busy-loop processes while inside the ``with`` block (none when ``n`` is 0)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Competitors:
        self.procs = [subprocess.Popen([sys.executable, __file__]) for _ in range(self.n)]
        if self.procs:
            time.sleep(0.2)  # running, past the interpreter's start-up
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for proc in self.procs:  # only the processes started here, by PID
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


if __name__ == "__main__":
    spin()
