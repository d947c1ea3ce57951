"""``--json`` of the commands that change the store (queue_retry, queue_delete, queue_purge): one JSON object
saying what was done, with counts, the ids where they are bounded and each job skipped with its reason; and
a duration said in days says "1 day", not "1 days". On both stores; what the store holds is read back."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queue_max_django.conf import get_queue, reset
from queue_max_django.engine import Queue, State
from tests.django.test_commands_write import ADD, DAY, Terminal, call, dead_letter, on_disk, q
from tests.django.test_odd_rows_admin import corrupted_dead_letter
from tests.testapp import tasks as t

__all__ = ["q"]  # the fixture


def as_json(*argv: str) -> Any:
    return json.loads(call(*argv, "--json"))


def refused_json(*argv: str) -> tuple[Any, str]:
    """A command that exits with status 1: its JSON (still printed) and its error."""
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(*argv, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue()), str(caught.value)


def gone(job_id: int) -> bool:
    reset()
    return get_queue().job(job_id) is None


# ------------------------------------------------------------------------------------------ queue_retry


def test_retry_one_job_as_json(q: Queue) -> None:
    job_id = dead_letter(q)
    assert as_json("queue_retry", "--job-id", str(job_id)) == {
        "retried": 1,
        "job_ids": [str(job_id)],
        "skipped": [],
    }
    assert on_disk(job_id).state is State.PENDING

    data, error = refused_json("queue_retry", "--job-id", str(job_id))  # pending now: not a dead letter
    reason = f"job {job_id} is pending, not failed: only dead letters can be retried."
    assert data == {"retried": 0, "job_ids": [], "skipped": [{"job_id": str(job_id), "reason": reason}]}
    assert error == reason
    assert on_disk(job_id).state is State.PENDING


def test_retry_all_as_json_counts_and_names_the_skipped_corrupted_ones(q: Queue, store_kind: str) -> None:
    broken = corrupted_dead_letter(q, store_kind)
    retried = [dead_letter(q) for _ in range(2)]
    data = as_json("queue_retry", "--all")
    assert data["retried"] == 2 and "job_ids" not in data  # --all may retry millions: counted, not listed
    (skipped,) = data["skipped"]
    assert skipped["job_id"] == str(broken) and skipped["reason"].startswith("corrupted: ")
    assert [on_disk(each).state for each in retried] == [State.PENDING, State.PENDING]
    assert on_disk(broken).state is State.FAILED


# ------------------------------------------------------------------------------------------ queue_delete


def test_delete_as_json_names_what_it_deleted_and_what_it_skipped(q: Queue) -> None:
    failed = [dead_letter(q) for _ in range(2)]
    pending = t.add.delay(1, 2).job_id
    data, error = refused_json("queue_delete", str(failed[0]), str(pending), str(failed[1]))
    reason = f"job {pending} is pending, not failed: queue_delete deletes dead letters only."
    assert data == {
        "deleted": 2,
        "job_ids": [str(failed[0]), str(failed[1])],
        "skipped": [{"job_id": str(pending), "reason": reason}],
    }
    assert error == f"1 of 3 jobs not deleted:\n  {reason}"
    assert gone(failed[0]) and gone(failed[1]) and on_disk(pending).state is State.PENDING

    last = dead_letter(get_queue())  # q was closed by a read from a fresh store
    assert as_json("queue_delete", str(last)) == {"deleted": 1, "job_ids": [str(last)], "skipped": []}
    assert gone(last)


# ------------------------------------------------------------------------------------------ queue_purge


def test_purge_as_json(q: Queue) -> None:
    failed = [dead_letter(q) for _ in range(3)]
    pending = t.add.delay(1, 2).job_id
    asked = {"status": "failed", "queue": None, "days": None}
    assert as_json("queue_purge", "--status", "failed", "--dry-run") == {
        **asked,
        "dry_run": True,
        "cancelled": False,
        "matched": 3,
        "removed": 0,
    }
    assert not any(gone(each) for each in failed)
    assert as_json("queue_purge", "--status", "failed", "--yes") == {
        **asked,
        "dry_run": False,
        "cancelled": False,
        "matched": 3,
        "removed": 3,
    }
    assert all(gone(each) for each in failed) and on_disk(pending).state is State.PENDING


def test_purge_of_one_queue_as_json(q: Queue) -> None:
    mail = t.send_mail.delay("a@example.com").job_id
    other = t.add.delay(1, 2).job_id
    data = as_json("queue_purge", "--status", "pending", "--queue", "mail", "--days", "0", "--yes")
    assert (data["queue"], data["days"], data["matched"], data["removed"]) == ("mail", 0.0, 1, 1)
    assert gone(mail) and on_disk(other).state is State.PENDING


@pytest.mark.parametrize(("answer", "removed"), [("y\n", 1), ("n\n", 0)])
def test_purge_as_json_asks_on_standard_error(
    q: Queue, monkeypatch: pytest.MonkeyPatch, answer: str, removed: int
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    job_id = dead_letter(q)
    out, err = io.StringIO(), io.StringIO()
    call_command("queue_purge", "--status", "failed", "--json", stdout=out, stderr=err)
    assert err.getvalue() == "Delete 1 failed job? This cannot be undone. [y/N] "
    data = json.loads(out.getvalue())  # nothing but the JSON on standard output
    assert (data["cancelled"], data["matched"], data["removed"]) == (not removed, 1, removed)
    assert gone(job_id) is bool(removed)


# ------------------------------------------------------------------------------------------ durations


@pytest.mark.parametrize(("days", "said"), [("1", "1 day"), ("2", "2 days"), ("0.5", "0.5 days")])
def test_purge_says_one_day_not_one_days(q: Queue, days: str, said: str) -> None:
    past = Queue(q.path, clock=lambda: time.time() - 3 * DAY)
    try:
        past.put({"args": [1, 2], "kwargs": {}}, name=ADD)
    finally:
        past.close()
    assert call("queue_purge", "--status", "pending", "--days", days, "--dry-run") == (
        f"Would remove 1 pending job older than {said} (dry run: nothing removed).\n"
    )
