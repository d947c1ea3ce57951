"""A job whose outcome the store cannot take as it is still ends, stored, on every store (issue 28).

A task can leave an outcome that the store refuses as it is (``workapp.outcomes.leave``): metadata with a
non-string key, 5,000 levels deep, or with a NUL or a lone surrogate in a string; an exception whose message
has a lone surrogate (a file name decoded with ``surrogateescape``) or a NUL (which PostgreSQL's text
refuses), or whose ``str()`` fails; a return value with a lone surrogate or 5,000 levels deep. Each attempt
still ends in a stored state, never held by its worker: metadata that cannot be stored fails the job with
``InvalidMetadata``; an error text is stored escaped (``\\udce9``, ``\\x00``) and the job is retried as
usual; a result that cannot be stored fails the job with an error that says so; a result that can (a NUL in
a str) is stored; and anything else (metadata stored before its depth was bounded) fails the job for good
with ``OutcomeNotStored``. The same for ``@task`` jobs and ``django.tasks`` jobs, run in-process
(``run_queued()``, the immediate mode) and by a real ``queue_worker --burst``, which ends and counts each one.
What is checked is what the store holds afterwards.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.engine import Job, Queue, Record, State
from queue_max_django.engine import metadata as metadata_module
from queue_max_django.running.outcome import UNSTORED, OutcomeNotStored
from queue_max_django.testing import run_queued
from tests.worker.conftest import Site
from tests.worker.workapp import outcomes as workapp
from tests.worker.workapp.outcomes import TRIGGERS

HAS_DJANGO_TASKS = importlib.util.find_spec("django.tasks") is not None
DJANGO_TASK = "tests.worker.workapp.outcome_django_tasks.unfinishable"
OUTCOMES = "tests.worker.workapp.outcomes."  # where the @task twin lives (workapp/outcomes.py)
INVALID_METADATA = "queue_max_django.engine.errors.InvalidMetadata"
KINDS = ["task", pytest.param("django", marks=pytest.mark.skipif(not HAS_DJANGO_TASKS, reason="Django < 6"))]


@dataclass(frozen=True)
class Expected:
    state: State
    attempts: int  # both tasks allow 2 (one retry)
    error_type: str | None = None  # the same for both kinds of task, unless django_error_type is set
    error: str | None = None  # a regular expression the stored error text matches (whole)
    django_error_type: str | None = None


ESCAPED = {"surrogate": r"caf\\udce9\.txt", "nul": r"a\\x00b"}
NOT_SERIALIZABLE = "queue_max_django.engine.errors.PayloadNotSerializable"
EXPECTED = {
    "metadata-key": Expected(State.FAILED, 1, INVALID_METADATA, r".*metadata keys must be strings, not 1"),
    "metadata-deep": Expected(State.FAILED, 1, INVALID_METADATA, r".*metadata is nested over 64 levels.*"),
    "metadata-nul": Expected(State.FAILED, 1, INVALID_METADATA, r".*cannot hold NUL characters.*"),
    "metadata-surrogate": Expected(State.FAILED, 1, INVALID_METADATA, r".*surrogates not allowed"),
    "error-surrogate": Expected(State.FAILED, 2, "ValueError", rf"cannot read {ESCAPED['surrogate']}"),
    "error-nul": Expected(State.FAILED, 2, "ValueError", rf"cannot read {ESCAPED['nul']}"),
    "error-unprintable": Expected(
        State.FAILED, 2, "tests.worker.workapp.outcomes.Unprintable", r"<exception str\(\) failed>"
    ),
    "result-surrogate": Expected(
        State.FAILED, 1, None, r".*cannot be stored.*lone surrogate.*", django_error_type=NOT_SERIALIZABLE
    ),
    "result-nul": Expected(State.DONE, 1),
    "result-deep": Expected(
        State.FAILED, 1, None, r".*cannot be stored.*", django_error_type=NOT_SERIALIZABLE
    ),
}
assert set(EXPECTED) == set(TRIGGERS)


def django_tasks_setting() -> dict[str, Any]:
    options = {"MODULES": ["tests.worker.workapp.outcome_django_tasks"], "MAX_RETRIES": 1}
    return {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend", "OPTIONS": options}}


@pytest.fixture
def in_process(site: Site, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """This process's ``QUEUE_MAX`` and ``TASKS`` on the site's store (and its marks folder)."""
    monkeypatch.setenv("QUEUE_MAX_TEST_MARKS", site.env["QUEUE_MAX_TEST_MARKS"])
    conf.reset()
    with override_settings(QUEUE_MAX=site.settings(), TASKS=django_tasks_setting()):
        yield site
    conf.reset()


def enqueue(kind: str, trigger: str) -> int:
    """One job of ``kind``'s ``unfinishable`` task, as ``.delay()``/``.enqueue()`` makes it."""
    if kind == "task":
        return workapp.unfinishable.delay(trigger).job_id
    from tests.worker.workapp import outcome_django_tasks

    return int(outcome_django_tasks.unfinishable.enqueue(trigger).id)


def check_stored(queue: Queue, job_id: int, trigger: str, kind: str) -> Job:
    """The job as the store holds it: ended as ``EXPECTED`` says, each attempt counted."""
    expected = EXPECTED[trigger]
    job = queue.job(job_id)
    assert job is not None
    assert (job.state, job.attempts) == (expected.state, expected.attempts), (trigger, kind, job.error)
    if expected.state is State.DONE:
        assert job.result == "a\x00b" and job.error is None
        return job
    error_type = expected.error_type
    if kind == "django" and expected.django_error_type is not None:
        error_type = expected.django_error_type
    assert job.error_type == error_type, (trigger, kind, job.error)
    assert expected.error is not None and job.error is not None
    assert re.fullmatch(expected.error, job.error, re.DOTALL), (trigger, kind, job.error)
    if trigger.startswith("error"):
        assert job.traceback is not None and f"{job.error}\n" in job.traceback
        assert [error for _kind, error in job.errors] == [job.error] * expected.attempts
    if trigger.startswith("metadata"):
        assert job.metadata == {}, "the metadata that could not be stored is not"
    return job


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("trigger", TRIGGERS)
def test_an_outcome_the_store_cannot_take_as_it_is_still_ends_the_job(
    in_process: Site, trigger: str, kind: str
) -> None:
    job_id = enqueue(kind, trigger)

    escaped = None
    try:
        outcomes = run_queued()
    except Exception as exc:  # told short: pytest takes minutes to format a RecursionError's traceback
        escaped = f"run_queued() raised {type(exc).__name__}: {exc!s:.300}"
    if escaped is not None:
        pytest.fail(escaped, pytrace=False)

    expected = EXPECTED[trigger]
    assert [outcome.job_id for outcome in outcomes] == [job_id] * expected.attempts
    assert outcomes[-1].state is expected.state
    with in_process.queue() as queue:
        check_stored(queue, job_id, trigger, kind)
        stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)


def enqueue_with_old_metadata(trigger: str = "result-nul") -> int:
    """A job whose metadata nests deeper than ``METADATA_MAX_DEPTH``, as a version before that bound stored
    it. 900 levels: what JSON still encodes on every supported Python (3.11's encoder gives up near 1,000),
    and past what ``copy.deepcopy`` can walk."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metadata_module, "METADATA_MAX_DEPTH", 10_000)
        return workapp.unfinishable.using(metadata={"old": workapp.deep(900)}).delay(trigger).job_id


def check_last_resort(queue: Queue, job_id: int, kind: str) -> None:
    job = queue.job(job_id)
    assert job is not None
    assert (job.state, job.attempts) == (State.FAILED, 1)
    assert (job.error_type, job.error) == (
        "queue_max_django.running.outcome.OutcomeNotStored",
        UNSTORED.format(kind=kind),
    )


def test_old_metadata_too_deep_to_copy_fails_only_a_task_that_reads_its_context(in_process: Site) -> None:
    """The runner copies a job's metadata only for a task that asks for its context (``current_job()``):
    a task that does not runs as any other; one that does fails, as a task's own error (retried)."""
    quiet = enqueue_with_old_metadata("result-nul")
    reads = enqueue_with_old_metadata("metadata-nul")
    outcomes = {outcome.job_id: outcome for outcome in run_queued()}
    assert outcomes[quiet].state is State.DONE
    with in_process.queue() as queue:
        job = queue.job(reads)
        assert job is not None and job.state is State.FAILED and job.attempts == 2
        assert job.error_type == "RecursionError"


def test_the_last_resort_fails_for_good_a_job_whose_attempt_cannot_end_otherwise(
    in_process: Site, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that refuses an outcome for a reason nothing else handles (a fault injected into the
    success's write): the completer's last resort fails the job for good instead, logged once."""
    job_id = workapp.unfinishable.delay("result-nul").job_id  # a result the store takes
    monkeypatch.setattr(Record, "ack", lambda *args, **kwargs: _refuse())

    (outcome,) = run_queued()

    assert outcome.state is State.FAILED and isinstance(outcome.error, OutcomeNotStored)
    with in_process.queue() as queue:
        check_last_resort(queue, job_id, "RuntimeError")
        assert queue.stats()["running"] == 0
    logged = f"job {job_id} ({OUTCOMES}unfinishable): its outcome could not be stored (RuntimeError)"
    assert logged in caplog.text


def _refuse() -> None:
    raise RuntimeError("the store refused the outcome (an injected fault)")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("trigger", ["metadata-key", "error-surrogate", "error-nul", "result-surrogate"])
def test_the_immediate_mode_ends_them_too(in_process: Site, trigger: str, kind: str) -> None:
    with override_settings(QUEUE_MAX={**in_process.settings(), "IMMEDIATE": True}):
        conf.reset()
        job_id = enqueue(kind, trigger)  # run here and now: a failure is final
        with in_process.queue() as queue:
            job = queue.job(job_id)
            assert job is not None and (job.state, job.attempts) == (State.FAILED, 1), job.error
            expected = EXPECTED[trigger]
            assert expected.error is not None and job.error is not None
            assert re.fullmatch(expected.error, job.error, re.DOTALL), job.error
    conf.reset()


def test_a_real_worker_ends_each_such_job_counts_it_and_exits(in_process: Site) -> None:
    in_process.env["QUEUE_MAX_TEST_DJANGO_TASKS"] = "outcomes"
    kinds = ["task", "django"] if HAS_DJANGO_TASKS else ["task"]
    jobs = {(kind, trigger): enqueue(kind, trigger) for kind in kinds for trigger in TRIGGERS}
    conf.reset()  # this process's queue closes: the worker has the store

    done = in_process.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler")

    assert done.returncode == 0, done.stderr[-4000:]
    with in_process.queue() as queue:
        for (kind, trigger), job_id in jobs.items():
            check_stored(queue, job_id, trigger, kind)
        stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)
        assert queue.verify() == []
    ended = [EXPECTED[trigger] for _kind, trigger in jobs]
    dead = sum(expected.state is State.FAILED for expected in ended)
    succeeded = sum(expected.state is State.DONE for expected in ended)
    retried = sum(expected.attempts - 1 for expected in ended)
    total = dead + succeeded + retried
    counts = f"{succeeded} done, {retried} failed and retried, {dead} dead letters"
    assert done.stderr.endswith(f"stopped after {total} jobs ({counts})\n"), done.stderr[-2000:]
    assert "could not be finished" not in done.stderr
