"""Schedules kept in the store (issue 34): their checks before anything is written, ``manage.py
queue_schedule``, and the scheduler ticking them beside code-declared ones (one path, one unique key per
tick; pauses and resumes), on every store. Real workers: tests/worker/test_stored_schedules.py."""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable, Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State
from queue_max_django.periodic import periodic_task
from queue_max_django.running.registry import registry
from queue_max_django.scheduling import editing
from queue_max_django.scheduling.entries import entries, entry, last_runs
from queue_max_django.worker.scheduler import Scheduler
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation

pytestmark = pytest.mark.django_db
Configure = Callable[..., override_settings]
START = 1_800_000_000.0  # a whole minute
SEND = "tests.testapp.tasks.send_mail"


@pytest.fixture(autouse=True)
def store(queue_max: Configure, scratch_registry: None) -> Iterator[Queue]:  # its tasks leave with the test
    with queue_max():
        yield get_queue()


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command("queue_schedule", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def refused(*argv: str) -> str:
    with pytest.raises(CommandError) as caught:
        call(*argv)
    return str(caught.value)


def declare() -> None:
    @periodic_task(interval=300, name="code.cleanup")
    def cleanup() -> None: ...


# ------------------------------------------------------------------------------------------ the command


def test_add_list_pause_resume_remove_with_json(store: Queue) -> None:
    declare()
    said = call("add", "mail ops", SEND, "--args", '["ops@example.com"]', "--kwargs", '{"subject": "daily"}',
                "--cron", "0 6 * * *", "--tz", "Europe/Berlin", "--queue", "default",
                "--priority", "3")  # fmt: skip
    assert said.strip() == "added schedule 'mail ops'"
    kept = store.schedule("mail ops")
    assert kept is not None and kept.task == SEND and kept.args == ["ops@example.com"]
    assert kept.kwargs == {"subject": "daily"} and kept.cron == "0 6 * * *" and kept.tz == "Europe/Berlin"
    assert kept.queue == "default" and kept.priority == 3 and kept.enabled
    assert kept.changed_by is not None and kept.changed_by.startswith("queue_schedule command (")

    listed = json.loads(call("list", "--json"))["schedules"]
    assert [(item["name"], item["kind"], item["status"]) for item in listed] == [
        ("code.cleanup", "code", "active"),
        ("mail ops", "stored", "active"),
    ]
    assert listed[1]["next_runs"][0].endswith(("T05:00:00+00:00", "T04:00:00+00:00"))  # 06:00 in Berlin
    assert len(listed[1]["next_runs"]) == 5
    table = call("list")
    assert "code.cleanup" in table and "every 300s" in table and "mail ops" in table

    out = json.loads(call("pause", "mail ops", "--until", "2h", "--json"))
    assert out["schedule"]["status"] == "paused" and out["schedule"]["paused_until"] is not None
    assert "paused 'code.cleanup' until resumed" in call("pause", "code.cleanup")
    statuses = {item["name"]: item["status"] for item in json.loads(call("list", "--json"))["schedules"]}
    assert statuses == {"code.cleanup": "disabled", "mail ops": "paused"}
    call("resume", "code.cleanup")
    call("resume", "mail ops")
    statuses = {item["name"]: item["status"] for item in json.loads(call("list", "--json"))["schedules"]}
    assert statuses == {"code.cleanup": "active", "mail ops": "active"}

    assert call("remove", "mail ops").strip() == "removed schedule 'mail ops'"
    assert store.schedule("mail ops") is None
    assert [name for name in store.schedule_names()] == ["code.cleanup"]  # its pause state stays
    del registry._tasks["code.cleanup"]  # gone from the code: its pause state can be removed
    assert "code.cleanup" not in call("list")
    call("remove", "code.cleanup")
    assert store.schedule_names() == []


def test_the_command_refuses_bad_input_and_writes_nothing(store: Queue) -> None:
    declare()
    assert "unknown task 'no.such.task'" in refused("add", "x", "no.such.task", "--interval", "60")
    assert "the arguments do not fit" in refused("add", "x", SEND, "--interval", "60")  # 'to' is missing
    assert "unexpected keyword argument 'cc'" in refused(
        "add", "x", SEND, "--args", '["a@b"]', "--kwargs", '{"cc": 1}', "--interval", "60"
    )
    assert "bad schedule: cron '61 * * * *': the minute field" in refused(
        "add", "x", SEND, "--args", '["a@b"]', "--cron", "61 * * * *"
    )
    assert "bad schedule: interval must be a positive" in refused(
        "add", "x", SEND, "--args", '["a@b"]', "--interval", "-5"
    )
    assert "unknown time zone 'Mars/Base'" in refused(
        "add", "x", SEND, "--args", '["a@b"]', "--cron", "@daily", "--tz", "Mars/Base"
    )
    with pytest.raises(CommandError, match="one of the arguments --interval --cron is required"):
        call("add", "x", SEND)
    assert store.schedule_names() == []
    call("add", "x", SEND, "--args", '["a@b"]', "--interval", "60")
    assert "a schedule named 'x' exists already" in refused(
        "add", "x", SEND, "--args", '["c@d"]', "--interval", "9"
    )
    assert store.schedule("x").args == ["a@b"]  # type: ignore[union-attr]
    assert "taken by a schedule declared in code" in refused(
        "add", "code.cleanup", SEND, "--args", '["a@b"]', "--interval", "60"
    )
    assert "declared in code (@periodic_task) and cannot be removed" in refused("remove", "code.cleanup")
    assert "no schedule named 'nope'" in refused("pause", "nope")
    assert "no schedule named 'nope'" in refused("remove", "nope")
    with pytest.raises(CommandError, match="neither a duration"):
        call("pause", "x", "--until", "soonish")


def test_a_code_declared_schedule_is_never_edited(store: Queue) -> None:
    declare()
    made = editing.build("code.cleanup", SEND, args=["a@b"], interval=60)
    with pytest.raises(editing.ScheduleError, match="cannot be edited here"):
        editing.edit(store, made)
    with pytest.raises(editing.ScheduleError, match="taken by a schedule declared in code"):
        editing.add(store, made)
    assert store.schedule_names() == []


# ------------------------------------------------------------------------------------------ the ticks


def tick_jobs(queue: Queue, name: str) -> list[float]:
    return sorted(job.enqueued_at for state in State for job in queue.jobs(state, name=name, limit=1000))


def test_a_stored_schedule_ticks_through_the_same_path_once_per_period(location: StoreLocation) -> None:
    clock = FakeClock(START + 1)
    with location.open_queue(clock=clock) as queue:
        editing.add(queue, editing.build("every minute", SEND, args=["ops@x"], kwargs={"subject": "s"},
                                         interval=60, priority=7))  # fmt: skip
        a, b = (Scheduler(queue, owner, tasks=lambda: [], clock=clock, lock_ttl=10.0) for owner in "ab")
        for _ in range(int(200 / 0.5)):  # 200 s in steps of 0.5 s, both schedulers stepping
            a.step()
            b.step()
            clock.advance(0.5)
        jobs = [job for state in State for job in queue.jobs(state, name=SEND, limit=100)]
        assert sorted(job.enqueued_at for job in jobs) == [START + 60, START + 120, START + 180]
        assert {(job.priority, job.queue) for job in jobs} == {(7, "mail")}
        assert all(job.metadata["_schedule"] == "every minute" for job in jobs)
        assert jobs[0].payload == {"args": ["ops@x"], "kwargs": {"subject": "s"}}
        found = entry(queue, "every minute")
        assert found is not None and [job.job_id for job in last_runs(queue, found)] == sorted(
            (job.job_id for job in jobs), reverse=True
        )

        # paused: nothing; resumed: the ticks of the pause are not caught up
        editing.pause(queue, "every minute", by="ann")
        clock.advance(130)
        for scheduler in (a, b):
            scheduler.step()
        assert len(tick_jobs(queue, SEND)) == 3
        editing.resume(queue, "every minute", by="ann")
        a.step(), b.step()
        assert len(tick_jobs(queue, SEND)) == 3
        clock.now = (clock.now // 60 + 1) * 60 + 0.1  # the next tick
        a.step(), b.step()
        assert len(tick_jobs(queue, SEND)) == 4


def test_a_paused_code_declared_schedule_does_not_tick(location: StoreLocation) -> None:
    declare()
    code = registry.get("code.cleanup")
    clock = FakeClock(START + 1)
    with location.open_queue(clock=clock) as queue:
        a = Scheduler(queue, "a", tasks=lambda: [code], clock=clock)  # type: ignore[list-item]
        editing.pause(queue, "code.cleanup", until=START + 400)
        while clock.now < START + 700:
            a.step()
            clock.advance(0.5)
        assert tick_jobs(queue, "code.cleanup") == [START + 600]  # 300 was paused; none before 400 later


def test_entries_read_the_store_once(store: Queue) -> None:
    editing.add(store, editing.build("a", SEND, args=["x"], interval=60))
    assert [item.name for item in entries(store)] == ["a"]
    assert entries(store)[0].next_runs(START)[0] == dt.datetime.fromtimestamp(START + 60, dt.UTC)
