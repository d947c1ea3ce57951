"""Task.get_stats(): this process's counts of a task's jobs and their mean run time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from queue_max_django import signals
from queue_max_django.testing import run_queued
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ZERO = {"enqueued": 0, "succeeded": 0, "failed": 0, "retried": 0, "cancelled": 0, "mean_run_time": None}


@pytest.fixture(autouse=True)
def _fresh_stats() -> Iterator[None]:
    t.ATTEMPTS.clear()
    signals.reset_stats()
    yield
    signals.reset_stats()


def test_a_task_never_run_has_zero_counts() -> None:
    assert t.add.get_stats() == ZERO


def test_counts_and_mean_run_time(queue_max: Configure) -> None:
    with queue_max(MAX_RETRIES=1):
        t.add.delay(1, 2)
        t.add.map([1, 2], 3)
        assert t.add.get_stats() == {**ZERO, "enqueued": 3}
        t.fail_always.delay("no")
        t.flaky.delay("k", 1)
        run_queued()
    stats = t.add.get_stats()
    assert {k: v for k, v in stats.items() if k != "mean_run_time"} == {
        "enqueued": 3,
        "succeeded": 3,
        "failed": 0,
        "retried": 0,
        "cancelled": 0,
    }
    assert isinstance(stats["mean_run_time"], float) and 0 <= stats["mean_run_time"] < 5
    failing = t.fail_always.get_stats()
    assert (failing["enqueued"], failing["succeeded"], failing["retried"], failing["failed"]) == (1, 0, 1, 1)
    assert failing["mean_run_time"] is not None
    flaky = t.flaky.get_stats()
    assert (flaky["enqueued"], flaky["succeeded"], flaky["retried"], flaky["failed"]) == (1, 1, 1, 0)
    assert t.echo.get_stats() == ZERO


def test_immediate_mode_is_counted(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        t.add.delay(1, 1)
        t.fail_permanent.delay()
    assert t.add.get_stats()["succeeded"] == 1 and t.add.get_stats()["mean_run_time"] is not None
    assert t.fail_permanent.get_stats() == {
        **t.fail_permanent.get_stats(),
        "enqueued": 1,
        "failed": 1,
        "succeeded": 0,
    }


def test_the_mean_is_over_timed_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = signals.TaskStats(max_timed=2)
    clock = iter([10.0, 11.0, 20.0, 23.0, 30.0, 31.0, 32.0, 33.0])
    monkeypatch.setattr(signals.time, "monotonic", lambda: next(clock))
    stats.started(1)  # 10
    stats.finished(1, "a", "succeeded")  # 11: 1 s
    stats.started(2)  # 20
    stats.finished(2, "a", "retried")  # 23: 3 s
    stats.started(3)  # 30
    stats.started(4)  # 31
    stats.started(5)  # 32: job 3 is forgotten (bounded)
    stats.finished(3, "a", "failed")  # 33: counted, not timed
    assert stats.get("a") == {
        "enqueued": 0, "succeeded": 1, "retried": 1, "failed": 1, "cancelled": 0, "mean_run_time": 2.0,
    }  # fmt: skip
    assert len(stats._started) == 2
