"""``queue_enqueue`` takes ``django.tasks`` tasks (Django >= 6.0, their backend ``QueueMaxBackend``) by module
path, as it takes ``@task`` ones: one from the options, or lines of a ``--file``, stored as the task's own
``enqueue()`` stores them and run by the worker's runner; on a Django without ``django.tasks`` it says that
such a task needs Django 6.0. On both stores."""

from __future__ import annotations

import importlib.util
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import django
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from queue_max_django.testing import run_queued
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
MODULE = "tests.testapp.enqueue_django_tasks"
ADD, ATTEMPT = f"{MODULE}.add", f"{MODULE}.attempt"
TASKS = {
    "default": {
        "BACKEND": "queue_max_django.backend.QueueMaxBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"MODULES": [MODULE]},
    }
}

pytestmark = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django >= 6.0")


@pytest.fixture
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max(QUEUES=["default", "mail"]), override_settings(TASKS=TASKS):
        yield


def call(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("queue_enqueue", *argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def test_a_django_task_is_enqueued_by_its_module_path_and_runs(store: None) -> None:
    out = call("--task", ADD, "--args", "[2, 3]")
    job_id = int(out.split()[2].rstrip(":"))
    assert out == f"Enqueued job {job_id}: {ADD} on queue 'default'.\n"
    job = get_queue().job(job_id)
    assert job is not None and (job.state, job.name, job.queue, job.priority) == (
        State.PENDING,
        ADD,
        "default",
        0,
    )
    assert (job.payload["task"], job.payload["args"], job.payload["kwargs"]) == (ADD, [2, 3], {})
    (outcome,) = run_queued()
    done = get_queue().job(job_id)
    assert done is not None and (done.state, done.result) == (State.DONE, 5), outcome


def test_a_django_task_takes_the_options_and_its_context(store: None) -> None:
    data = json.loads(
        call("--task", ATTEMPT, "--kwargs", '{"label": "try"}', "--priority", "7", "--queue", "mail",
             "--delay", "600", "--json")
    )  # fmt: skip
    (text_id,) = data["job_ids"]
    job = get_queue().job(int(text_id))
    assert job is not None and (job.state, job.queue, job.priority) == (State.SCHEDULED, "mail", 7)
    assert job.eta is not None and 590 < job.eta - time.time() <= 600
    assert data["count"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--args", "[1]"), rf"^task '{ADD}' cannot be called with these arguments: missing a required"),
        (("--args", "[1, 2]", "--priority", "101"), rf"^task '{ADD}': priority must be a whole number"),
        (
            ("--args", "[1, 2]", "--queue", "reports"),
            rf"^task '{ADD}': Queue 'reports' is not valid for backend\.$",
        ),
        (("--args", "[1, 2]", "--delay", "-1"), r"^delay must be a number of seconds >= 0, not -1\.0$"),
    ],
)
def test_bad_arguments_of_a_django_task_store_nothing(
    store: None, argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call("--task", ADD, *argv)
    assert get_queue().stats()["total"] == 0


def test_a_file_mixes_django_tasks_and_app_tasks(store: None, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    lines = [
        {"task": ADD, "args": [1, 2]},
        {"task": t.add.name, "args": [3, 4]},
        {"task": ADD, "args": [5, 6]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    ids = [int(each) for each in json.loads(call("--file", str(path), "--json"))["job_ids"]]
    assert [get_queue().job(each).name for each in ids] == [ADD, t.add.name, ADD]  # type: ignore[union-attr]
    run_queued()
    assert [get_queue().job(each).result for each in ids] == [3, 7, 11]  # type: ignore[union-attr]

    path.write_text(
        json.dumps({"task": ADD, "args": [1]}) + "\n" + json.dumps(lines[1]) + "\n", encoding="utf-8"
    )
    with pytest.raises(CommandError, match=r"1 bad line, so nothing was enqueued:\n  line 1: task "):
        call("--file", str(path))
    assert get_queue().stats()["total"] == 3


def test_without_django_tasks_it_says_a_django_task_needs_django_6(
    store: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def as_on_django_5_2(name: str, package: str | None = None) -> object:
        return None if name == "django.tasks" else find_spec(name, package)  # no such package there

    monkeypatch.setattr(importlib.util, "find_spec", as_on_django_5_2)
    with pytest.raises(CommandError) as caught:
        call("--task", ADD, "--args", "[2, 3]")
    assert str(caught.value).startswith(f"unknown task '{ADD}'.")
    assert str(caught.value).endswith(
        "Tasks of Django's own Tasks framework (django.tasks.task) need Django 6.0 or later: this is Django "
        f"{django.get_version()}, so queue_enqueue takes the app's @task tasks only."
    )
    assert get_queue().stats()["total"] == 0
