"""``PROCESSES = None`` starts one worker process per CPU this process can use: the CPUs it may run on,
bounded by its cgroup v2 CPU quota (a container limited to 1 CPU on a 64-core node runs 1 process, not 64).
The cgroup file is a fake one written here; the CPUs are this machine's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from queue_max_django.conf import WorkerConfig
from queue_max_django.worker import options
from queue_max_django.worker.options import from_config, usable_cpus

pytestmark = pytest.mark.store_neutral  # no store: the CPU count alone


def _may_run_on() -> int:
    counted = getattr(os, "process_cpu_count", lambda: None)()
    if counted is None and hasattr(os, "sched_getaffinity"):
        counted = len(os.sched_getaffinity(0))
    return counted or os.cpu_count() or 1


def cpu_max(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpu.max"
    path.write_text(text, encoding="ascii")
    return path


@pytest.mark.parametrize(
    ("text", "quota"),
    [
        ("50000 100000\n", 1),  # half a CPU: one process
        ("100000 100000\n", 1),
        ("150000 100000\n", 2),  # rounded up
        ("200000 100000\n", 2),
        ("6400000 100000\n", 64),
    ],
)
def test_the_cgroup_quota_bounds_the_cpus(tmp_path: Path, text: str, quota: int) -> None:
    assert usable_cpus(cpu_max(tmp_path, text)) == min(_may_run_on(), quota)


def test_a_quota_of_one_cpu_is_one_process_however_many_cpus_the_machine_has(tmp_path: Path) -> None:
    assert _may_run_on() > 1, "this proves the bound on a machine of several CPUs only"
    assert usable_cpus(cpu_max(tmp_path, "100000 100000\n")) == 1


@pytest.mark.parametrize("text", ["max 100000\n", "", "garbage", "0 100000", "100000 0", "-1 100000"])
def test_no_quota_or_an_unreadable_one_bounds_nothing(tmp_path: Path, text: str) -> None:
    assert usable_cpus(cpu_max(tmp_path, text)) == _may_run_on()
    assert usable_cpus(tmp_path / "missing") == _may_run_on()


def test_processes_none_in_the_settings_means_the_usable_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = WorkerConfig(
        processes=None,
        threads=1,
        queues=None,
        shutdown_timeout=30.0,
        max_jobs=None,
        max_memory_mb=None,
        burst_wait=0.0,
    )
    monkeypatch.setattr(options, "CGROUP_CPU_MAX", cpu_max(tmp_path, "100000 100000\n"))
    assert from_config(config).processes == 1
    monkeypatch.setattr(options, "CGROUP_CPU_MAX", cpu_max(tmp_path, "max 100000\n"))
    assert from_config(config).processes == _may_run_on()
    assert from_config(config, processes=3).processes == 3  # --processes wins
