"""The worker's options: what ``queue_worker`` parsed, over ``QUEUE_MAX["WORKER"]``, checked once."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from typing import Any

from ..conf import WorkerConfig

# Exit codes of a worker process; the supervisor replaces a process unless it exited with DONE.
DONE = 0  # stopped on request, or --burst found nothing more to do
RECYCLE = 75  # --max-jobs or --max-memory reached: replace me
TIMED_OUT = 76  # a job overran its timeout; its thread cannot be stopped: replace me


class WorkerOptionError(ValueError):
    """A bad worker option (the command turns it into a CommandError)."""


@dataclass(frozen=True)
class WorkerOptions:
    processes: int = 1
    threads: int = 1
    queues: tuple[str, ...] | None = None  # None: every queue
    burst: bool = False
    burst_wait: float = 0.0
    max_jobs: int | None = None
    max_memory_mb: int | None = None
    shutdown_timeout: float = 30.0
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    scheduler: bool = True
    autoscale: tuple[int, int] | None = None  # (min, max) threads per process, following waiting jobs
    verbosity: int = 1
    heartbeat: float | None = None  # seconds between heartbeats; None: a third of the lease time, max 5 s
    stats_interval: float = 60.0  # seconds between throughput lines in the log

    def __post_init__(self) -> None:
        _positive_int("processes", self.processes)
        _positive_int("threads", self.threads)
        if self.max_jobs is not None:
            _positive_int("max-jobs", self.max_jobs)
        if self.max_memory_mb is not None:
            _positive_int("max-memory", self.max_memory_mb)
        for name in ("burst_wait", "shutdown_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise WorkerOptionError(f"--{name.replace('_', '-')} must be a number >= 0, not {value!r}")
        if self.heartbeat is not None and not self.heartbeat > 0:
            raise WorkerOptionError(
                f"the heartbeat must be a positive number of seconds, not {self.heartbeat!r}"
            )
        if not isinstance(self.worker_id, str) or not 0 < len(self.worker_id) <= 150 or "/" in self.worker_id:
            raise WorkerOptionError(
                f"--worker-id must be 1 to 150 characters without '/', not {self.worker_id!r}"
            )
        if self.autoscale is not None:
            low, high = self.autoscale
            if not 1 <= low <= high:
                raise WorkerOptionError(f"--autoscale needs 1 <= MIN <= MAX, not {low},{high}")
        if self.queues is not None and not self.queues:
            raise WorkerOptionError("--queue needs at least one name")

    @property
    def max_threads(self) -> int:
        return self.autoscale[1] if self.autoscale is not None else self.threads

    def heartbeat_every(self, lease_time: float) -> float:
        if self.heartbeat is not None:
            return self.heartbeat
        return max(0.05, min(lease_time / 3, 5.0))

    def process_id(self, index: int) -> str:
        """The id a worker process registers under (and records in the jobs it claims)."""
        return f"{self.worker_id}/{index}"

    def with_changes(self, **changes: Any) -> WorkerOptions:
        return replace(self, **changes)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkerOptionError(f"--{name} must be a whole number >= 1, not {value!r}")


def parse_autoscale(text: str) -> tuple[int, int]:
    """``"2,8"`` -> (2, 8)."""
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        raise WorkerOptionError(f"--autoscale takes MIN,MAX (two whole numbers), not {text!r}") from None
    return low, high


def from_config(config: WorkerConfig, **given: Any) -> WorkerOptions:
    """Options given on the command line (None = not given) over ``QUEUE_MAX["WORKER"]``."""
    values: dict[str, Any] = {
        "processes": config.processes or os.cpu_count() or 1,
        "threads": config.threads,
        "queues": config.queues,
        "shutdown_timeout": config.shutdown_timeout,
        "max_jobs": config.max_jobs,
        "max_memory_mb": config.max_memory_mb,
        "burst_wait": config.burst_wait,
    }
    values.update({key: value for key, value in given.items() if value is not None})
    return WorkerOptions(**values)
