"""Fixture tasks of the workflow tests (imported by tasks.py, so autodiscovery registers them): steps that
add, sum, join, fail, and log when they start and end (to a file named by the test, for worker processes)."""

from __future__ import annotations

import os
import time
from typing import Any

from queue_max_django import task


def _log(path: str | None, line: str) -> None:
    if path:
        with open(path, "a") as out:  # one short write in append mode: whole lines from every process
            out.write(line + "\n")


@task
def wf_add(a: int, b: int = 0, log: str | None = None, label: str = "") -> int:
    _log(log, f"start {label}")
    _log(log, f"end {label}")
    return a + b


@task
def wf_total(values: list[int], log: str | None = None, label: str = "") -> int:
    _log(log, f"start {label}")
    _log(log, f"end {label}")
    return sum(values)


@task
def wf_join(parts: dict[str, Any]) -> dict[str, Any]:
    return parts


@task(max_retries=0)
def wf_boom(*args: Any, log: str | None = None, label: str = "") -> None:
    _log(log, f"start {label}")
    raise ValueError("boom")


@task(max_retries=0)
def wf_switch(value: Any, switch: str) -> Any:
    """Fails (for good: no retry) until the file ``switch`` exists, then returns ``value``."""
    if not os.path.exists(switch):
        raise RuntimeError(f"{switch} is off")
    return value


@task
def wf_sleep(seconds: float, log: str | None = None, label: str = "") -> float:
    _log(log, f"start {label}")
    time.sleep(seconds)
    _log(log, f"end {label}")
    return seconds
