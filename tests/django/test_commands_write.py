"""queue_retry, queue_purge and queue_enqueue: what they print, what is on disk afterwards, error paths."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue, reset
from queue_max_django.engine import Job, Queue, State
from queue_max_django.management import djangotasks
from tests.engine.locations import StoreLocation
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ADD, MAIL, FAIL = t.add.name, t.send_mail.name, t.fail_always.name
DAY = 86400.0


class Terminal(io.StringIO):
    """Standard input (or error) that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def call(*argv: str) -> str:
    """Run a command; -> its stdout (its stderr must be empty)."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


@pytest.fixture
def q(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(SHARDS=2):
        yield get_queue()


def on_disk(job_id: int) -> Job:
    """The job as a freshly opened store reads it (the cached queue is closed first)."""
    reset()
    found = get_queue().job(job_id)
    assert found is not None
    return found


def dead_letter(q: Queue, *args: Any, shard: int | None = None, name: str = FAIL) -> int:
    """A failed job (of ``name``, in ``shard`` if given)."""
    payload = {"args": list(args or ["x"]), "kwargs": {}}
    if shard is None:
        job_id = q.put(payload, name=name)
    else:
        (job_id,) = q.put_many_to_shard(shard, [payload], name=name)
    record = q.claim(job_id)
    assert record is not None
    record.nack(ValueError("boom"), permanent=True)
    return job_id


# ------------------------------------------------------------------------------------------ queue_retry


def test_retry_one_dead_letter(q: Queue) -> None:
    job_id = dead_letter(q)
    other = dead_letter(q)
    assert call("queue_retry", "--job-id", str(job_id)) == f"Retried 1 failed job ({job_id}).\n"
    job = on_disk(job_id)
    assert (job.state, job.retries) == (State.PENDING, 0)
    assert on_disk(other).state is State.FAILED


@pytest.mark.lmdb  # two shards (test_retry_all_dead_letters_of_one_task is the filter on any store)
def test_retry_all_dead_letters_of_a_task_or_shard(q: Queue) -> None:
    in_0 = [dead_letter(q, shard=0) for _ in range(3)]
    in_1 = [dead_letter(q, shard=1) for _ in range(2)]
    of_add = dead_letter(q, 1, 2, shard=1, name=ADD)
    pending = t.add.delay(1, 1).job_id
    assert call("queue_retry", "--all", "--shard", "1", "--task", FAIL) == "Retried 2 failed jobs.\n"
    assert [on_disk(i).state for i in (*in_0, *in_1, of_add)] == [State.FAILED] * 3 + [State.PENDING] * 2 + [
        State.FAILED
    ]
    assert call("queue_retry", "--all", "--task", ADD) == "Retried 1 failed job.\n"
    assert on_disk(of_add).state is State.PENDING
    assert call("queue_retry", "--all") == "Retried 3 failed jobs.\n"
    assert get_queue().stats()["failed"] == 0 and on_disk(pending).state is State.PENDING
    assert call("queue_retry", "--all") == "Retried 0 failed jobs.\n"


def test_retry_all_dead_letters_of_one_task(q: Queue) -> None:
    others = [dead_letter(q) for _ in range(2)]
    of_add = dead_letter(q, 1, 2, name=ADD)
    assert call("queue_retry", "--all", "--task", ADD) == "Retried 1 failed job.\n"
    assert [on_disk(i).state for i in (*others, of_add)] == [State.FAILED, State.FAILED, State.PENDING]
    assert get_queue().stats()["failed"] == 2


def test_retry_all_reads_past_one_page(q: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("queue_max_django.management.jobs.PAGE", 2)
    ids = [dead_letter(q) for _ in range(5)]
    assert call("queue_retry", "--all") == "Retried 5 failed jobs.\n"
    assert {on_disk(i).state for i in ids} == {State.PENDING}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), r"^Error: say which jobs to retry: --job-id ID, or --all\.$"),
        (("--job-id", "5", "--all"), r"argument --all: not allowed with argument --job-id"),
        (("--job-id", "5", "--task", FAIL), r"^--shard and --task go with --all, not with --job-id\.$"),
        pytest.param(
            ("--all", "--shard", "2"),
            r"^--shard must be from 0 to 1: this store has 2 shards, not 2\.$",
            marks=pytest.mark.lmdb,  # two shards
        ),
        (("--job-id", "999999"), r"^no job 999999: it never existed, or was purged or vacuumed\.$"),
        (
            ("--shard", "0"),
            r"^Error: --all is missing: --shard only narrows down --all\. Add it to retry every failed job "
            r"in shard 0 \(queue_retry --all --shard 0\), or give --job-id ID alone\.$",
        ),
        (
            ("--task", "app.tasks.send mail", "--shard", "0"),
            r"^Error: --all is missing: --shard and --task only narrow down --all\. Add it to retry every "
            r"failed job of task 'app\.tasks\.send mail' in shard 0 \(queue_retry --all --shard 0 --task "
            r"'app\.tasks\.send mail'\), or give --job-id ID alone\.$",
        ),
    ],
)
def test_retry_errors(q: Queue, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call("queue_retry", *argv)


def run(*argv: str) -> tuple[str, str]:
    """Run a command; -> its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_retry_of_an_unknown_task_that_matches_nothing_warns_with_close_names(q: Queue) -> None:
    job_id = dead_letter(q)
    out, err = run("queue_retry", "--all", "--task", "tests.testapp.tasks.fail_alway")
    assert out == "Retried 0 failed jobs.\n"
    assert err.startswith(
        "Warning: no task 'tests.testapp.tasks.fail_alway' is registered in this process and no failed jobs "
        f"matched. Did you mean '{FAIL}', "
    )
    assert run("queue_retry", "--all", "--task", "nothing.like.it") == (
        "Retried 0 failed jobs.\n",
        "Warning: no task 'nothing.like.it' is registered in this process and no failed jobs matched.\n",
    )
    assert run("queue_retry", "--all", "--task", ADD) == ("Retried 0 failed jobs.\n", "")  # registered
    assert on_disk(job_id).state is State.FAILED


def test_retry_of_a_task_this_process_does_not_know_retries_its_jobs(q: Queue) -> None:
    gone = dead_letter(q, name="old.tasks.removed")  # a task since removed from the code, say
    other = dead_letter(q)
    assert run("queue_retry", "--all", "--task", "old.tasks.removed") == ("Retried 1 failed job.\n", "")
    assert (on_disk(gone).state, on_disk(other).state) == (State.PENDING, State.FAILED)


def test_retry_of_a_job_that_is_not_failed_is_refused(q: Queue) -> None:
    job_id = t.add.delay(1, 2).job_id
    with pytest.raises(
        CommandError, match=rf"^job {job_id} is pending, not failed: only dead letters can be"
    ):
        call("queue_retry", "--job-id", str(job_id))
    assert on_disk(job_id).state is State.PENDING


# ------------------------------------------------------------------------------------------ queue_purge


def test_purge_with_yes_removes_the_jobs_in_one_state_only(q: Queue) -> None:
    failed = [dead_letter(q) for _ in range(3)]
    pending = t.add.delay(1, 2).job_id
    assert call("queue_purge", "--status", "failed", "--yes") == "Removed 3 failed jobs.\n"
    reset()
    assert [get_queue().job(i) for i in failed] == [None] * 3
    assert on_disk(pending).state is State.PENDING
    assert get_queue().verify() == []


def test_purge_dry_run_counts_and_removes_nothing(q: Queue) -> None:
    failed = [dead_letter(q) for _ in range(2)]
    assert call("queue_purge", "--status", "failed", "--dry-run") == (
        "Would remove 2 failed jobs (dry run: nothing removed).\n"
    )
    assert [on_disk(i).state for i in failed] == [State.FAILED] * 2


def test_purge_refuses_running_jobs(q: Queue) -> None:
    record = q.claim(t.add.delay(1, 2).job_id)
    assert record is not None
    with pytest.raises(CommandError, match=r"^running jobs cannot be purged: they belong to live workers"):
        call("queue_purge", "--status", "running", "--yes")
    assert on_disk(record.job_id).state is State.RUNNING


def test_purge_without_yes_off_a_terminal_is_refused(q: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal, even though it says yes
    job_id = dead_letter(q)
    with pytest.raises(CommandError, match=r"^refusing to purge without --yes: stdin is not a terminal"):
        call("queue_purge", "--status", "failed")
    assert on_disk(job_id).state is State.FAILED


@pytest.mark.parametrize(
    ("answer", "removed"), [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)]
)
def test_purge_asks_on_a_terminal(
    q: Queue, monkeypatch: pytest.MonkeyPatch, answer: str, removed: bool
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    job_id = dead_letter(q)
    question = "Delete 1 failed job? This cannot be undone. [y/N] "
    outcome = "Removed 1 failed job.\n" if removed else "Purge cancelled: nothing removed.\n"
    assert call("queue_purge", "--status", "failed") == question + outcome
    reset()
    assert (get_queue().job(job_id) is None) is removed


def test_purge_older_than_days(q: Queue) -> None:
    past = Queue(q.path, clock=lambda: time.time() - 3 * DAY)  # the same store, three days ago
    try:
        old_pending = past.put({"args": [1, 2], "kwargs": {}}, name=ADD)
        old_failed = dead_letter(past)
    finally:
        past.close()
    new_pending = t.add.delay(1, 2).job_id
    new_failed = dead_letter(q)
    assert call("queue_purge", "--status", "pending", "--days", "2", "--dry-run") == (
        "Would remove 1 pending job older than 2 days (dry run: nothing removed).\n"
    )
    assert call("queue_purge", "--status", "pending", "--days", "2", "--yes") == "Removed 1 pending job.\n"
    assert call("queue_purge", "--status", "failed", "--days", "2.5", "--yes") == "Removed 1 failed job.\n"
    reset()
    assert get_queue().job(old_pending) is None and get_queue().job(old_failed) is None
    assert on_disk(new_pending).state is State.PENDING and on_disk(new_failed).state is State.FAILED
    assert call("queue_purge", "--status", "failed", "--days", "0", "--yes") == "Removed 1 failed job.\n"


def test_purge_of_one_queue(q: Queue) -> None:
    mail = [t.send_mail.delay(f"{n}@example.com").job_id for n in range(2)]
    scheduled_mail = t.send_mail.schedule_in(3600, "later@example.com").job_id
    other = t.add.delay(1, 2).job_id
    assert call("queue_purge", "--status", "pending", "--queue", "mail", "--yes") == (
        "Removed 2 pending jobs of queue 'mail'.\n"
    )
    reset()
    assert [get_queue().job(i) for i in mail] == [None, None]
    assert on_disk(scheduled_mail).state is State.SCHEDULED and on_disk(other).state is State.PENDING
    assert get_queue().verify() == []


def test_purge_of_one_queue_takes_dead_letters_too(q: Queue) -> None:
    mail_dead = q.put({"args": ["x"], "kwargs": {}}, name=FAIL, queue="mail")
    record = q.claim(mail_dead)
    assert record is not None
    record.nack(ValueError("boom"), permanent=True)
    other_dead = dead_letter(q)
    assert call("queue_purge", "--status", "failed", "--queue", "mail", "--yes") == (
        "Removed 1 failed job of queue 'mail'.\n"
    )
    reset()
    assert get_queue().job(mail_dead) is None and on_disk(other_dead).state is State.FAILED
    assert get_queue().verify() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            (),
            r"^Error: --status is required: a job state: one of pending, scheduled, running, done, failed "
            r"\(or as the admin says them: waiting, dead-letters\)\.$",
        ),
        (
            ("--status", "dead"),
            r"^unknown status 'dead': use one of pending, scheduled, running, done, failed",
        ),
        (("--status", "done", "--days", "-1"), r"argument --days: invalid non_negative_float value: '-1'"),
    ],
)
def test_purge_errors(q: Queue, argv: tuple[str, ...], message: str) -> None:
    job_id = dead_letter(q)
    with pytest.raises(CommandError, match=message):
        call("queue_purge", "--yes", *argv)
    assert on_disk(job_id).state is State.FAILED


# ------------------------------------------------------------------------------------------ queue_enqueue


def test_enqueue_one_job(q: Queue) -> None:
    text = call("queue_enqueue", "--task", ADD, "--args", "[1, 2]")
    job_id = int(text.split()[2].rstrip(":"))
    assert text == f"Enqueued job {job_id}: {ADD} on queue 'default'.\n"
    job = on_disk(job_id)
    assert (job.state, job.name, job.queue, job.priority) == (State.PENDING, ADD, "default", 0)
    assert job.payload == {"args": [1, 2], "kwargs": {}}
    assert job.max_retries == 3


def test_enqueue_with_options_and_json(q: Queue) -> None:
    argv = ["--task", MAIL, "--kwargs", '{"to": "ann@example.com", "subject": "hi"}', "--priority", "-5"]
    data = json.loads(call("queue_enqueue", *argv, "--queue", "urgent", "--delay", "60", "--json"))
    (job_id,) = data["job_ids"]
    assert data == {"count": 1, "job_ids": [job_id]} and isinstance(job_id, str)  # a string, as every id
    job = on_disk(int(job_id))
    assert (job.state, job.queue, job.priority, job.max_retries, job.timeout) == (
        State.SCHEDULED,
        "urgent",
        -5,
        0,  # the task's own options are kept
        5.0,
    )
    assert job.payload == {"args": [], "kwargs": {"to": "ann@example.com", "subject": "hi"}}
    assert job.eta is not None and job.eta == pytest.approx(job.enqueued_at + 60, abs=0.01)


def test_enqueue_in_immediate_mode_runs_the_job(queue_max: Configure) -> None:
    with queue_max(IMMEDIATE=True):
        job_id = json.loads(call("queue_enqueue", "--task", ADD, "--args", "[2, 3]", "--json"))["job_ids"][0]
        job = on_disk(int(job_id))
        assert (job.state, job.result) == (State.DONE, 5)


def test_an_unknown_task_lists_close_matches_and_opens_no_store(
    queue_max: Configure, location: StoreLocation
) -> None:
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--task", "add", "--args", "[1, 2]")
    message = str(caught.value)
    assert message.startswith(
        "unknown task 'add'. Did you mean 'tests.testapp.tasks.add'? Registered tasks: "
    )
    assert f", {ADD}, " in message
    with (
        queue_max(),
        pytest.raises(
            CommandError,
            match=r"^unknown task 'tests\.testapp\.tasks\.sendmail'\. "
            r"Did you mean 'tests\.testapp\.tasks\.send_mail'",
        ),
    ):
        call("queue_enqueue", "--task", "tests.testapp.tasks.sendmail")
    assert not location.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), r"^say what to enqueue: --task NAME \(with --args/--kwargs\), or --file\.$"),
        (
            ("--task", ADD, "--args", "[1, 2"),
            r"^--args is not JSON: Expecting ',' delimiter: line 1 column 6",
        ),
        (("--task", ADD, "--args", '{"a": 1}'), r"""^--args must be a JSON list, not \{"a": 1\}$"""),
        (("--task", ADD, "--kwargs", "[1]"), r"^--kwargs must be a JSON object, not \[1\]$"),
        (
            ("--task", ADD, "--args", "[1]"),
            rf"^task '{ADD}' cannot be called with these arguments: missing a ",
        ),
        (
            ("--task", ADD, "--args", "[1, 2]", "--priority", "101"),
            r"^priority must be an int from -100 to 100",
        ),
        (
            ("--task", ADD, "--args", "[1, 2]", "--delay", "-1"),
            r"^delay must be a number of seconds >= 0, not -1",
        ),
        (("--task", ADD, "--args", "[1]", "--file", "x"), r"^--args and --kwargs go without --file"),
    ],
)
def test_enqueue_errors(
    queue_max: Configure, location: StoreLocation, argv: tuple[str, ...], message: str
) -> None:
    with queue_max(), pytest.raises(CommandError, match=message):
        call("queue_enqueue", *argv)
    assert not location.exists()  # nothing was written: the store was not even opened


def test_enqueue_refuses_a_queue_the_settings_do_not_allow(queue_max: Configure) -> None:
    with queue_max(QUEUES=["default"]):
        with pytest.raises(
            CommandError, match=r"^unknown queue 'mail': QUEUE_MAX\['QUEUES'\] allows \['default'\]$"
        ):
            call("queue_enqueue", "--task", MAIL, "--args", '["a"]')
        assert get_queue().stats()["total"] == 0


def write_lines(path: Path, *lines: Any) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_enqueue_a_file_in_large_transactions(q: Queue, tmp_path: Path) -> None:
    lines: list[dict[str, Any]] = [{"task": ADD, "args": [n, n]} for n in range(5)]
    lines.insert(2, {"task": MAIL, "kwargs": {"to": "a@example.com"}, "priority": 3})
    lines.append({"task": MAIL, "args": ["b@example.com"], "priority": 3, "queue": "mail"})
    lines.append({"args": [7, 8], "delay": 3600})  # the task from --task
    path = write_lines(tmp_path / "jobs.jsonl", *lines[:4], "", *lines[4:])
    text = call("queue_enqueue", "--file", path, "--task", ADD, "--batch-size", "2")
    # groups: add (5 jobs: 3 transactions of 2 at most), send_mail at priority 3 (2 jobs: one transaction a
    # shard), add with a delay (1: 1)
    transactions = 6 if q.shard_count == 2 else 5  # PostgreSQL: one shard, so send_mail's 2 in one
    assert text == f"Enqueued 8 jobs from {path} in {transactions} transactions.\n"
    data = json.loads(call("queue_enqueue", "--file", path, "--task", ADD, "--json"))
    assert data["count"] == 8 and len(set(data["job_ids"])) == 8
    jobs = [on_disk(int(i)) for i in data["job_ids"]]  # in the lines' order
    assert [(j.name, j.payload, j.priority, j.queue) for j in jobs] == [
        (ADD, {"args": [0, 0], "kwargs": {}}, 0, "default"),
        (ADD, {"args": [1, 1], "kwargs": {}}, 0, "default"),
        (MAIL, {"args": [], "kwargs": {"to": "a@example.com"}}, 3, "mail"),
        (ADD, {"args": [2, 2], "kwargs": {}}, 0, "default"),
        (ADD, {"args": [3, 3], "kwargs": {}}, 0, "default"),
        (ADD, {"args": [4, 4], "kwargs": {}}, 0, "default"),
        (MAIL, {"args": ["b@example.com"], "kwargs": {}}, 3, "mail"),
        (ADD, {"args": [7, 8], "kwargs": {}}, 0, "default"),
    ]
    assert [j.state for j in jobs] == [State.PENDING] * 7 + [State.SCHEDULED]
    assert get_queue().stats()["total"] == 16 and get_queue().verify() == []


@pytest.mark.lmdb  # four shards
def test_enqueue_a_file_spreads_its_jobs_over_the_shards(queue_max: Configure, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "jobs.jsonl", *({"args": [n, n]} for n in range(2000)))
    with queue_max(SHARDS=4):
        data = json.loads(call("queue_enqueue", "--task", ADD, "--file", path, "--json"))
        q = get_queue()
        # as .map() puts them: one transaction a shard, so that four workers drain them in parallel
        assert [counts["pending"] for counts in q.shard_stats()] == [500, 500, 500, 500]
        jobs = [q.job(int(i)) for i in data["job_ids"][::250]]  # in the lines' order
        assert [(job.payload["args"][0], job.state) for job in jobs if job] == [
            (n, State.PENDING) for n in range(0, 2000, 250)
        ]
        assert sorted({job.shard for job in jobs if job}) == [0, 1, 2, 3] and q.verify() == []


def test_a_file_with_bad_lines_enqueues_nothing_and_names_each_line(
    queue_max: Configure, location: StoreLocation, tmp_path: Path
) -> None:
    path = write_lines(
        tmp_path / "jobs.jsonl",
        {"task": ADD, "args": [1, 2]},
        "{not json",
        [1, 2],
        {"task": "add", "args": [1, 2]},
        {"task": ADD, "args": [1]},
        {"task": ADD, "args": "1, 2"},
        {"task": ADD, "args": [1, 2], "prio": 1},
        {"task": ADD, "args": [1, 2], "priority": "high"},
        {"args": [1, 2]},
        {"task": ADD, "args": [1, 2]},
    )
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--file", path)
    missing = (
        djangotasks.missing()
    )  # Django 5.2: the unknown task might be a django.tasks task, it says why not
    needs_django_6 = "" if missing is None else f" {missing}"
    assert str(caught.value) == (
        f"{path}: 8 bad lines, so nothing was enqueued:\n"
        "  line 2: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n"
        '  line 3: expected a JSON object such as {"task": ..., "args": [...]}, not [1, 2]\n'
        f"  line 4: unknown task 'add'. Did you mean '{ADD}'?{needs_django_6}\n"
        f"  line 5: task '{ADD}' cannot be called with these arguments: missing a required argument: 'b'\n"
        '  line 6: args must be a JSON list, not "1, 2"\n'
        "  line 7: unknown key 'prio': a line takes task, args, kwargs, priority, delay, queue\n"
        "  line 8: priority must be an int from -100 to 100, not 'high'\n"
        '  line 9: no "task" on this line and no --task option'
    )
    assert not location.exists()


def test_many_bad_lines_are_counted_past_the_first_twenty(queue_max: Configure, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "jobs.jsonl", *(["nope"] * 25))
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--file", path)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"{path}: 25 bad lines, so nothing was enqueued:"
    assert lines[20:] == [
        "  line 20: not JSON: Expecting value: line 1 column 1 (char 0)",
        "  ... and 5 more bad lines",
    ]


def test_a_payload_over_the_size_limit_is_a_bad_line(queue_max: Configure, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "jobs.jsonl", {"task": t.record_call.name, "args": ["x" * 100]})
    with (
        queue_max(MAX_PAYLOAD_BYTES=64),
        pytest.raises(CommandError, match=r"line 1: the payload is 1\d\d bytes"),
    ):
        call("queue_enqueue", "--file", path)


def test_enqueue_file_errors(queue_max: Configure, tmp_path: Path) -> None:
    with queue_max(), pytest.raises(CommandError, match=r"^cannot read .*missing\.jsonl: \[Errno 2\]"):
        call("queue_enqueue", "--file", str(tmp_path / "missing.jsonl"))
    empty = write_lines(tmp_path / "empty.jsonl", "", "  ")
    with queue_max(), pytest.raises(CommandError, match=r"empty\.jsonl holds no jobs\.$"):
        call("queue_enqueue", "--file", empty)


def test_enqueue_reads_standard_input_and_draws_progress_on_a_terminal(
    q: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "sys.stdin", io.StringIO("".join(json.dumps({"args": [n, 1]}) + "\n" for n in range(3)))
    )
    out, err = io.StringIO(), Terminal()
    call_command("queue_enqueue", "--task", ADD, "--file", "-", "--batch-size", "2", stdout=out, stderr=err)
    assert out.getvalue() == "Enqueued 3 jobs from - in 2 transactions.\n"
    bar = "[" + "#" * 20 + "." * 10 + "]  66%  2/3"
    assert err.getvalue() == f"\r{bar}\r[{'#' * 30}] 100%  3/3\n"
    assert get_queue().stats()["pending"] == 3
