"""The admin's queue pages with Django's test client: every page renders what the store holds, escapes what
jobs carry, and answers 403 without the permission, 404 for a job that is not there."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterator
from html import unescape
from pathlib import Path

import pytest
from django.test import Client, override_settings

from queue_max_django.admin import dashboard, display, listing
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State, parse_rate
from queue_max_django.periodic import periodic_task
from tests.admin_clients import logged_in
from tests.dead_letters import fail

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"
XSS = "<script>alert(1)</script>"

pytestmark = pytest.mark.django_db
needs_django_tasks = pytest.mark.skipif(
    importlib.util.find_spec("django.tasks") is None, reason="django.tasks needs Django >= 6.0"
)


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0, MAX_RETRIES=1):
        yield get_queue()


def staff(*codenames: str, username: str = "staff") -> Client:
    """A client logged in as a staff user (not superuser) with these permissions of the queue's model."""
    return logged_in(*codenames, username=username)


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def ids_listed(html: str) -> list[int]:
    return [int(value) for value in re.findall(r'<tr data-job-id="(\d+)"', html)]


# ---------------------------------------------------------------------------- the index and the dashboard


def test_the_admin_index_lists_queue_max_for_a_user_with_the_view_permission(admin_client: Client) -> None:
    html = page(admin_client, "/admin/")
    assert "Queue Max" in html
    assert f'href="{BASE}"' in html
    assert 'href="/admin/queue_max_django/job/add/"' not in html  # jobs are enqueued by code
    assert f'href="{BASE}"' in page(staff("view_job"), "/admin/")


def test_a_staff_user_without_the_view_permission_sees_no_entry_and_gets_403(store: Queue) -> None:
    job_id = fail(store, 1)
    client = staff()
    assert "Queue Max" not in page(client, "/admin/")
    for url in (BASE, f"{BASE}panels/", f"{BASE}failed/", f"{BASE}pending/", f"{BASE}{job_id}/"):
        assert client.get(url).status_code == 403, url
    for action in ("retry", "delete"):
        response = client.post(
            f"{BASE}failed/action/", {"action": action, "scope": "selected", "ids": [job_id]}
        )
        assert response.status_code == 403
    assert client.post(f"{BASE}{job_id}/retry/").status_code == 403
    assert store.job(job_id).state is State.FAILED  # type: ignore[union-attr]


def test_anonymous_users_are_sent_to_the_login_page() -> None:
    response = Client().get(BASE)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_the_dashboard_shows_counts_per_state_queue_and_shard(admin_client: Client, store: Queue) -> None:
    store.put_many([{"args": [n], "kwargs": {}} for n in range(3)], queue="default", name="a.task")
    store.put({"args": [], "kwargs": {}}, queue="mail", delay=3600)
    fail(store, 1)
    html = page(admin_client, BASE)
    assert "<h1>Queue dashboard</h1>" in html
    assert 'data-state="pending">3<' in html
    assert 'data-state="scheduled">1<' in html
    assert 'data-state="failed">1<' in html
    assert ">Dead letters</a>" in html and ">Waiting</a>" in html
    assert re.search(r'<th scope="row">mail</th>\s*<td[^>]*><a href="[^"]*pending/\?queue=mail">0</a>', html)
    assert html.count('<th scope="row">') >= store.shard_count  # one row per shard
    assert 'data-recent="failed-minute">1<' in html
    assert 'data-recent="done-hour">0<' in html
    assert "No live worker." in html and "No circuit breaker." in html and "No rate limit." in html


def test_the_dashboard_shows_workers_breakers_and_rate_limits(admin_client: Client, store: Queue) -> None:
    store.report_worker("w-1", stale_after=60.0, pid=4242, host="box", queues=("mail",), threads=2,
                        current_jobs=(77,), processed=9, failed=1, started_at=0.0)  # fmt: skip
    store.set_circuit_breaker("name:flaky.task", threshold=1, recovery_timeout=300.0)
    job_id = store.put({"args": [], "kwargs": {}}, name="flaky.task")
    record = store.claim(job_id)
    assert record is not None
    record.nack("down", permanent=True)
    store.set_rate_limit("queue:mail", parse_rate("10/m"))
    html = page(admin_client, BASE)
    assert '<td><code>w-1</code></td><td>box</td><td class="qm-number">4242</td>' in html
    assert "lag by up to one heartbeat" in html
    assert f'href="{BASE}77/"' in html
    assert "name:flaky.task" in html and "qm-breaker-open" in html
    assert re.search(r"1 / 1</td>\s*<td>(4 min 5\d s|5 min 0 s)</td>", html)  # the next trial
    assert re.search(r"<td>\d+ days \d+ h</td></tr>", html)  # up since 1970
    assert "queue:mail" in html and re.search(r"<td class=\"qm-number\">10\.0</td>", html)


def test_the_dashboard_warns_of_queues_no_live_worker_serves(admin_client: Client, store: Queue) -> None:
    store.put(1, queue="mail")
    store.put(2, queue="default", delay=60)
    html = page(admin_client, BASE)
    assert "No live worker takes jobs from the queue <code>mail</code> (1 waiting, 0 scheduled)" in html
    assert "<code>default</code> (0 waiting, 1 scheduled)" in html and "no worker is running at all" in html
    store.report_worker("w-1", stale_after=60.0, pid=1, host="box", queues=("mail",), threads=1)
    html = page(admin_client, BASE)
    assert "the queue <code>mail</code>" not in html and "the queue <code>default</code>" in html
    assert "no worker is running at all" not in html
    store.report_worker("w-2", stale_after=60.0, pid=2, host="box", queues=None, threads=1)
    assert 'data-testid="unserved"' not in page(admin_client, BASE)


def test_the_dashboard_lists_periodic_tasks_their_runs_and_the_leading_scheduler(
    admin_client: Client,
    store: Queue,
    scratch_registry: None,  # the tasks below leave with the test
) -> None:

    @periodic_task(interval=300, name="admin.periodic.cleanup")
    def cleanup() -> None: ...

    @periodic_task(cron="not a cron", name="admin.periodic.broken")
    def broken() -> None: ...

    html = page(admin_client, BASE)
    table = html.split('data-testid="periodic">')[1].split("</table>")[0]
    assert "<td>admin.periodic.cleanup</td><td><code>every 300s</code></td>" in table
    assert '<td>admin.periodic.broken</td><td><span class="qm-error">invalid: ' in table
    assert table.count("<td>—</td>") == 2 and "never</td>" in table  # nothing ran; broken never runs
    assert "No worker's scheduler leads now: no tick is enqueued" in html
    done = store.put({"args": [], "kwargs": {}}, name="admin.periodic.cleanup")
    store.get(0).ack(None)
    assert store.acquire_lock("periodic-scheduler", "web-1:77:abc", ttl=60.0)
    html = page(admin_client, BASE)
    assert f'(<a href="{BASE}{done}/">job {done}</a>)' in html
    assert "Ticks are enqueued by the scheduler of worker <code>web-1:77:abc</code>" in html


def test_without_periodic_tasks_the_dashboard_has_no_such_panel(admin_client: Client) -> None:
    assert 'data-testid="periodic"' not in page(admin_client, BASE)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.04, "0.0 s"), (4.25, "4.2 s"), (38.9, "38 s"), (185, "3 min 5 s"), (7800, "2 h 10 min"),
     (86400 + 4 * 3600, "1 day 4 h"), (3 * 86400, "3 days 0 h"), (-1, "0.0 s")],
)  # fmt: skip
@pytest.mark.store_neutral
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert display.duration(seconds) == text


def test_the_panels_endpoint_renders_the_numbers_alone(admin_client: Client, store: Queue) -> None:
    store.put(1)
    html = page(admin_client, f"{BASE}panels/")
    assert 'data-state="pending">1<' in html
    assert "<html" not in html  # a fragment for the refresh control to swap in
    assert "data-refresh-url" in page(admin_client, BASE)


def test_recent_counts_stop_at_their_cap(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(4):
        fail(store, n)
    monkeypatch.setattr(dashboard, "RECENT_LIMIT", 3)
    assert 'data-recent="failed-hour">3+<' in page(admin_client, BASE)


# ---------------------------------------------------------------------------- lists


def test_the_dead_letter_list_shows_task_queue_shard_error_attempts(
    admin_client: Client, store: Queue
) -> None:
    job_id = fail(store, 5, queue="mail")
    html = page(admin_client, f"{BASE}failed/")
    assert ids_listed(html) == [job_id]
    job = store.job(job_id)
    assert job is not None
    row = html[html.index(f'data-job-id="{job_id}"') :].split("</tr>")[0]
    task = '<td class="qm-task">tests.<wbr>testapp.<wbr>tasks.<wbr>add</td>'  # it may wrap after a dot
    for text in (task, "<td>mail</td>", "ValueError", "boom 5", ">1/1</td>"):
        assert text in row
    sharded = store.shard_count > 1  # the PostgreSQL store has one shard: no shard column
    assert (f"<td>{job.shard}</td>" in row, '<th scope="col">Shard</th>' in html) == (sharded, sharded)
    assert '<strong data-testid="count">1</strong>' in html


@pytest.mark.parametrize("state", ["pending", "scheduled", "running", "done"])
def test_each_state_has_its_list(admin_client: Client, store: Queue, state: str) -> None:
    job_id = store.put(
        {"args": [state], "kwargs": {}}, name="x.task", delay=60 if state == "scheduled" else None
    )
    if state in ("running", "done"):
        record = store.get(0)
        if state == "done":
            record.ack("ok")
    html = page(admin_client, f"{BASE}{state}/")
    assert ids_listed(html) == [job_id]
    cancellable = state in ("pending", "scheduled", "running")  # running: with the cancel_job permission
    assert ("Cancel" in html) == cancellable
    assert 'name="ids"' in html if cancellable else 'name="ids"' not in html


def test_a_running_job_says_how_long_it_has_run(admin_client: Client, store: Queue) -> None:
    job_id = store.put({"args": [], "kwargs": {}}, name="t.x")
    assert store.claim(job_id) is not None
    listed = page(admin_client, f"{BASE}running/")
    assert re.search(r'<th scope="col">Running for</th>', listed)
    assert re.search(r'data-testid="running-for">\d+\.\d s<', listed)
    assert re.search(
        r'<dt>Running for</dt><dd data-testid="running-for">\d+\.\d s<',
        page(admin_client, f"{BASE}{job_id}/"),
    )
    assert "Running for" not in page(admin_client, f"{BASE}pending/")


def test_keyset_pages_walk_every_dead_letter_once(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "PAGE_SIZE", 3)
    ids = [fail(store, n) for n in range(7)]
    seen: list[int] = []
    url: str | None = f"{BASE}failed/"
    while url:
        html = page(admin_client, url)
        seen.extend(ids_listed(html))
        found = re.search(r'<a href="([^"]+)" class="qm-next">', html)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == sorted(ids, reverse=True)  # newest first, no job twice, none left out


def test_filters_by_task_queue_error_type_shard_and_search(admin_client: Client, store: Queue) -> None:
    a = fail(store, "alpha", name="t.alpha", queue="default")
    b = fail(store, "beta", name="t.beta", queue="mail")
    job = store.put({"args": [], "kwargs": {}}, name="t.gamma", max_retries=0)
    record = store.claim(job)
    assert record is not None
    record.nack(KeyError("missing"))
    shard_of_b = store.job(b).shard  # type: ignore[union-attr]

    def listed(query: str) -> set[int]:
        return set(ids_listed(page(admin_client, f"{BASE}failed/?{query}")))

    assert listed("") == {a, b, job}
    assert listed("task=t.alpha") == {a}
    assert listed("queue=mail") == {b}
    assert listed("error_type=KeyError") == {job}
    assert listed("q=BOOM+BETA") == {b}  # error text, any case
    assert listed("q=gamma") == {job}  # task name
    assert b in listed(f"shard={shard_of_b}")
    assert all(store.job(i).shard == shard_of_b for i in listed(f"shard={shard_of_b}"))  # type: ignore[union-attr]
    assert listed("task=t.alpha&queue=mail") == set()
    assert "No dead letters match these filters." in page(admin_client, f"{BASE}failed/?task=nothing")


def summary(html: str) -> str:
    """The sentence above a list, tags and runs of white space taken out."""
    found = re.search(r'<p class="qm-summary">(.*?)</p>', html, re.S)
    assert found is not None
    return " ".join(re.sub(r"<[^>]+>", "", found.group(1)).split())


def test_a_filtered_list_counts_its_matches_against_the_total(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "PAGE_SIZE", 2)
    for n in range(3):
        fail(store, n, name="t.alpha")
    for n in range(2):
        fail(store, n, name="t.beta")
    html = page(admin_client, f"{BASE}failed/")
    assert summary(html).startswith("5 dead letters.")
    # by task (the engine filters, a scan counts), by search (tested here): more than one page either way
    for query in ("task=t.alpha", "q=ALPHA"):
        html = page(admin_client, f"{BASE}failed/?{query}")
        assert summary(html).startswith("3 match the filters (5 dead letters in all)."), query
        assert "Select all 3 dead letters that match" in html, query
    html = page(admin_client, f"{BASE}failed/?task=t.beta")  # one page holds them all: counted from it
    assert summary(html).startswith("2 match the filters (5 dead letters in all).")
    assert "data-select-matching" not in html  # the page's own box selects them all
    html = page(admin_client, f"{BASE}failed/?task=t.alpha&q=2")
    assert summary(html).startswith("1 matches the filters (5 dead letters in all).")
    assert "Select all 5 dead letters<" in page(admin_client, f"{BASE}failed/")  # no filter: the whole list
    assert ">0 of 1 selected<" in html  # the counter, before a script updates it


def sidebar(html: str) -> dict[str, list[str]]:
    """The sidebar's choices by filter, tags taken out: {"task": ["All", "t.alpha (3)", ...], ...}."""
    found = {}
    for key, body in re.findall(r'<details data-filter-title="(\w+)" open>(.*?)</details>', html, re.S):
        items = re.findall(r"<li[^>]*>(.*?)</li>", body, re.S)
        found[key] = [" ".join(re.sub(r"<[^>]+>", "", item).split()) for item in items]
    return found


def test_the_sidebar_filters_by_task_queue_and_error_type_with_counts(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        fail(store, n, name="t.alpha")
    for n in range(2):
        job_id = store.put({"args": [n], "kwargs": {}}, name="t.beta", queue="mail", max_retries=0)
        store.claim(job_id).nack(KeyError("k"))  # type: ignore[union-attr]
    html = page(admin_client, f"{BASE}failed/")
    assert sidebar(html) == {
        "task": ["All", "t.alpha (3)", "t.beta (2)"],
        "queue": ["All", "default (3)", "mail (2)"],
        "error_type": ["All", "ValueError (3)", "KeyError (2)"],
    }
    assert "Counted among all dead letters." in html
    link = re.search(r'<a href="([^"]+)">mail <span', html)
    assert link is not None and "queue=mail" in link.group(1)
    html = page(admin_client, link.group(1).replace("&amp;", "&"))
    assert len(ids_listed(html)) == 2 and '<li class="selected"><a href="' in html
    assert re.search(r'<li class="selected"><a href="[^"]+">mail <span', html)
    assert "Clear all filters" in html
    assert "error_type" not in sidebar(page(admin_client, f"{BASE}pending/"))  # dead letters only
    monkeypatch.setattr(listing, "FACET_SCAN_LIMIT", 2)  # only the newest two (t.beta) are counted
    html = page(admin_client, f"{BASE}failed/")
    tasks = sidebar(html)["task"]
    assert tasks[:2] == ["All", "t.beta (2)"] and "tests.testapp.tasks.add" in tasks  # registered, uncounted
    assert "Counted among the newest 2 dead letters" in html


def test_counts_and_empty_lists_speak_of_jobs_of_a_state(admin_client: Client, store: Queue) -> None:
    fail(store, 1)
    assert summary(page(admin_client, f"{BASE}failed/")).startswith("1 dead letter.")
    assert summary(page(admin_client, f"{BASE}pending/")).startswith("0 waiting jobs.")
    html = page(admin_client, f"{BASE}pending/?task=nothing")
    assert "No waiting jobs match these filters." in html
    assert summary(html).startswith("0 match the filters (0 waiting jobs in all).")
    assert "No done jobs." in page(admin_client, f"{BASE}done/")


def test_a_search_that_stops_at_its_limit_offers_to_search_further(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "PAGE_SCAN_LIMIT", 2)
    monkeypatch.setattr(listing, "BATCH", 1)
    wanted = fail(store, "needle")
    others = [fail(store, f"hay {n}") for n in range(3)]  # newer: listed (and scanned) first
    html = page(admin_client, f"{BASE}failed/?q=needle")
    assert ids_listed(html) == [] and "Looked at 2 jobs without filling this page" in html
    further = re.search(r'<a href="([^"]+)">search further</a>', html)
    assert further is not None and f"after={others[1]}" in further.group(1)
    html = page(admin_client, further.group(1).replace("&amp;", "&"))
    assert ids_listed(html) == [wanted]


def test_sorting_by_failed_at_says_when_it_saw_only_the_newest(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "PAGE_SCAN_LIMIT", 2)
    monkeypatch.setattr(listing, "BATCH", 1)
    ids = [fail(store, f"x{n}") for n in range(3)]
    html = page(admin_client, f"{BASE}failed/?o=-failed_at")
    assert ids_listed(html) == [ids[2], ids[1]]
    assert "Sorted among the newest 2 dead letters (by job id) only" in html


def test_sorting_by_failed_at_differs_from_job_id_order(admin_client: Client, store: Queue) -> None:
    first = store.put({"args": [], "kwargs": {}}, name="t.x", max_retries=0)
    second = fail(store, 2)
    record = store.claim(first)  # enqueued first, failed last
    assert record is not None
    record.nack("late")
    assert ids_listed(page(admin_client, f"{BASE}failed/")) == [second, first]
    assert ids_listed(page(admin_client, f"{BASE}failed/?o=-failed_at")) == [first, second]
    assert ids_listed(page(admin_client, f"{BASE}failed/?o=failed_at")) == [second, first]
    assert ids_listed(page(admin_client, f"{BASE}failed/?o=reverse")) == [first, second]
    assert "Listed by failed at, newest first." in page(admin_client, f"{BASE}failed/?o=-failed_at")


def test_a_page_after_a_vanished_job_starts_over_with_a_message(admin_client: Client, store: Queue) -> None:
    gone = store.put(1)
    store.cancel(gone)
    response = admin_client.get(f"{BASE}pending/?after={gone}", follow=True)
    assert response.status_code == 200
    assert "back to the first page" in response.content.decode()


def test_junk_query_values_never_give_a_500(admin_client: Client, store: Queue) -> None:
    fail(store, 1)
    for query in ("after=abc", "after=-5", "after=99999999999999999999999", "shard=x", "o=nonsense",
                  "o=-failed_at&after=1:2:3", "shard=999"):  # fmt: skip
        assert admin_client.get(f"{BASE}failed/?{query}").status_code in (200, 302), query
    assert admin_client.get(f"{BASE}pending/?o=-failed_at").status_code == 200
    assert admin_client.get(f"{BASE}nonsense/").status_code == 404


# ---------------------------------------------------------------------------- a job's page


def test_a_dead_letters_page_shows_arguments_error_traceback_attempts(
    admin_client: Client, store: Queue
) -> None:
    job_id = store.put({"args": [1, {"deep": [1, 2]}], "kwargs": {"to": "a@b"}}, name="t.x", max_retries=1)
    for attempt in range(2):
        record = store.get(0)
        try:
            raise RuntimeError(f"attempt {attempt} broke")
        except RuntimeError as exc:
            record.nack(exc, delay=0)
    html = page(admin_client, f"{BASE}{job_id}/")
    assert f"<h1>Job {job_id}</h1>" in html
    assert 'data-testid="state">dead letter<' in html
    assert '<code>1</code></th><td><pre class="qm-pre">{\n  &quot;deep&quot;: [\n    1,' in html  # JSON
    assert '<code>to=</code></th><td><pre class="qm-pre">&quot;a@b&quot;</pre>' in html  # t.x: unknown here
    assert "By position (the task is not registered in this process" in html
    assert "<h2>Error</h2>" in html and "failed for good after 2 of 2 attempts" in html
    no_retry = page(admin_client, f"{BASE}{fail(store, 1)}/")
    assert 'data-testid="attempts">1 of 1 allowed <span class="qm-quiet">(no retries)' in no_retry
    assert 'data-testid="attempts">2 of 2 allowed <span class="qm-quiet">(the first and 1 retry)' in html
    assert 'data-testid="traceback">Traceback (most recent call last)' in html
    assert "attempt 0 broke" in html and "attempt 1 broke" in html  # the error of each attempt
    assert "Retry" in html and "Delete" in html and "Cancel job" not in html


def test_payloads_results_errors_and_tracebacks_are_escaped(admin_client: Client, store: Queue) -> None:
    dead = fail(store, XSS, name=XSS)
    done = store.put({"args": [XSS], "kwargs": {XSS: XSS}}, name="t.x")
    record = store.get(0)
    record.ack({"html": XSS})
    raw = store.put(XSS)
    for job_id in (dead, done, raw):
        html = page(admin_client, f"{BASE}{job_id}/")
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for state in ("failed", "done", "pending"):
        html = page(admin_client, f"{BASE}{state}/?q={XSS}" if state == "failed" else f"{BASE}{state}/")
        assert "<script>alert" not in html


def test_a_done_jobs_page_shows_its_result_and_only_enqueue_again(admin_client: Client, store: Queue) -> None:
    job_id = store.put({"args": [], "kwargs": {}}, name="t.x")
    store.get(0).ack({"sum": 3})
    html = page(admin_client, f"{BASE}{job_id}/")
    assert 'data-testid="result">{\n  &quot;sum&quot;: 3\n}<' in html  # JSON, as the arguments are
    assert re.findall(r'type="submit" value="([^"]+)"', html.split('id="content-main"')[1]) == [
        "Enqueue again"
    ]


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        (
            {"total": 3, "items": ["a", None, True]},
            '{\n  "total": 3,\n  "items": [\n    "a",\n    null,\n    true\n  ]\n}',
        ),
        ("<b>ok</b> é", '"<b>ok</b> é"'),
        (None, "null"),
        ([1, b"\x00"], "[\n  1,\n  \"b'\\\\x00'\"\n]"),  # inside JSON: a value JSON has not, by its repr
        ({1: "one"}, "{1: 'one'}"),  # JSON would turn the key into text: Python's repr instead
        (b"\x00\x01", "b'\\x00\\x01'"),  # the whole value: its repr, not a JSON text of it
    ],
)
def test_a_result_is_shown_as_json_like_the_arguments_and_by_its_repr_only_where_json_cannot(
    admin_client: Client, store: Queue, result: object, shown: str
) -> None:
    job_id = store.put({"args": [], "kwargs": {}}, name="t.x")
    store.get(0).ack(result)
    html = page(admin_client, f"{BASE}{job_id}/")
    found = re.search(r'<pre class="qm-pre" data-testid="result">(.*?)</pre>', html, re.S)
    assert found is not None and unescape(found.group(1)) == shown
    assert "<b>ok" not in html  # escaped


class Upstream(Exception):
    """An error class outside builtins: stored by its dotted path."""


def test_error_types_are_listed_by_class_name_with_the_dotted_path_in_a_title(
    admin_client: Client, store: Queue
) -> None:
    from queue_max_django.engine.cancels import Cancelled

    fail(store, 1)  # ValueError, a builtin: stored by its name
    for error in (Cancelled("cancelled by admin"), Upstream("503")):
        job_id = store.put({"args": [], "kwargs": {}}, name="t.x", max_retries=0)
        store.claim(job_id).nack(error)  # type: ignore[union-attr]
    cancelled_path = "queue_max_django.engine.cancels.Cancelled"
    upstream_path = f"{__name__}.Upstream"
    assert {job.error_type for job in store.dead_letters()} == {
        "ValueError",
        cancelled_path,
        upstream_path,
    }
    html = page(admin_client, f"{BASE}failed/")
    cells = re.findall(r'<td class="qm-error-type">(.*?)</td>', html, re.S)
    assert sorted(cells) == sorted(
        [
            "<span>ValueError</span>",
            # a cancel is not a failure: its own badge in the list (the filter below keeps its class name)
            '<span class="qm-state qm-state-cancelled" data-testid="cancelled" title="Cancelled: not a '
            'failure">Cancelled</span>',
            f'<span title="{upstream_path}">Upstream</span>',
        ]
    )
    assert sorted(sidebar(html)["error_type"]) == sorted(
        ["All", "ValueError (1)", "Cancelled (1)", "Upstream (1)"]
    )
    assert f'<span title="{cancelled_path}">Cancelled</span>' in html.split('data-testid="sidebar"')[1]
    # the filter still takes the stored name, and the job's page names the whole path
    html = page(admin_client, f"{BASE}failed/?error_type={cancelled_path}")
    [job_id] = ids_listed(html)
    html = page(admin_client, f"{BASE}{job_id}/")
    assert f"<strong>{cancelled_path}</strong>: " in html
    assert f'<td><span title="{cancelled_path}">Cancelled</span></td>' in html  # the attempts table


def test_a_dead_letters_error_cell_holds_the_full_text_in_its_title(
    admin_client: Client, store: Queue
) -> None:
    long_error = "upstream said: " + "x" * 600 + " <end>"
    job_id = store.put({"args": [], "kwargs": {}}, name="t.x", max_retries=0)
    store.claim(job_id).nack(RuntimeError(long_error))  # type: ignore[union-attr]
    html = page(admin_client, f"{BASE}failed/")
    cell = re.search(r'<td class="qm-error" title="([^"]*)"><span class="qm-clamp">([^<]*)</span></td>', html)
    assert cell is not None
    assert unescape(cell.group(1)) == long_error  # on hover: all of it
    assert unescape(cell.group(2)) == long_error[:399] + "…"  # in the cell: clamped to three lines by CSS


def test_an_unfinished_jobs_page_refreshes_its_panel_until_the_job_finishes(
    admin_client: Client, store: Queue
) -> None:
    """The job page of a waiting or running job ticks its refresh box (a scheduled one offers it); the part
    the box fetches (``?panel=1``) is the page's panel alone, and says stop once the job has finished."""
    running = store.put({"args": [1], "kwargs": {}}, name="t.x")
    record = store.get(0)
    scheduled = store.put({"args": [2], "kwargs": {}}, name="t.x", delay=600)
    html = page(admin_client, f"{BASE}{running}/")
    control = re.search(
        r'<div class="qm-refresh" data-refresh-url="([^"]+)" data-refresh-target="qm-job-panel"', html
    )
    assert control is not None and unescape(control.group(1)) == f"{BASE}{running}/?panel=1"
    assert '<input type="checkbox" data-refresh-auto value="5" checked>' in html
    assert "queue_max_django/admin/refresh.js" in html
    panel = page(admin_client, f"{BASE}{running}/?panel=1")
    assert "<html" not in panel and "<h1" not in panel and "messagelist" not in panel  # the part alone
    assert 'data-job-state="running"' in panel and "data-refresh-stop" not in panel
    assert 'data-testid="state">running<' in panel and 'id="qm-job-panel"' in html
    assert '<input type="checkbox" data-refresh-auto value="5">' in page(admin_client, f"{BASE}{scheduled}/")

    record.ack({"rows": 3})
    panel = page(admin_client, f"{BASE}{running}/?panel=1")
    assert 'data-job-state="done"' in panel
    assert 'data-refresh-stop="The job has finished: refreshing stopped."' in panel
    assert 'data-testid="result">{' in panel
    html = page(admin_client, f"{BASE}{running}/")
    assert "data-refresh-url" not in html and "refresh.js" not in html  # a finished job's page stays put
    page(admin_client, f"{BASE}{fail(store, 1) + 1}/?panel=1", status=404)  # gone: the script stops


def arguments_shown(html: str) -> list[tuple[str, str]]:
    """(label, value) of each row of a job page's arguments, unescaped."""
    table = html.split('data-testid="arguments">')[1].split("</table>")[0]
    rows = re.findall(
        r'<th scope="row"><code>(.*?)</code></th><td><pre class="qm-pre">(.*?)</pre>', table, re.S
    )
    return [(label, unescape(value)) for label, value in rows]


def test_arguments_are_shown_by_the_tasks_parameter_names_as_json(admin_client: Client, store: Queue) -> None:
    mail = store.put(
        {"args": ["a@b.test"], "kwargs": {"subject": "hi"}}, name="tests.testapp.tasks.send_mail"
    )
    echo = store.put({"args": [1, b"\x00"], "kwargs": {"k": None}}, name="tests.testapp.tasks.echo")
    misfit = store.put({"args": [1, 2, 3], "kwargs": {}}, name="tests.testapp.tasks.add")  # will fail: 3 args
    html = page(admin_client, f"{BASE}{mail}/")
    assert arguments_shown(html) == [("to", '"a@b.test"'), ("subject", '"hi"')]
    assert "By the task's parameter names; values as JSON." in html
    assert arguments_shown(page(admin_client, f"{BASE}{echo}/")) == [
        ("*args", "[\n  1,\n  \"b'\\\\x00'\"\n]"),
        ("**kwargs", '{\n  "k": null\n}'),
    ]
    assert arguments_shown(page(admin_client, f"{BASE}{misfit}/")) == [("0", "1"), ("1", "2"), ("2", "3")]
    assert "<td><code>&quot;a@b.test&quot;, subject=&quot;hi&quot;</code></td>" in page(
        admin_client, f"{BASE}pending/"
    )


@needs_django_tasks
def test_a_django_tasks_job_is_shown_as_a_task_call(
    admin_client: Client, store: Queue, queue_max: Configure
) -> None:
    from tests.testapp import django_tasks as dt_tasks

    backend = {  # stored at once: the test's transaction (admin_client's database) never commits
        "default": {
            "BACKEND": "queue_max_django.backend.QueueMaxBackend",
            "OPTIONS": {"ENQUEUE_ON_COMMIT": False},
        }
    }
    with override_settings(TASKS=backend):
        plain = dt_tasks.add.enqueue(2, b=3)
        with_context = dt_tasks.with_context.enqueue(7)
        plain_html = page(admin_client, f"{BASE}{plain.id}/")
        context_html = page(admin_client, f"{BASE}{with_context.id}/")
    assert "Not a task" not in plain_html and 'data-testid="payload"' not in plain_html
    assert "through the backend <code>default</code>" in plain_html
    assert arguments_shown(plain_html) == [("a", "2"), ("b", "3")]
    assert arguments_shown(context_html) == [("value", "7")]  # the context is the framework's, not stored
    assert ">2, b=3</code>" in page(admin_client, f"{BASE}pending/")


def test_an_error_of_an_earlier_attempt_is_labelled_so(admin_client: Client, store: Queue) -> None:
    job_id = store.put({"args": [], "kwargs": {}}, name="t.x", max_retries=3)
    store.get(0).nack(ValueError("first try"))
    html = page(admin_client, f"{BASE}{job_id}/")
    assert "<h2>The last attempt failed</h2>" in html and "attempt 2 of 4" in html
    assert 'data-testid="attempts">1 of 4 allowed <span class="qm-quiet">(the first and 3 retries)' in html
    assert "<h2>Error</h2>" not in html
    store.get(0).ack("fine")
    html = page(admin_client, f"{BASE}{job_id}/")
    assert "<h2>Error</h2>" not in html and "first try" in html  # in the attempts table at least
    assert "<h2>An earlier attempt failed</h2>" in html  # both stores keep the last failed attempt's error
    assert "succeeded at attempt 2 of 4: this is the error of an earlier attempt, not of the job" in html
    assert 'data-testid="error">first try<' in html


def test_a_raw_engine_payload_is_shown_as_stored(admin_client: Client, store: Queue) -> None:
    job_id = store.put([1, 2, 3])
    assert 'data-testid="payload">[1, 2, 3]<' in page(admin_client, f"{BASE}{job_id}/")


@pytest.mark.parametrize("job_id", ["12345", "0", "99999999999999999999999999"])
def test_a_missing_job_is_a_404(admin_client: Client, job_id: str) -> None:
    assert admin_client.get(f"{BASE}{job_id}/").status_code == 404


def test_actions_shown_follow_the_users_permissions(store: Queue) -> None:
    job_id = fail(store, 1)
    viewer = page(staff("view_job"), f"{BASE}{job_id}/")
    assert 'value="Retry"' not in viewer and "Delete" not in viewer
    changer = page(staff("view_job", "change_job", username="changer"), f"{BASE}{job_id}/")
    assert 'value="Retry"' in changer and "Delete…" not in changer
    deleter = page(staff("view_job", "delete_job", username="deleter"), f"{BASE}{job_id}/")
    assert 'value="Retry"' not in deleter and "Delete…" in deleter
    listing = page(staff("view_job", username="viewer2"), f"{BASE}failed/")
    assert 'name="ids"' not in listing  # no action, so no checkboxes


@pytest.mark.lmdb  # a store of one shard and one of three
@pytest.mark.parametrize("shards", [1, 3])
def test_shards_are_shown_only_where_the_store_has_several(
    admin_client: Client, queue_max: Configure, tmp_path: Path, shards: int
) -> None:
    """The shard table, the shard filter and column, and the job page's shard: only with several shards."""
    with queue_max(DATA_DIR=tmp_path / f"store-{shards}", SHARDS=shards):
        queue = get_queue()
        job_id = queue.put({"args": [], "kwargs": {}}, name="a.task")
        pages = {
            "dashboard": page(admin_client, BASE),
            "list": page(admin_client, f"{BASE}pending/"),
            "job": page(admin_client, f"{BASE}{job_id}/"),
        }
    shown = {
        "dashboard": "<caption>Shards</caption>" in pages["dashboard"],
        "list": 'name="shard"' in pages["list"] and '<th scope="col">Shard</th>' in pages["list"],
        "job": "<dt>Shard</dt>" in pages["job"],
    }
    assert shown == dict.fromkeys(shown, shards > 1)
    assert ids_listed(pages["list"]) == [job_id]
