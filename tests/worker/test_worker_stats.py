"""A worker process keeps ``Task.get_stats()`` right whether or not anyone listens to the job signals (when
nobody does, it skips the engine's per-job events and counts each attempt itself)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf, signals
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess
from tests.testapp import tasks as t


@pytest.fixture
def store(tmp_path: Path) -> Iterator[None]:
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "store", "MAX_RETRIES": 1, "RETRY_BACKOFF": 0}):
        conf.reset()
        signals.reset_stats()
        yield
        conf.reset()
        signals.reset_stats()


def drain() -> None:
    """Run everything queued through a worker process's threads, in this process (burst)."""
    options = WorkerOptions(processes=1, threads=2, burst=True, scheduler=False, verbosity=0)
    assert WorkerProcess(conf.get_queue(), options, 0).run() == 0


def run_mix() -> tuple[dict[str, Any], dict[str, Any]]:
    for n in range(40):
        t.add.delay(n, 1)
    t.fail_always.delay("boom")  # one retry (MAX_RETRIES 1), then a dead letter
    drain()
    return t.add.get_stats(), t.fail_always.get_stats()


@pytest.mark.usefixtures("store")
@pytest.mark.parametrize("listening", [False, True], ids=["no-receivers", "a-receiver"])
def test_task_statistics_are_the_same_with_or_without_signal_receivers(listening: bool) -> None:
    seen: list[int] = []

    def receiver(sender: Any, job_id: int, **kwargs: Any) -> None:
        seen.append(job_id)

    if listening:
        signals.job_succeeded.connect(receiver)
    try:
        assert signals.job_signals_connected() is listening
        added, failed = run_mix()
    finally:
        signals.job_succeeded.disconnect(receiver)

    assert {key: added[key] for key in ("enqueued", "succeeded", "failed", "retried")} == {
        "enqueued": 40, "succeeded": 40, "failed": 0, "retried": 0,
    }  # fmt: skip
    assert {key: failed[key] for key in ("enqueued", "succeeded", "failed", "retried")} == {
        "enqueued": 1, "succeeded": 0, "failed": 1, "retried": 1,
    }  # fmt: skip
    assert added["mean_run_time"] is not None and added["mean_run_time"] >= 0
    assert failed["mean_run_time"] is not None  # failed attempts are timed too
    assert len(seen) == (40 if listening else 0)
