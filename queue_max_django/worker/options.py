"""The worker's options: what ``queue_worker`` parsed, over ``QUEUE_MAX["WORKER"]``, checked once."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..conf import WorkerConfig
from ..conf.defaults import MIN_LEASE_TIME
from ..engine.errors import InvalidJob
from ..engine.validate import MAX_SECONDS, bad_character, validate_queue_name

# Exit codes of a worker process; the supervisor replaces a process unless it exited with DONE.
DONE = 0  # stopped on request, or --burst found nothing more to do
RECYCLE = 75  # --max-jobs or --max-memory reached: replace me
TIMED_OUT = 76  # a job overran its timeout (or its cancel grace); its thread cannot be stopped: replace me

# Leases. The main loop of a worker process ticks every WATCH_EVERY seconds (process.WATCH_EVERY; a test
# keeps the two equal) and renews the leases of its jobs on a tick, every ``heartbeat_every()`` seconds: at
# least RENEWALS times per lease time, so that a late heartbeat never costs a running job its lease; a lease
# shorter than MIN_LEASE_TIME is refused (the system checks refuse it as LEASE_TIME too).
WATCH_EVERY = 0.1
RENEWALS = 3
HEARTBEAT_MAX = 5.0  # seconds between heartbeats at most, however long the lease


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
    heartbeat: float | None = None  # seconds between heartbeats; None: see heartbeat_every()
    stats_interval: float = 60.0  # seconds between throughput lines in the log
    cancel_grace: float = 10.0  # seconds a cancelled running job has to stop before its process is ended

    def __post_init__(self) -> None:
        _positive_int("processes", self.processes)
        _positive_int("threads", self.threads)
        if self.max_jobs is not None:
            _positive_int("max-jobs", self.max_jobs)
        if self.max_memory_mb is not None:
            _positive_int("max-memory", self.max_memory_mb)
        for name in ("burst_wait", "shutdown_timeout", "cancel_grace"):
            value = getattr(self, name)
            if not _seconds(value, minimum=0):
                raise WorkerOptionError(
                    f"--{name.replace('_', '-')} must be a number of seconds from 0 to {MAX_SECONDS:.0f}, "
                    f"not {value!r}"
                )
        if self.heartbeat is not None and not _seconds(self.heartbeat, minimum=WATCH_EVERY):
            raise WorkerOptionError(
                f"the heartbeat must be a number of seconds of at least {WATCH_EVERY}, not {self.heartbeat!r}"
            )
        if (
            not isinstance(self.worker_id, str)
            or not 0 < len(self.worker_id) <= 150
            or "/" in self.worker_id
            or bad_character(self.worker_id) is not None
        ):
            raise WorkerOptionError(
                f"--worker-id must be 1 to 150 characters without '/', control characters or lone "
                f"surrogates, not {self.worker_id!r}"
            )
        if self.autoscale is not None:
            low, high = self.autoscale
            if not 1 <= low <= high:
                raise WorkerOptionError(f"--autoscale needs 1 <= MIN <= MAX, not {low},{high}")
        if self.queues is not None and not self.queues:
            raise WorkerOptionError("--queue needs at least one name")
        for name in self.queues or ():
            try:
                validate_queue_name(name)
            except InvalidJob as exc:
                raise WorkerOptionError(f"--queue {name!r}: {exc}") from None

    @property
    def max_threads(self) -> int:
        return self.autoscale[1] if self.autoscale is not None else self.threads

    def heartbeat_every(self, lease_time: float) -> float:
        """Seconds between the heartbeats that renew the leases of running jobs, for a store whose lease
        is ``lease_time``: a third of it (at most HEARTBEAT_MAX), rounded down to whole ticks of the main
        loop (which beats on a tick), one tick at least. ``WorkerOptionError`` for a lease shorter than
        MIN_LEASE_TIME, or a ``heartbeat`` that would renew it fewer than RENEWALS times."""
        check_lease_time(lease_time)
        if self.heartbeat is not None:
            if self.heartbeat > lease_time / RENEWALS + 1e-9:
                raise WorkerOptionError(
                    f"a heartbeat every {self.heartbeat} s renews a lease of {lease_time} s fewer than "
                    f"{RENEWALS} times: beat every {lease_time / RENEWALS:g} s at most"
                )
            return self.heartbeat
        ticks = math.floor(min(lease_time / RENEWALS, HEARTBEAT_MAX) / WATCH_EVERY + 1e-9)
        return round(max(1, ticks) * WATCH_EVERY, 6)

    def process_id(self, index: int) -> str:
        """The id a worker process registers under (and records in the jobs it claims)."""
        return f"{self.worker_id}/{index}"

    def with_changes(self, **changes: Any) -> WorkerOptions:
        return replace(self, **changes)


def check_lease_time(lease_time: float) -> None:
    """``WorkerOptionError`` unless a worker can renew leases of ``lease_time`` seconds in time."""
    if not _seconds(lease_time, minimum=MIN_LEASE_TIME):
        raise WorkerOptionError(
            f"a worker cannot serve a store whose lease time is {lease_time!r} s: it renews the leases of "
            f"running jobs on its {WATCH_EVERY} s tick, at least {RENEWALS} times per lease, so it needs "
            f"a lease time of at least {MIN_LEASE_TIME} s (QUEUE_MAX['LEASE_TIME'], Queue(lease_time=...))"
        )


def _seconds(value: Any, *, minimum: float) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and minimum <= value <= MAX_SECONDS
    )


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


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""The cgroup v2 CPU limit of this process's group (a container's ``--cpus``, a pod's CPU limit):
``"QUOTA PERIOD"`` in microseconds, or ``"max PERIOD"`` for none."""


def usable_cpus(cpu_max: Path | None = None) -> int:
    """How many CPUs this process can keep busy, the number of worker processes ``PROCESSES = None``
    starts: the CPUs it may run on (``os.process_cpu_count()`` on Python 3.13+, the scheduler affinity
    elsewhere on Linux, ``os.cpu_count()`` last), bounded by the cgroup v2 CPU quota of ``cpu_max``
    (``CGROUP_CPU_MAX`` when None) rounded up: ``"150000 100000"`` is 2. A container limited to 1 CPU on a
    64-core node gets 1, not 64. A ``cpu_max`` that is missing (no cgroup v2, macOS) or unreadable bounds
    nothing. At least 1."""
    counted: int | None = getattr(os, "process_cpu_count", lambda: None)()
    if counted is None and hasattr(os, "sched_getaffinity"):
        counted = len(os.sched_getaffinity(0))
    cpus = counted or os.cpu_count() or 1
    quota = _cgroup_quota(CGROUP_CPU_MAX if cpu_max is None else cpu_max)
    return max(1, cpus if quota is None else min(cpus, quota))


def _cgroup_quota(cpu_max: Path) -> int | None:
    """The CPUs the quota in ``cpu_max`` allows, rounded up; None for no quota or nothing readable."""
    try:
        quota, period = cpu_max.read_text(encoding="ascii").split()
        quota_us, period_us = (None if quota == "max" else int(quota)), int(period)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if quota_us is None or quota_us <= 0 or period_us <= 0:
        return None
    return math.ceil(quota_us / period_us)


def from_config(config: WorkerConfig, **given: Any) -> WorkerOptions:
    """Options given on the command line (None = not given) over ``QUEUE_MAX["WORKER"]``."""
    values: dict[str, Any] = {
        "processes": config.processes or usable_cpus(),
        "threads": config.threads,
        "queues": config.queues,
        "shutdown_timeout": config.shutdown_timeout,
        "max_jobs": config.max_jobs,
        "max_memory_mb": config.max_memory_mb,
        "burst_wait": config.burst_wait,
        "cancel_grace": config.cancel_grace,
    }
    values.update({key: value for key, value in given.items() if value is not None})
    return WorkerOptions(**values)
