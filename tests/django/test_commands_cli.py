"""The maintenance commands as users run them: ``python -m django <command>`` in a real process (exit codes,
Ctrl-C), and their ``--help``.

Each process runs with ``DJANGO_SETTINGS_MODULE=tests.settings`` and ``TMPDIR`` set to the test's
``tmp_path``, so the store of ``tests.settings`` (under the temporary directory, named by the process id)
lands there.
"""

from __future__ import annotations

import argparse
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
COMMANDS = (
    "queue_stats",
    "queue_list",
    "queue_show",
    "queue_retry",
    "queue_delete",
    "queue_purge",
    "queue_enqueue",
    "queue_check",
    "queue_health",
    "queue_compact",
    "queue_worker",
    "queue_cancel",
)
TIMEOUT = 60.0  # seconds a command may take, Django's start-up included


def environment(tmp_path: Path) -> dict[str, str]:
    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")
    }
    return {**env, "DJANGO_SETTINGS_MODULE": "tests.settings", "TMPDIR": str(tmp_path)}


def django(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return python(tmp_path, "-m", "django", *argv)


def python(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """This Python, with ``argv``, in the test's environment (``environment``); its output captured."""
    return subprocess.run(
        [sys.executable, *argv],
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
            ("queue_list", "--status", "queued"),
            "CommandError: unknown status 'queued': use one of pending, ",
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
        job = q.job(int(job_id))
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
    store = tmp_path / "store"
    Queue(store).close()  # queue_stats reads a store, and makes none
    (tmp_path / "watch_settings.py").write_text(
        f"from tests.settings import *\nQUEUE_MAX = {{'DATA_DIR': {str(store)!r}}}\n"
    )
    env = {**environment(tmp_path), "DJANGO_SETTINGS_MODULE": "watch_settings", "PYTHONPATH": str(tmp_path)}
    # As a terminal's Ctrl-C finds it: SIGINT raises KeyboardInterrupt. (A child of a shell's background job
    # starts with SIGINT ignored, and Python then leaves it ignored: CI runs a suite that way.)
    interruptible = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv = ['django', 'queue_stats', '--watch', '0.5']; "
        "runpy.run_module('django', run_name='__main__')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", interruptible],
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
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


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name: str) -> None:
    command = load_command_class("queue_max_django", name)
    text = command.create_parser("manage.py", name).format_help()
    assert command.help and " ".join(command.help.split()[:4]) in " ".join(text.split())
    assert "--iterations" not in text  # queue_stats' option for tests stays hidden


DJANGOS_OPTIONS = {"help", "verbosity", "settings", "pythonpath", "traceback", "no_color", "force_color"}
DJANGOS_OPTIONS |= {"skip_checks"}  # argparse's and Django's own options, worded their way


@pytest.mark.parametrize("name", COMMANDS)
def test_every_options_help_is_a_sentence(name: str) -> None:
    """Each option's help starts with a capital and ends with a full stop, in every command alike."""
    parser = load_command_class("queue_max_django", name).create_parser("manage.py", name)
    helps = {
        action.dest: action.help
        for action in parser._actions
        if action.help and action.help != argparse.SUPPRESS and action.dest not in DJANGOS_OPTIONS
    }
    assert helps
    assert [dest for dest, text in helps.items() if not (text[0].isupper() and text.endswith("."))] == []


@pytest.mark.parametrize(
    ("name", "required"),
    [  # (queue_list: --status, or --tag instead: neither is required alone; test_tags.py)
        ("queue_purge", "--status STATE"),
        ("queue_retry", "(--job-id ID | --all)"),
        ("queue_show", "JOB_ID"),
        ("queue_delete", "JOB_ID [JOB_ID ...]"),
        ("queue_enqueue", "queue_enqueue --task NAME [--args JSON]"),
        ("queue_enqueue", "queue_enqueue --file PATH [--task NAME]"),
    ],
)
def test_the_usage_line_shows_required_options_as_required(name: str, required: str) -> None:
    command = load_command_class("queue_max_django", name)
    usage = " ".join(command.create_parser("manage.py", name).format_usage().split())
    assert required in usage and f"[{required}" not in usage, usage


CLOSED_PIPES = """
import json, os, sys, tempfile

import django

django.setup()
from django.core.management import execute_from_command_line

from queue_max_django import conf
from queue_max_django.conf import get_queue
from tests.testapp import tasks as t

queue = get_queue()
ids = [str(t.add.delay(n, n).job_id) for n in range(3)]
failed = []
for n in range(2):
    job_id = queue.put({"args": ["x"], "kwargs": {}}, name=t.fail_always.name)
    queue.claim(job_id).nack(ValueError("boom"), permanent=True)
    failed.append(str(job_id))
done = queue.claim(int(ids[2]))
done.ack(4)
conf.reset()  # closed: queue_compact wants the store to itself
commands = [
    ["queue_compact", "--output", os.path.join(sys.argv[1], "compacted")],
    ["queue_stats"],
    ["queue_stats", "--json"],
    ["queue_stats", "--watch", "0.5", "--iterations", "3"],
    ["queue_list", "--status", "pending"],
    ["queue_list", "--status", "pending", "--json"],
    ["queue_show", ids[0]],
    ["queue_show", ids[0], "--json"],
    ["queue_check"],
    ["queue_enqueue", "--task", t.add.name, "--args", "[5, 5]", "--json"],
    ["queue_retry", "--job-id", failed[0]],
    ["queue_delete", failed[1]],
    ["queue_purge", "--status", "done", "--yes"],
    ["queue_stats"],  # the last one leaves its closed pipe as standard output, for the interpreter's exit
]
results = []
real_stdout, real_stderr = os.dup(1), os.dup(2)
for number, argv in enumerate(commands):
    read, write = os.pipe()
    os.close(read)  # the reader has gone (| head), before the command writes a line
    os.dup2(write, 1)
    os.close(write)
    errors = tempfile.TemporaryFile()
    os.dup2(errors.fileno(), 2)
    try:
        execute_from_command_line(["manage.py", *argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = repr(exc)
    if number < len(commands) - 1:
        try:
            sys.stdout.flush()  # nothing is left buffered for the closed pipe
        except BaseException as exc:
            code = f"left in the buffer: {exc!r}"
        os.dup2(real_stdout, 1)
    sys.stderr.flush()
    os.dup2(real_stderr, 2)
    errors.seek(0)
    results.append([argv[0], code, errors.read().decode()])
with open(os.path.join(sys.argv[1], "results.json"), "w") as out:
    json.dump({"results": results, "failed": failed}, out)
"""


def test_every_command_ends_quietly_when_its_output_pipe_is_closed(tmp_path: Path) -> None:
    """``queue_stats | head``: each command in turn writes to a pipe whose reader has gone, and ends with
    status 0 and nothing on standard error (no BrokenPipeError traceback, no "Exception ignored" at exit);
    the commands that change the store have changed it all the same."""
    done = python(tmp_path, "-c", CLOSED_PIPES, str(tmp_path))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    report = json.loads((tmp_path / "results.json").read_text())
    assert [code for _, code, _ in report["results"]] == [0] * 14, report["results"]
    assert [err for _, _, err in report["results"]] == [""] * 14
    assert (tmp_path / "compacted").is_dir()
    with Queue(store_of(tmp_path, _pid_of(tmp_path))) as q:
        retried, deleted = (int(i) for i in report["failed"])
        assert q.stats()["total"] == 6 and q.stats()["pending"] == 4  # 3 + the one queue_enqueue added
        assert (q.job(retried).state, q.job(deleted), q.stats()["done"]) == (State.PENDING, None, 0)  # type: ignore[union-attr]
