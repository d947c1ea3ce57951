"""The maintenance commands as users run them: ``python -m django <command>`` in a real process (exit codes,
Ctrl-C), and their ``--help``.

Each process runs with ``DJANGO_SETTINGS_MODULE=tests.settings`` and ``TMPDIR`` set to the test's
``tmp_path``, so the store of ``tests.settings`` (under the temporary directory, named by the process id)
lands there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core.management import load_command_class

from queue_max_django.engine import Queue, State
from tests.testapp import tasks as t

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("queue_stats", "queue_list", "queue_retry", "queue_purge", "queue_enqueue", "queue_check")
TIMEOUT = 60.0  # seconds a command may take, Django's start-up included


def environment(tmp_path: Path) -> dict[str, str]:
    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")
    }
    return {**env, "DJANGO_SETTINGS_MODULE": "tests.settings", "TMPDIR": str(tmp_path)}


def django(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *argv],
        cwd=ROOT,
        env=environment(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def store_of(tmp_path: Path, pid: int) -> Path:
    """Where ``tests.settings`` puts the store of the process ``pid``."""
    return tmp_path / f"queue-max-tests-{pid}" / "queue_max_data"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("queue_enqueue", "--task", "add"),
            "CommandError: unknown task 'add'. Did you mean 'tests.testapp.tasks",
        ),
        (
            ("queue_list", "--status", "waiting"),
            "CommandError: unknown status 'waiting': use one of pending, ",
        ),
        (
            ("queue_purge", "--status", "failed"),
            "CommandError: refusing to purge without --yes: stdin is not a",
        ),
        (("queue_retry", "--job-id", "12345"), "CommandError: no job 12345: it never existed"),
    ],
)
def test_an_error_exits_with_status_1_and_a_message(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    done = django(tmp_path, *argv)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(message), done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_option_is_a_usage_error_with_status_2(tmp_path: Path) -> None:
    done = django(tmp_path, "queue_list", "--status", "pending", "--limit", "many")
    assert done.returncode == 2
    assert "error: argument --limit: invalid positive_int value: 'many'" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no store was opened


def test_enqueue_then_check_in_real_processes(tmp_path: Path) -> None:
    done = django(tmp_path, "queue_enqueue", "--task", t.add.name, "--args", "[20, 22]", "--json")
    assert (done.returncode, done.stderr) == (0, "")
    (job_id,) = json.loads(done.stdout)["job_ids"]
    with Queue(store_of(tmp_path, _pid_of(tmp_path))) as q:
        job = q.job(job_id)
        assert job is not None
        assert (job.state, job.name, job.payload) == (
            State.PENDING,
            t.add.name,
            {"args": [20, 22], "kwargs": {}},
        )


def _pid_of(tmp_path: Path) -> int:
    """The pid of the one process that made a store under ``tmp_path``."""
    (made,) = tmp_path.glob("queue-max-tests-*")
    return int(made.name.rpartition("-")[2])


def test_stats_watch_ends_with_status_0_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "queue_stats", "--watch", "0.05"],
        cwd=ROOT,
        env={**environment(tmp_path), "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(TIMEOUT, process.kill)  # a hung process ends the readline() below
    watchdog.start()
    try:
        assert process.stdout is not None
        drawn = 0
        while drawn < 2:  # two redraws: it is watching
            line = process.stdout.readline()
            assert line, "queue_stats ended before it was interrupted"
            drawn += line == "Rate limits\n"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (process.returncode, err) == (0, "")
    assert store_of(tmp_path, process.pid).is_dir()


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name: str) -> None:
    command = load_command_class("queue_max_django", name)
    text = command.create_parser("manage.py", name).format_help()
    assert command.help and " ".join(command.help.split()[:4]) in " ".join(text.split())
    assert "--iterations" not in text  # queue_stats' option for tests stays hidden
