"""Tags from the Django layer (issue 34): ``@task(tags=)``, ``.using(tags=)`` (added to the task's), checked
before anything is written; ``.map()`` and workflows carry them; ``queue_list --tag`` (repeatable: all of
them) with the listing's filters and paging, ``queue_show``; on every store."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django import chain
from queue_max_django.conf import get_queue
from queue_max_django.engine import InvalidJob, QueueEmpty, State
from queue_max_django.running.runner import run_job
from queue_max_django.tasks import Task
from tests.testapp import tasks as t
from tests.testapp import workflow_tasks as w

Configure = Callable[..., override_settings]


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[None]:
    with queue_max():
        yield


def call(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def tags_of(job_id: int | None) -> tuple[str, ...]:
    assert job_id is not None
    found = get_queue().job(job_id)
    assert found is not None
    return found.tags


def _work(order_id: int) -> int:
    return order_id


def test_task_tags_and_using_tags_are_added_and_stored_with_every_job() -> None:
    billing = Task(_work, name="tests.billing", tags=["billing"])
    assert billing.tags == ("billing",)
    tagged = billing.using(tags=["order:42", "billing"])
    assert tagged.tags == ("billing", "order:42") and billing.tags == ("billing",)
    assert tags_of(tagged.delay(42).job_id) == ("billing", "order:42")
    assert tags_of(t.add.using(tags=("vip",)).delay(1, 2).job_id) == ("vip",)
    assert tags_of(t.add.delay(1, 2).job_id) == ()
    mapped = t.add.using(tags=["batch:7"]).map([1, 3], 2)
    assert [tags_of(result.job_id) for result in mapped] == [("batch:7",), ("batch:7",)]
    kept = t.add.using(tags=["a"]).using(metadata={"note": 1})
    assert tags_of(kept.delay(1, 1).job_id) == ("a",) and kept.metadata == {"note": 1}


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ("order:42", "must be a list or tuple of str"),
        ([42], "must be a str"),
        ([""], "cannot be empty"),
        (["x" * 65], "at most 64 characters"),
        (["has space"], "only ASCII letters"),
        (["é"], "only ASCII letters"),
        ([f"t{n}" for n in range(17)], "at most 16 tags"),
    ],
)
def test_bad_tags_are_refused_before_anything_is_written(tags: Any, message: str) -> None:
    before = get_queue().stats()["total"]
    with pytest.raises(InvalidJob, match=message):
        t.add.using(tags=tags)
    with pytest.raises(InvalidJob, match=message):
        Task(_work, name="tests.bad", tags=tags)
    with pytest.raises(InvalidJob, match=message):  # through the engine's own put too
        get_queue().put("x", metadata={"_tags": tags})
    assert get_queue().stats()["total"] == before
    with pytest.raises(InvalidJob, match="at most 16 tags"):  # the task's and the call's together
        Task(_work, name="tests.many", tags=[f"a{n}" for n in range(10)]).using(
            tags=[f"b{n}" for n in range(7)]
        )


def test_queue_list_by_tag_filters_pages_and_prints_json() -> None:
    q = get_queue()
    first = t.add.using(tags=["order:42"]).delay(1, 1).job_id
    second = t.send_mail.using(tags=["order:42", "tenant:acme"]).delay("ann@example.com").job_id
    t.add.using(tags=["order:43"]).delay(1, 1)
    assert first is not None and second is not None
    out = call("queue_list", "--tag", "order:42")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "STATE", "QUEUE", "TASK", "ENQUEUED", "(UTC)", "TAGS"]
    assert [line.split()[0] for line in lines[1:3]] == [str(second), str(first)]  # newest first
    assert "order:42 tenant:acme" in lines[1]
    assert lines[-1] == "2 jobs tagged order:42, newest first."
    assert (
        call("queue_list", "--tag", "order:42", "--tag", "tenant:acme")
        .splitlines()[1]
        .startswith(str(second))
    )
    assert str(first) not in call("queue_list", "--tag", "order:42", "--queue", "mail")
    assert call("queue_list", "--tag", "order:42", "--status", "done") == "No done jobs tagged order:42.\n"
    held = q.claim(first)
    assert held is not None
    held.ack(2)
    assert call("queue_list", "--tag", "order:42", "--status", "done").splitlines()[1].startswith(str(first))
    page = json.loads(call("queue_list", "--tag", "order:42", "--limit", "1", "--json"))
    assert [job["job_id"] for job in page["jobs"]] == [str(second)] and page["next_after"] == str(second)
    assert page["jobs"][0]["tags"] == ["order:42", "tenant:acme"] and page["tags"] == ["order:42"]
    rest = json.loads(call("queue_list", "--tag", "order:42", "--after", page["next_after"], "--json"))
    assert [job["job_id"] for job in rest["jobs"]] == [str(first)] and rest["next_after"] is None
    assert call("queue_list", "--tag", "nothing") == "No jobs tagged nothing.\n"
    with pytest.raises(CommandError, match="only ASCII letters"):
        call("queue_list", "--tag", "bad tag")
    with pytest.raises(CommandError, match="--status is required"):
        call("queue_list")
    shown = call("queue_show", str(second))
    assert any(line.split() == ["tags", "order:42,", "tenant:acme"] for line in shown.splitlines()), shown
    assert any(line.split() == ["tags", "none"] for line in call("queue_show", str(q.put("x"))).splitlines())
    assert q.tagged("order:42", state=State.PENDING)[0].job_id == second


def test_workflow_steps_keep_their_tags_and_are_found_by_them() -> None:
    result = chain(w.wf_add.using(tags=["order:42"]).s(1, 2), w.wf_add.using(tags=["order:42"]).s(10)).delay()
    queue = get_queue()
    assert [job.job_id for job in queue.tagged("order:42")] == [int(result.nodes[0].job_id or 0)]
    ran = 0
    while True:
        try:
            record = queue.get(0.3)
        except QueueEmpty:
            break
        run_job(record)
        ran += 1
    assert ran == 2 and result.status == "succeeded"
    assert [job.tags for job in queue.tagged("order:42", state="done")] == [("order:42",), ("order:42",)]


def test_queue_list_where_walks_a_state_or_a_tag_and_stops_at_its_scan_limit() -> None:
    q = get_queue()
    acme = t.add.using(metadata={"tenant": "acme"}).delay(42, 1).job_id
    other = t.add.using(metadata={"tenant": "other"}).delay(43, 1).job_id
    tagged = t.add.using(tags=["vip"], metadata={"tenant": "acme"}).delay(42, 2).job_id
    lines = call("queue_list", "--status", "pending", "--where", "args.a:42").splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == [str(acme), str(tagged)]
    assert lines[-1] == "2 jobs matched, 3 examined."
    both = call("queue_list", "--status", "pending", "--where", "meta.tenant:acme", "--where", "args.b:1")
    assert both.splitlines()[-1] == "1 job matched, 3 examined."
    assert str(tagged) in call("queue_list", "--tag", "vip", "--where", "meta.tenant:acme")
    where = ("queue_list", "--status", "pending", "--where", "args.a:43", "--json")
    stopped = json.loads(call(*where, "--scan-limit", "1"))
    assert stopped["stopped"] and stopped["examined"] == 1 and stopped["jobs"] == []
    assert stopped["next_after"] == str(acme)
    rest = json.loads(call(*where, "--after", stopped["next_after"]))
    assert [job["job_id"] for job in rest["jobs"]] == [str(other)] and not rest["stopped"]
    with pytest.raises(CommandError, match=r"args\.NAME:VALUE"):
        call("queue_list", "--status", "pending", "--where", "order=42")
    with pytest.raises(CommandError, match="--where needs --status"):
        call("queue_list", "--where", "args.a:42")
    assert q.job(acme or 0) is not None
