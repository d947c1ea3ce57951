"""queue_stats, queue_list and queue_check: their text and ``--json`` output, options and error paths."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, Record, State
from queue_max_django.management.common import when
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ADD, MAIL, FAIL = t.add.name, t.send_mail.name, t.fail_always.name


def call(*argv: str) -> str:
    """Run a command; -> its stdout (its stderr must be empty)."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


@dataclasses.dataclass
class Store:
    """One job in each state (and a second pending one in queue "mail"), on one shard."""

    queue: Queue
    pending: int
    mail: int
    scheduled: int
    running: Record
    done: int
    failed: int


@pytest.fixture
def store(queue_max: Configure) -> Iterator[Store]:
    with queue_max(SHARDS=1):
        q = get_queue()
        pending = t.add.delay(1, 2).job_id
        mail = t.send_mail.delay("ann@example.com").job_id
        scheduled = t.add.schedule_in(3600, 5, 5).job_id
        running = q.claim(t.add.delay(2, 2).job_id)
        done = t.add.delay(3, 3).job_id
        finished = q.claim(done)
        failed = t.fail_always.delay("x").job_id
        dead = q.claim(failed)
        assert running is not None and finished is not None and dead is not None
        finished.ack(6)
        dead.nack(ValueError("boom"), permanent=True)
        yield Store(q, pending, mail, scheduled, running, done, failed)


def job(q: Queue, job_id: int) -> Any:
    found = q.job(job_id)
    assert found is not None
    return found


# ------------------------------------------------------------------------------------------ queue_stats


def test_stats_prints_a_table_per_state_queue_shard_worker_breaker_and_limit(store: Store) -> None:
    q = store.queue
    t.limited.delay()  # sets its rate limit (10/m) on the store
    t.guarded.delay()  # sets its circuit breaker (threshold 2, 30 s)
    q.report_worker(
        "w-1",
        stale_after=3600,
        pid=4242,
        host="box",
        started_at=1_700_000_000.0,
        queues=("default", "mail"),
        threads=4,
        current_jobs=(store.running.job_id,),
        processed=7,
        failed=1,
    )
    (worker,) = q.workers()
    (pause,) = q.pause("mail", reason="provider down", by="ops")
    assert call("queue_stats") == (
        f"Store {q.path} (1 shard)\n"
        "\n"
        "STATE       JOBS\n"
        "pending        4\n"
        "scheduled      1\n"
        "running        1\n"
        "done           1\n"
        "failed         1\n"
        "cancelled      0\n"
        "total puts     8\n"
        "\n"
        "Queues\n"  # one shard: no "(all shards)", no table of shards
        "QUEUE    PENDING  SCHEDULED  RUNNING\n"
        "default        3          1        1\n"
        "mail           1          0        0\n"
        "\n"
        "Workers (1 live; figures as of each one's last heartbeat)\n"
        "WORKER   PID  HOST  THREADS  QUEUES        RUNNING  PROCESSED  FAILED  STARTED (UTC)        "
        "LAST HEARTBEAT (UTC)\n"
        f"w-1     4242  box         4  default,mail        1          7       1  2023-11-14 22:13:20  "
        f"{when(worker.last_heartbeat)}\n"
        "\n"
        "Circuit breakers\n"
        "KEY                               STATE   FAILURES  THRESHOLD  TIMEOUT (S)  TRIAL IN (S)\n"
        "name:tests.testapp.tasks.guarded  closed         0          2         30.0  -\n"
        "\n"
        "Rate limits\n"
        "KEY                               RATE  TOKENS\n"
        "name:tests.testapp.tasks.limited  10/m    10.0\n"
        "\n"
        "Paused\n"
        "QUEUE  TASK   SINCE (UTC)          UNTIL (UTC)  BY   REASON\n"
        f"mail   (all)  {when(pause.paused_at)}  resumed      ops  provider down\n"
        "\n"
        "Concurrency limits\n"
        "(none)\n"
    )


def test_stats_says_none_for_empty_sections(queue_max: Configure) -> None:
    with queue_max(SHARDS=2):
        get_queue()  # a new store (queue_stats makes none: test_commands_no_store.py)
        text = call("queue_stats")
        queues = "Queues (all shards)" if get_queue().shard_count > 1 else "Queues"  # PostgreSQL: one shard
    for section in (
        queues,
        "Workers (0 live; figures as of each one's last heartbeat)",
        "Circuit breakers",
        "Rate limits",
        "Concurrency limits",
    ):
        assert f"\n{section}\n(none)\n" in text
    assert text.endswith("\nPaused\n(none)\n\nConcurrency limits\n(none)\n")
    assert "total puts     0\n" in text


def test_stats_json_holds_the_state_counts_at_the_top_level(store: Store) -> None:
    q = store.queue
    t.limited.delay()
    running = [store.running.job_id]
    q.report_worker("w-1", stale_after=3600, pid=1, host="box", threads=2, current_jobs=running)
    (pause,) = q.pause("default", task="app.export", duration=60, reason="slow disk", by="ops")
    data = json.loads(call("queue_stats", "--json"))
    (worker,) = q.workers()
    assert data == {
        "pending": 3,
        "scheduled": 1,
        "running": 1,
        "done": 1,
        "failed": 1,
        "cancelled": 0,
        "total": 7,
        "store": q.path,
        "shard_count": 1,
        "shards": [
            {
                "shard": 0,
                "pending": 3,
                "scheduled": 1,
                "running": 1,
                "done": 1,
                "failed": 1,
                "total": 7,
                "cancelled": 0,
            }
        ],
        "queues": {
            "default": {"pending": 2, "scheduled": 1, "running": 1},
            "mail": {"pending": 1, "scheduled": 0, "running": 0},
        },
        "workers": [
            {
                "worker_id": "w-1",
                "pid": 1,
                "host": "box",
                "started_at": worker.started_at,
                "last_heartbeat": worker.last_heartbeat,
                "stale_after": 3600.0,
                "queues": None,
                "threads": 2,
                "current_jobs": [str(store.running.job_id)],  # ids as strings, as everywhere in JSON
                "processed": 0,
                "failed": 0,
            }
        ],
        "circuit_breakers": {},
        "rate_limits": {"name:tests.testapp.tasks.limited": {"rate": "10/m", "remaining": 10.0}},
        "paused": [
            {
                "queue": "default",
                "task": "app.export",
                "paused_at": pause.paused_at,
                "until": pause.paused_at + 60,
                "reason": "slow disk",
                "by": "ops",
            }
        ],
        "concurrency_limits": {},
    }
    assert {key: data[key] for key in ("pending", "scheduled", "running", "done", "failed", "total")} == {
        key: q.stats()[key] for key in ("pending", "scheduled", "running", "done", "failed", "total")
    }


@pytest.mark.lmdb  # a store of three shards
def test_stats_of_one_shard(queue_max: Configure) -> None:
    with queue_max(SHARDS=3):
        q = get_queue()
        q.put_many_to_shard(1, [{"args": [1, 2], "kwargs": {}}] * 2, name=ADD)
        q.put_many_to_shard(2, [{"args": [1, 2], "kwargs": {}}] * 5, name=ADD)
        data = json.loads(call("queue_stats", "--json", "--shard", "1"))
        assert (data["pending"], data["total"], data["shard"], data["shard_count"]) == (2, 2, 1, 3)
        assert data["shards"] == [
            {
                "shard": 1,
                "pending": 2,
                "scheduled": 0,
                "running": 0,
                "done": 0,
                "failed": 0,
                "total": 2,
                "cancelled": 0,
            }
        ]
        assert data["queues"] == {"default": {"pending": 7, "scheduled": 0, "running": 0}}  # store-wide
        text = call("queue_stats", "--shard", "2")
        assert text.startswith(f"Store {q.path} (shard 2 of 3 shards)\n")
        assert "pending        5\n" in text
        with pytest.raises(
            CommandError, match=r"^--shard must be from 0 to 2: this store has 3 shards, not 3\.$"
        ):
            call("queue_stats", "--shard", "3")


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses of ``queue_stats --watch`` between its redraws, taken at once."""
    taken: list[float] = []
    monkeypatch.setattr("queue_max_django.management.commands.queue_stats.sleep", taken.append)
    return taken


def test_stats_watch_redraws_until_its_iterations_run_out(store: Store, pauses: list[float]) -> None:
    lines = call("queue_stats", "--json", "--watch", "0.5", "--iterations", "3").splitlines()
    assert len(lines) == 3
    assert [json.loads(line)["pending"] for line in lines] == [2, 2, 2]
    text = call("queue_stats", "--watch", "2", "--iterations", "2")
    assert text.count("Rate limits\n") == 2
    assert "\x1b[" not in text  # no screen clearing off a terminal
    assert pauses == [0.5, 0.5, 2.0]


@pytest.mark.parametrize("interval", ["0", "0.49", "-1", "nan", "inf", "soon"])
def test_stats_refuses_a_watch_interval_too_short_to_read(interval: str) -> None:
    with pytest.raises(
        CommandError,
        match=rf"^Error: argument --watch: '{interval}' is not an interval to redraw at: give a number of "
        r"seconds from 0\.5 up \(a shorter one redraws faster than anyone can read\)$",
    ):
        call("queue_stats", "--watch", interval, "--iterations", "1")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stats_watch_clears_the_screen_on_a_terminal(store: Store, pauses: list[float]) -> None:
    out = Terminal()
    call_command("queue_stats", "--watch", "1", "--iterations", "2", stdout=out)
    frames = out.getvalue().split("\x1b[H\x1b[2J")
    assert len(frames) == 3 and frames[0] == "" and frames[1] == frames[2].rstrip("\n") + "\n\n"


def test_stats_watch_ends_quietly_on_ctrl_c(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(seconds: float) -> None:
        assert seconds == 5.0
        raise KeyboardInterrupt

    monkeypatch.setattr("queue_max_django.management.commands.queue_stats.sleep", interrupt)
    lines = call("queue_stats", "--json", "--watch", "5").splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["failed"] == 1 and lines[1] == ""


def test_stats_on_bad_settings_is_a_command_error(data_dir: Path) -> None:
    with (
        override_settings(QUEUE_MAX={"DATA_DIR": data_dir, "LEASE_TIM": 3}),
        pytest.raises(CommandError, match=r"(?s)QUEUE_MAX is misconfigured.*queue_max_django\.E002"),
    ):
        call("queue_stats")
    assert not data_dir.exists()


# ------------------------------------------------------------------------------------------ queue_list


def test_list_prints_a_table_of_the_jobs_in_one_state(store: Store) -> None:
    q = store.queue
    a, m = job(q, store.pending), job(q, store.mail)
    assert (
        call("queue_list", "--status", "pending")
        == _table(
            ["ID", "QUEUE", "TASK", "PRIORITY", "ATTEMPTS", "ENQUEUED (UTC)"],
            [
                [str(m.job_id), "mail", MAIL, "10", "0/1", when(m.enqueued_at)],  # priority 10 comes first
                [str(a.job_id), "default", ADD, "0", "0/4", when(a.enqueued_at)],
            ],
            right=(0, 3),
        )
        + "2 pending jobs.\n"
    )


def _table(headers: list[str], rows: list[list[str]], right: tuple[int, ...]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip() + "\n"

    return line(headers) + "".join(line(r) for r in rows)


def test_list_shows_the_column_of_each_state(store: Store) -> None:
    q = store.queue
    failed = job(q, store.failed)
    text = call("queue_list", "--status", "failed")
    assert text.splitlines()[0].endswith("ENQUEUED (UTC)       ERROR")
    assert text.splitlines()[1].endswith(f"{when(failed.enqueued_at)}  ValueError: boom")
    assert text.endswith("\n1 failed job.\n")
    attempts = text.splitlines()[0].index("ATTEMPTS")  # made / allowed: a dead letter out of tries shows n/n
    assert text.splitlines()[1][attempts:].split()[0] == f"{failed.attempts}/{failed.max_retries + 1}"
    scheduled = job(q, store.scheduled)
    assert call("queue_list", "--status", "scheduled").splitlines()[1].endswith(when(scheduled.eta))
    running = job(q, store.running.job_id)
    assert call("queue_list", "--status", "running").splitlines()[1].endswith(when(running.started_at))
    done = job(q, store.done)
    assert call("queue_list", "--status", "done").splitlines()[1].endswith(when(done.finished_at))


@pytest.mark.parametrize(
    ("word", "state"),
    [("waiting", "pending"), ("dead-letters", "failed"), ("Dead letters", "failed"), ("DONE", "done")],
)
def test_list_takes_the_admin_s_words_for_states(store: Store, word: str, state: str) -> None:
    assert call("queue_list", "--status", word, "--json") == call("queue_list", "--status", state, "--json")
    assert json.loads(call("queue_list", "--status", word, "--json"))["status"] == state


def test_list_filters_by_queue_and_task_and_says_when_there_are_none(store: Store) -> None:
    assert call("queue_list", "--status", "pending", "--queue", "mail").endswith("\n1 pending job.\n")
    text = call("queue_list", "--status", "pending", "--task", ADD)
    assert f"  {ADD}  " in text and MAIL not in text
    assert call("queue_list", "--status", "pending", "--queue", "nope") == "No pending jobs.\n"


def test_list_of_an_unknown_task_warns_with_close_names_only_when_nothing_matches(store: Store) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "queue_list", "--status", "pending", "--task", "tests.testapp.tasks.ad", stdout=out, stderr=err
    )
    assert out.getvalue() == "No pending jobs.\n"
    assert err.getvalue().startswith(
        "Warning: no task 'tests.testapp.tasks.ad' is registered in this process and no pending jobs "
        f"matched. Did you mean '{ADD}', "  # the closest first
    )
    store.queue.put({"args": [], "kwargs": {}}, name="old.tasks.removed")  # a task this process does not know
    listed = json.loads(call("queue_list", "--status", "pending", "--task", "old.tasks.removed", "--json"))
    assert [job["task"] for job in listed["jobs"]] == ["old.tasks.removed"]
    assert (
        call("queue_list", "--status", "done", "--task", MAIL) == "No done jobs.\n"
    )  # registered: no warning


def test_list_json_has_the_jobs_under_jobs(store: Store) -> None:
    data = json.loads(call("queue_list", "--status", "failed", "--json"))
    failed = job(store.queue, store.failed)
    assert data["status"] == "failed" and data["count"] == 1 and data["next_after"] is None
    (listed,) = data["jobs"]
    assert listed["job_id"] == str(store.failed) and listed["state"] == "failed" and listed["task"] == FAIL
    assert listed["payload"] == {"args": ["x"], "kwargs": {}}
    assert (listed["error"], listed["error_type"]) == ("boom", "ValueError")
    assert listed["shard"] == failed.shard == 0
    assert listed["enqueued_at"] == failed.enqueued_at and listed["retries"] == failed.retries == 1
    assert listed["errors"] == [["ValueError", "boom"]]


def test_list_json_writes_bytes_as_base64(queue_max: Configure) -> None:
    with queue_max():
        job_id = get_queue().put({"args": [b"\x00\xff"], "kwargs": {}}, name=t.record_call.name)
        (listed,) = json.loads(call("queue_list", "--status", "pending", "--json"))["jobs"]
        assert listed["job_id"] == str(job_id)
        assert listed["payload"] == {"args": ["base64:AP8="], "kwargs": {}}


def test_list_pages_with_limit_and_after(queue_max: Configure) -> None:
    with queue_max(SHARDS=1):
        ids = [str(r.job_id) for r in t.add.map(range(5), 1)]
        first = json.loads(call("queue_list", "--status", "pending", "--limit", "2", "--json"))
        assert [j["job_id"] for j in first["jobs"]] == ids[:2] and first["next_after"] == ids[1]
        text = call("queue_list", "--status", "pending", "--limit", "2", "--after", ids[1])
        assert text.endswith(f"\n2 pending jobs; more may follow: --after {ids[3]}.\n")
        last = json.loads(call("queue_list", "--status", "pending", "--after", ids[3], "--json"))
        assert [j["job_id"] for j in last["jobs"]] == ids[4:] and last["next_after"] is None
        newest = json.loads(call("queue_list", "--status", "pending", "--newest-first", "--json"))
        assert [j["job_id"] for j in newest["jobs"]] == ids[::-1]


def test_list_json_writes_ids_as_strings_that_read_back(queue_max: Configure, store_kind: str) -> None:
    """A JSON number past 2**53 is rounded by JavaScript and jq (as a double): ids are strings, and the
    string as ``jq`` prints it without ``-r`` (in its double quotes) is taken back as the id."""
    with queue_max(SHARDS=1):
        ids = [r.job_id for r in t.add.map(range(3), 1)]
        if store_kind == "lmdb":  # its ids hold the time in µs: past the integers a double holds exactly
            assert min(ids) > 2**53  # (jq: ...470980 -> ...471000); PostgreSQL's are small for a long time
        text = call("queue_list", "--status", "pending", "--limit", "1", "--json")
        assert f'"job_id": "{ids[0]}"' in text and f'"next_after": "{ids[0]}"' in text
        page = json.loads(text)
        quoted = json.dumps(page["next_after"])  # "459766814235994627", quotes and all
        after = json.loads(call("queue_list", "--status", "pending", "--after", quoted, "--json"))
        assert [int(j["job_id"]) for j in after["jobs"]] == ids[1:]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            (),
            r"^Error: --status is required: a job state: one of pending, scheduled, running, done, failed "
            r"\(or as the admin says them: waiting, dead-letters\)\.$",
        ),
        (
            ("--status", "queued"),
            r"^unknown status 'queued': use one of pending, scheduled, running, done, ",
        ),
        (("--status", "failed", "--limit", "0"), r"argument --limit: invalid positive_int value: '0'"),
        (("--status", "failed", "--after", "12.0"), r"^Error: argument --after: '12\.0' is not a job id: "),
        # pending jobs list in claim order, which a job gone from the store no longer has (failed jobs list by
        # id, and page on after a gone one: rule_paging)
        (("--status", "pending", "--after", "999999999"), r"^after=999999999: that job no longer exists"),
    ],
)
def test_list_errors(store: Store, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call("queue_list", *argv)


# ------------------------------------------------------------------------------------------ queue_check


@pytest.mark.lmdb  # its report of shards and indexes (test_pg_commands.py checks the PostgreSQL store)
def test_check_reports_a_consistent_store(store: Store) -> None:
    q = store.queue
    assert call("queue_check") == f"The store {q.path} is consistent (1 shards, 6 jobs).\n"
    data = json.loads(call("queue_check", "--json"))
    assert data == {"ok": True, "store": q.path, "shards": 1, "jobs": 6, "problems": []}


def _drop_index_entry(q: Queue, job_id: int) -> None:
    """Break the store as a bug would: remove a pending job's index entry, keep its record."""
    found = q.job(job_id)
    assert found is not None and found.state is State.PENDING
    shard = q._store._shards[found.shard]
    with shard.env.env.begin(write=True) as txn:
        cursor = txn.cursor(db=shard.indexes[State.PENDING])
        entries = [key for key in cursor.iternext(values=False) if key.endswith(job_id.to_bytes(8, "big"))]
        assert len(entries) == 1
        assert txn.delete(entries[0], db=shard.indexes[State.PENDING])


@pytest.mark.lmdb  # breaks an LMDB index (test_pg_commands.py breaks the PostgreSQL store's counters)
def test_check_fails_with_a_report_when_the_store_is_inconsistent(store: Store) -> None:
    q = store.queue
    _drop_index_entry(q, store.pending)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^1 problem\(s\) in the store\. Stop the workers"):
        call_command("queue_check", stdout=out)
    assert out.getvalue() == (
        f"The store {q.path} has 1 problem(s):\n  shard 0: the pending index lacks job {store.pending}\n"
    )
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("queue_check", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "ok": False,
        "store": q.path,
        "shards": 1,
        "jobs": 5,  # the counts come from the indexes, which lack the job
        "problems": [f"shard 0: the pending index lacks job {store.pending}"],
    }
