"""queue_show and queue_delete (one job, or a few, by id), and the job ids every command takes: what they
print, what is stored afterwards, and what they refuse before writing anything."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State
from queue_max_django.management.common import job_dict, when
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ADD, MAIL, FAIL = t.add.name, t.send_mail.name, t.fail_always.name


def run(*argv: str) -> tuple[str, str]:
    """Run a command; -> its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def call(*argv: str) -> str:
    out, err = run(*argv)
    assert err == ""
    return out


@pytest.fixture
def q(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(SHARDS=1):
        yield get_queue()


def dead_letter(q: Queue, message: str = "x", name: str = FAIL, attempts: int = 1) -> int:
    """A job failed for good after ``attempts`` attempts, with a traceback."""
    job_id = q.put({"args": [message], "kwargs": {}}, name=name, max_retries=3)
    for attempt in range(1, attempts + 1):
        record = q.claim(job_id)
        assert record is not None
        try:
            raise ValueError(f"boom {message}" + (f" {attempt}" if attempts > 1 else ""))
        except ValueError as exc:
            record.nack(exc, permanent=attempt == attempts)
    return job_id


def stored(q: Queue, job_id: int) -> State | None:
    job = q.job(job_id)
    return None if job is None else job.state


# ------------------------------------------------------------------------------------------ queue_show


def test_show_prints_every_field_of_the_job(q: Queue) -> None:
    job_id = dead_letter(q)
    job = q.job(job_id)
    assert job is not None and job.traceback is not None and job.started_at and job.finished_at
    lines = call("queue_show", str(job_id)).splitlines()
    fields = lines[: lines.index("")]
    assert fields[:6] == [
        f"job_id         {job_id}",
        "state          failed",
        f"task           {FAIL}",
        "queue          default",
        "shard          0",
        "priority       0",
    ]
    # every field of the snapshot is a line, under the name --json gives it (the traceback below them),
    # but for the retries, said as attempts made and allowed where the retries were
    first = ("job_id", "state", "task", "queue", "shard", "priority")
    counts = ("max_retries", "attempts", "attempts_allowed")
    assert [line.split()[0] for line in fields if not line.startswith(" ")] == [
        *first,
        *(
            "attempts" if key == "retries" else key
            for key in job_dict(job)
            if key not in (*first, "traceback", "cancelled", *counts)  # (a line only for a cancelled job)
        ),
    ]
    assert 'payload        {"args": ["x"], "kwargs": {}}' in fields
    assert "result         -" in fields and "eta            -" in fields
    assert "attempts       1 of 4 allowed (the first and 3 retries)" in fields
    assert "error          boom x" in fields and "error_type     ValueError" in fields
    assert f"enqueued_at    {when(job.enqueued_at)} UTC" in fields
    assert f"finished_at    {when(job.finished_at)} UTC" in fields
    assert "errors         1. ValueError: boom x" in fields
    assert lines[lines.index("") + 1] == "traceback (of the last failed attempt):"
    shown = [line.removeprefix("  ") for line in lines[lines.index("") + 2 :]]
    assert shown == job.traceback.rstrip("\n").split("\n") and shown[-1] == "ValueError: boom x"


def test_show_json_is_the_job_as_queue_list_prints_it(q: Queue) -> None:
    job_id = dead_letter(q)
    shown = json.loads(call("queue_show", str(job_id), "--json"))
    (listed,) = json.loads(call("queue_list", "--status", "failed", "--json"))["jobs"]
    assert shown == listed and shown["job_id"] == str(job_id) and shown["error"] == "boom x"


def test_show_counts_attempts_as_the_admin_and_queue_list_do(q: Queue) -> None:
    job_id = q.put({"args": ["x"], "kwargs": {}}, name=FAIL, max_retries=0)
    shown = call("queue_show", str(job_id)).splitlines()
    assert "attempts       0 of 1 allowed (no retries)" in shown
    record = q.claim(job_id)
    assert record is not None
    record.nack(ValueError("boom"))  # no retries left: a dead letter after one attempt
    job = q.job(job_id)
    assert job is not None and (job.retries, job.attempts, job.max_retries) == (1, 1, 0)
    shown = call("queue_show", str(job_id)).splitlines()
    assert "attempts       1 of 1 allowed (no retries)" in shown
    assert not [line for line in shown if line.startswith(("retries ", "max_retries "))]  # not "retries 1"
    data = json.loads(call("queue_show", str(job_id), "--json"))
    assert (data["attempts"], data["attempts_allowed"]) == (1, 1)
    assert (data["retries"], data["max_retries"]) == (1, 0)  # kept for the scripts that read them
    (listed,) = json.loads(call("queue_list", "--status", "failed", "--json"))["jobs"]
    assert listed == data
    listed_row = call("queue_list", "--status", "failed").splitlines()[1]
    assert " 1/1 " in listed_row  # the table's ATTEMPTS column: the same count

    one_retry = q.put({"args": ["y"], "kwargs": {}}, name=FAIL, max_retries=1)
    assert "attempts       0 of 2 allowed (the first and 1 retry)" in call("queue_show", str(one_retry))


def test_show_of_a_waiting_job_and_a_done_one(q: Queue) -> None:
    waiting = t.send_mail.schedule_in(60, "ann@example.com").job_id
    lines = call("queue_show", str(waiting)).splitlines()
    assert "state          scheduled" in lines and "timeout        5 s" in lines and "" not in lines
    assert "errors         -" in lines and "finished_at    -" in lines
    done = t.add.delay(2, 3).job_id
    record = q.claim(done)
    assert record is not None
    record.ack({"sum": 5, "raw": b"\x00"})
    assert 'result         {"sum": 5, "raw": "base64:AA=="}' in call("queue_show", str(done)).splitlines()


def test_show_lists_the_error_of_each_attempt(q: Queue) -> None:
    lines = call("queue_show", str(dead_letter(q, "y", attempts=3))).splitlines()
    at = lines.index("errors         1. ValueError: boom y 1")
    assert lines[at + 1 : at + 3] == [
        "               2. ValueError: boom y 2",
        "               3. ValueError: boom y 3",
    ]
    assert "attempts       3 of 4 allowed (the first and 3 retries)" in lines
    assert lines[-1] == "  ValueError: boom y 3"


def test_show_escapes_control_characters_of_stored_text(q: Queue) -> None:
    job_id = dead_letter(q, "\x1b[2J")
    text = call("queue_show", str(job_id))
    assert "\x1b" not in text and "error          boom \\x1b[2J" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("999999",), r"^no job 999999: it never existed, or was purged or vacuumed\.$"),
        (("12abc",), r"^Error: argument JOB_ID: '12abc' is not a job id: a job id is a whole number from 1"),
        (("0",), r"^Error: argument JOB_ID: '0' is not a job id"),
        ((), r"^Error: the following arguments are required: JOB_ID$"),
    ],
)
def test_show_errors(q: Queue, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call("queue_show", *argv)


# ------------------------------------------------------------------------------------------ job ids


def test_every_command_takes_a_job_id_as_json_writes_it(q: Queue) -> None:
    for form in ("{id}", '"{id}"', " {id}\n", ' "{id}" '):  # bare, as --json writes it, with white space
        job_id, other = dead_letter(q), dead_letter(q)
        given = form.format(id=job_id)
        assert json.loads(call("queue_show", given, "--json"))["job_id"] == str(job_id), form
        after = json.loads(call("queue_list", "--status", "failed", "--after", given, "--json"))
        assert [job["job_id"] for job in after["jobs"]] == [str(other)]
        assert call("queue_retry", "--job-id", given) == f"Retried 1 failed job ({job_id}).\n"
        assert call("queue_delete", form.format(id=other)) == "Deleted 1 failed job.\n"
        assert (stored(q, job_id), stored(q, other)) == (State.PENDING, None)


BAD_IDS = ("", "abc", "-5", "+5", "1e3", "5.0", "'5'", '"5', "0x10", "\u0661\u0662", str(2**64), "9" * 5000)


def test_a_bad_job_id_is_refused_before_anything_is_written(q: Queue) -> None:
    job_id = dead_letter(q)
    for bad in BAD_IDS:
        for argv in (
            ("queue_delete", str(job_id), bad),
            ("queue_retry", "--job-id", bad),
            ("queue_show", bad),
        ):
            with pytest.raises(CommandError, match=r"is not a job id: a job id is a whole number from 1 to "):
                call(*argv)
    assert stored(q, job_id) is State.FAILED  # the good id before the bad one was not deleted either


def test_the_largest_job_id_is_taken_and_not_found(q: Queue) -> None:
    with pytest.raises(CommandError, match=rf"^no job {2**64 - 1}: it never existed"):
        call("queue_show", str(2**64 - 1))


# ------------------------------------------------------------------------------------------ queue_delete


def test_delete_removes_the_dead_letters_given(q: Queue) -> None:
    first, second, kept = dead_letter(q, "a"), dead_letter(q, "b"), dead_letter(q, "c")
    pending = t.add.delay(1, 2).job_id
    assert call("queue_delete", str(first), f'"{second}"', str(first)) == "Deleted 2 failed jobs.\n"
    assert [stored(q, i) for i in (first, second, kept, pending)] == [None, None, State.FAILED, State.PENDING]
    assert q.stats()["failed"] == 1 and q.verify() == []
    assert call("queue_delete", str(kept)) == "Deleted 1 failed job.\n"
    assert q.stats()["failed"] == 0


def test_delete_names_each_id_it_did_not_delete_and_fails(q: Queue) -> None:
    dead, other = dead_letter(q, "a"), dead_letter(q, "b")
    pending = t.add.delay(1, 2).job_id
    running = q.claim(t.add.delay(3, 4).job_id)
    assert running is not None
    done = q.claim(t.add.delay(5, 6).job_id)
    assert done is not None
    done.ack(11)
    before = {i: q.job(i) for i in (other, pending, running.job_id, done.job_id)}
    argv = [str(i) for i in (pending, dead, 123456789, running.job_id, done.job_id)]
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("queue_delete", *argv, stdout=out)
    assert out.getvalue() == "Deleted 1 failed job.\n"
    assert str(caught.value) == (
        "4 of 5 jobs not deleted:\n"
        f"  job {pending} is pending, not failed: queue_delete deletes dead letters only.\n"
        "  no job 123456789: it never existed, or was purged or vacuumed.\n"
        f"  job {running.job_id} is running, not failed: queue_delete deletes dead letters only.\n"
        f"  job {done.job_id} is done, not failed: queue_delete deletes dead letters only."
    )
    assert stored(q, dead) is None
    assert {i: q.job(i) for i in before} == before  # the others exactly as they were
    assert q.stats()["failed"] == 1 and q.verify() == []


def test_delete_needs_an_id(q: Queue) -> None:
    with pytest.raises(CommandError, match=r"^Error: the following arguments are required: JOB_ID$"):
        call("queue_delete")
