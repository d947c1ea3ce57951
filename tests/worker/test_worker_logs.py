"""What a worker process logs about the jobs it runs, and what it counts for its supervisor's closing line:
run in this process (a worker process's threads, in burst mode) over a store in ``tmp_path``.

A failed attempt that runs again is one line (which attempt of how many, when it runs again, the exception
and the frame of the task's own code that raised it); a dead letter is logged with its full traceback; jobs
of a task the worker lacks are one line per task, not one per job."""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.engine import State
from queue_max_django.worker.logs import summary
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.process import WorkerProcess
from queue_max_django.worker.tally import Left, Tally, closing_line
from tests.testapp import tasks as t

FAIL = "tests.testapp.tasks.fail_always"
AT = r"\(at tests/testapp/tasks\.py:\d+ in fail_always\)"  # the task's own frame, relative to the cwd


@pytest.fixture
def store(tmp_path: Path) -> Iterator[None]:
    settings = {
        "DATA_DIR": tmp_path / "store",
        "MAX_RETRIES": 1,
        "RETRY_BACKOFF": 30,
        "UNKNOWN_TASK_GRACE": 60,
    }
    with override_settings(QUEUE_MAX=settings):
        conf.reset()
        yield
        conf.reset()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def matching(self, pattern: str) -> list[logging.LogRecord]:
        return [record for record in self.records if re.search(pattern, record.getMessage())]


@pytest.fixture
def lines() -> Iterator[Lines]:
    logger = logging.getLogger("queue_max_django.worker")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.usefixtures("store")
def test_retries_are_one_line_dead_letters_have_their_traceback_and_the_tally_counts_each(
    lines: Lines,
) -> None:
    queue = conf.get_queue()
    retried = t.fail_always.delay("first try").job_id
    dead = queue.put({"args": ["last try"], "kwargs": {}}, name=FAIL, max_retries=0)
    permanent = t.fail_permanent.delay().job_id
    t.add.delay(1, 2)
    waiting = [queue.put({"args": [], "kwargs": {}}, name="shop.tasks.new_in_this_release") for _ in range(3)]
    tally = Tally(multiprocessing.get_context("spawn"), 1)
    options = WorkerOptions(processes=1, threads=1, burst=True, scheduler=False, verbosity=1)

    assert WorkerProcess(queue, options, 0, tally=tally).run() == 0

    [retry] = lines.matching(f"job {retried} ")
    assert re.fullmatch(
        rf"job {retried} \({FAIL}\) failed \(attempt 1 of 2\), retrying in (2[4-9]|3[0-6])\.\d s: "
        rf"ValueError: first try {AT}",
        retry.getMessage(),
    ), retry.getMessage()
    assert (retry.levelno, retry.exc_info) == (logging.WARNING, None)  # no traceback for an attempt retried
    [last] = lines.matching(f"job {dead} ")
    assert re.fullmatch(
        rf"job {dead} \({FAIL}\) failed \(attempt 1 of 1\), no retries left: now a dead letter: "
        rf"ValueError: last try {AT}",
        last.getMessage(),
    ), last.getMessage()
    assert last.levelno == logging.ERROR and last.exc_info is not None  # the full traceback, once
    # what error trackers and JSON formatters read: the job as structured fields of each record
    assert {k: getattr(last, k) for k in ("job_id", "task", "queue", "attempt", "attempts_allowed")} == {
        "job_id": str(dead),
        "task": FAIL,
        "queue": "default",
        "attempt": 1,
        "attempts_allowed": 1,
    }
    assert (last.dead_letter, retry.dead_letter, retry.attempt, retry.attempts_allowed) == (True, False, 1, 2)
    [refused] = lines.matching(f"job {permanent} ")
    assert "failed (attempt 1 of 2), not retried (Permanent raised" in refused.getMessage()
    assert refused.exc_info is not None
    [unknown] = lines.matching("shop.tasks.new_in_this_release")  # one line for the three jobs
    assert "restart or update your workers" in unknown.getMessage()
    assert unknown.levelno == logging.WARNING
    for job_id in waiting:
        job = queue.job(job_id)
        assert job is not None and (job.state, job.retries, job.attempts) == (State.SCHEDULED, 0, 0)

    counts = tally.counts()
    assert counts == {"done": 1, "retried": 1, "dead": 2, "waiting": 3, "cancelled": 0}
    assert closing_line(counts) == (
        "stopped after 4 jobs (1 done, 1 failed and retried, 2 dead letters); "
        "3 given back to wait for their task"
    )


def test_the_closing_line_names_jobs_that_waited_only_when_there_were_some() -> None:
    assert closing_line({"done": 1, "retried": 0, "dead": 1, "waiting": 0}) == (
        "stopped after 2 jobs (1 done, 0 failed and retried, 1 dead letter)"
    )
    assert closing_line({"done": 0, "retried": 0, "dead": 0, "waiting": 0}) == (
        "stopped after 0 jobs (0 done, 0 failed and retried, 0 dead letters)"
    )


def test_the_closing_line_names_the_retries_a_burst_left_behind() -> None:
    counts = {"done": 0, "retried": 1, "dead": 0, "waiting": 0}
    now = 1_800_000_000.0
    at = time.strftime("%H:%M:%S", time.localtime(now + 60))
    assert closing_line(counts, Left(1, now + 60, True), now=now) == (
        f"stopped after 1 job (0 done, 1 failed and retried, 0 dead letters); 1 retry scheduled for {at} "
        "(in 60.0 s) left behind"
    )
    assert closing_line(counts, Left(3, now + 60, True), now=now).endswith(
        f"; 3 retries scheduled from {at} (in 60.0 s) left behind"
    )
    assert closing_line(counts, Left(1000, now + 60, False), now=now).endswith(
        f"; 1,000+ retries scheduled from {at} (in 60.0 s) left behind"
    )
    days = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now + 2 * 86400))
    assert closing_line(counts, Left(1, now + 2 * 86400, True), now=now).endswith(
        f"; 1 retry scheduled for {days} (in 172800.0 s) left behind"
    )


def _parse(text: str) -> object:
    return json.loads(text)  # raises inside the standard library's json package


def test_the_summary_names_the_innermost_frame_of_the_projects_own_code() -> None:
    try:
        _parse("{")
    except ValueError as exc:
        line = summary(exc)
    assert re.fullmatch(
        r"json\.decoder\.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
        r"\(char 1\) \(at tests/worker/test_worker_logs\.py:\d+ in _parse\)",
        line,
    ), line
    assert summary(RuntimeError("not raised")) == "RuntimeError: not raised"  # no traceback: no frame
    assert summary("a message the runner recorded") == "a message the runner recorded"
