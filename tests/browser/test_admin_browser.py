"""The admin's queue pages in headless Chromium: log in, watch the dashboard refresh, filter the dead letters,
retry two through the bulk action and its confirmation, and open a job whose argument is a script that must
not run. Screenshots of the dashboard, the dead-letter list and a job page are saved on the way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
from django.contrib.auth.models import User

from queue_max_django.admin import listing
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State, parse_rate
from tests.browser.samples import fill_samples

if TYPE_CHECKING:
    from playwright.sync_api import Dialog, Page
    from pytest_django.live_server_helper import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("store_settings")]

XSS = "<script>alert(1)</script>"
XSS_IMG = '<img src="x" onerror="window.__xss = 1">'


def dead_letter(store: Queue, name: str, args: list[Any], error: Exception, queue: str = "default") -> int:
    job_id = store.put({"args": args, "kwargs": {}}, name=name, queue=queue, max_retries=0)
    record = store.claim(job_id)
    assert record is not None
    try:
        raise error
    except Exception as exc:
        record.nack(exc)
    return job_id


def fill_store(store: Queue) -> dict[str, Any]:
    """A store worth looking at: dead letters of two tasks, waiting and scheduled work, a worker, a tripped
    breaker and a rate limit."""
    fetches = [
        dead_letter(store, "shop.tasks.fetch_prices", [f"https://shop.test/{n}"], TimeoutError(f"read {n}s"))
        for n in range(3)
    ]
    mails = [
        dead_letter(store, "shop.tasks.send_receipt", [n], ValueError(f"no address for order {n}"), "mail")
        for n in range(2)
    ]
    script = dead_letter(store, "shop.tasks.render", [XSS, XSS_IMG], RuntimeError(XSS))
    store.put_many([{"args": [n], "kwargs": {"retry": True}} for n in range(12)], name="shop.tasks.sync")
    store.put({"args": [], "kwargs": {}}, name="shop.tasks.report", delay=3600, queue="mail")
    store.report_worker("web-1:4242", stale_after=3600.0, pid=4242, host="web-1", threads=4, processed=1200,
                        failed=6)  # fmt: skip
    store.set_circuit_breaker("name:shop.tasks.fetch_prices", threshold=3, recovery_timeout=60.0)
    for _ in range(3):
        job_id = store.put({"args": [], "kwargs": {}}, name="shop.tasks.fetch_prices", max_retries=0)
        record = store.claim(job_id)
        assert record is not None
        record.nack("upstream down")
    store.set_rate_limit("queue:mail", parse_rate("60/m"))
    fill_samples(store)  # the throughput chart's last hour
    return {"fetches": fetches, "mails": mails, "script": script}


def log_in(page: Page, live_server: LiveServer) -> None:
    User.objects.create_superuser("admin", password="secret-pw")
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def listed_ids(page: Page) -> list[int]:
    return [int(value) for value in page.locator("tr[data-job-id]").evaluate_all(
        "rows => rows.map(row => row.dataset.jobId)")]  # fmt: skip


def test_dashboard_dead_letters_bulk_retry_and_a_script_that_never_runs(
    page: Page, live_server: LiveServer, screenshots: Path
) -> None:
    store = get_queue()
    jobs = fill_store(store)
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:  # any alert/confirm/prompt means a script of ours or a job's ran
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    log_in(page, live_server)

    # The index entry leads to the dashboard.
    page.goto(f"{live_server.url}/admin/")
    page.click("a[href='/admin/queue_max_django/job/']")
    page.wait_for_selector("h1:text('Queue dashboard')")
    assert page.text_content("[data-state=failed]") == "9"  # 6 dead letters + 3 that tripped the breaker
    assert page.text_content("[data-state=pending]") == "12"
    assert "web-1" in (page.text_content("#qm-panels") or "")
    assert page.locator("svg.qm-chart polyline").count() > 0
    page.screenshot(path=str(screenshots / "admin-dashboard.png"), full_page=True)

    # The refresh control updates the numbers without reloading the page.
    page.evaluate("window.__same_page = true")
    store.put({"args": [], "kwargs": {}}, name="shop.tasks.sync")
    page.click("[data-refresh-now]")
    page.wait_for_function("document.querySelector('[data-state=pending]').textContent === '13'")
    assert page.evaluate("window.__same_page") is True
    assert "Updated at" in (page.text_content("[data-refresh-status]") or "")

    # Filter the dead letters by task (the sidebar) and search them.
    page.click("#qm-panels a[href$='/failed/']")
    page.wait_for_selector("h1:text('Dead letters')")
    sidebar_task = (
        "[data-testid=sidebar] details[data-filter-title=task] a:has-text('shop.tasks.fetch_prices')"
    )
    assert page.inner_text(sidebar_task) == "shop.tasks.fetch_prices (6)"
    page.click(sidebar_task)
    page.wait_for_url(re.compile(r"task=shop\.tasks\.fetch_prices"))
    page.fill("#searchbar", "read")
    page.click("#changelist-search input[type=submit]")
    page.wait_for_url(re.compile(r"q=read"))
    assert "task=shop.tasks.fetch_prices" in page.url  # the search keeps the sidebar's filter
    assert listed_ids(page) == sorted(jobs["fetches"], reverse=True)
    page.screenshot(path=str(screenshots / "admin-dead-letters.png"), full_page=True)

    # Retry two of them through the bulk action, confirm, and see them leave the list.
    chosen = jobs["fetches"][:2]
    for job_id in chosen:
        page.check(f"input.action-select[value='{job_id}']")
    page.select_option("select[name=action]", "retry")
    page.click("button[data-go]")
    page.wait_for_selector("[data-testid=how-many]")
    assert page.text_content("[data-testid=how-many]") == "2"
    assert [store.job(i).state for i in chosen] == [State.FAILED] * 2  # type: ignore[union-attr]
    page.click("input[type=submit][value^='Yes']")
    page.wait_for_selector("ul.messagelist")
    assert "Retried 2 jobs." in (page.text_content("ul.messagelist") or "")
    assert listed_ids(page) == [jobs["fetches"][2]]
    assert "task=shop.tasks.fetch_prices" in page.url  # back on the same filter
    assert [store.job(i).state for i in chosen] == [State.PENDING] * 2  # type: ignore[union-attr]

    # A job whose arguments and error are markup: shown as text, nothing runs.
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{jobs['script']}/")
    page.wait_for_selector("h1:text('Job')")
    arguments = page.text_content("[data-testid=arguments]") or ""
    assert XSS in arguments and 'onerror=\\"window.__xss = 1\\"' in arguments  # as JSON text
    assert XSS in (page.text_content("[data-testid=error]") or "")
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("[data-testid=arguments] script, [data-testid=arguments] img").count() == 0
    page.screenshot(path=str(screenshots / "admin-job.png"), full_page=True)
    assert dialogs == []


@pytest.mark.store_neutral  # the pages' colours
def test_the_pages_follow_dark_mode(page: Page, live_server: LiveServer, screenshots: Path) -> None:
    store = get_queue()
    job_id = dead_letter(store, "shop.tasks.render", ["x"], ValueError("broken"))
    log_in(page, live_server)
    url = f"{live_server.url}/admin/queue_max_django/job/{job_id}/"
    colours = {}
    schemes: tuple[Literal["light"], Literal["dark"]] = ("light", "dark")
    for scheme in schemes:
        page.emulate_media(color_scheme=scheme)
        page.goto(url)
        colours[scheme] = page.evaluate(
            """() => ({
                body: getComputedStyle(document.body).backgroundColor,
                pre: getComputedStyle(document.querySelector('.qm-pre')).color,
                text: getComputedStyle(document.body).color,
            })"""
        )
    assert colours["light"]["body"] != colours["dark"]["body"]
    for scheme in ("light", "dark"):  # job text takes the admin's text colour, readable in both
        assert colours[scheme]["pre"] == colours[scheme]["text"]
    page.screenshot(path=str(screenshots / "admin-job-dark.png"), full_page=True)


DANGER_JS = """() => {
    const button = document.querySelector('[data-testid=confirm]');
    const probe = document.createElement('div');
    probe.style.background = 'var(--delete-button-bg)';
    document.body.append(probe);
    const red = getComputedStyle(probe).backgroundColor;
    probe.remove();
    return getComputedStyle(button).backgroundColor === red;
}"""  # whether the confirmation's button wears the admin's delete red


@pytest.mark.store_neutral  # the page's script and markup; the action on both stores: test_admin_actions.py
def test_select_all_that_match_and_a_jobs_cancel_run_now_and_enqueue_again(
    page: Page, live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "PAGE_SIZE", 3)  # the live server runs in this process
    store = get_queue()
    alphas = [dead_letter(store, "shop.tasks.alpha", [n], ValueError(f"a{n}")) for n in range(5)]
    betas = [dead_letter(store, "shop.tasks.beta", [n], ValueError(f"b{n}")) for n in range(2)]
    log_in(page, live_server)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/failed/?task=shop.tasks.alpha")
    assert "5 match the filters (7 dead letters in all)" in " ".join(page.inner_text(".qm-summary").split())
    counter = page.locator("[data-selected-count]")
    assert counter.inner_text() == "0 of 3 selected"
    page.check(f"input.action-select[value='{alphas[-1]}']")
    assert counter.inner_text() == "1 of 3 selected"
    assert page.locator("[data-select-matching]").is_hidden()
    page.check("[data-select-all]")
    assert counter.inner_text() == "3 of 3 selected"
    page.click("[data-select-matching]")  # "Select all 5 dead letters that match"
    assert page.locator("[data-all-selected]").inner_text().startswith("All 5 dead letters that match are")
    assert counter.is_hidden()
    page.select_option("select[name=action]", "retry")
    page.click("button[data-go]")
    assert page.text_content("[data-testid=how-many]") == "5"
    assert page.evaluate(DANGER_JS) is False  # a retry is not a deletion: not the red button
    assert [store.job(i).state for i in alphas] == [State.FAILED] * 5  # type: ignore[union-attr]
    page.click("input[type=submit][value^='Yes']")
    assert "Retried 5 jobs." in (page.text_content("ul.messagelist") or "")
    assert [store.job(i).state for i in alphas] == [State.PENDING] * 5  # type: ignore[union-attr]
    assert [store.job(i).state for i in betas] == [State.FAILED] * 2  # type: ignore[union-attr]

    # Cancelling a job from its page asks first, in red; "No" goes back to the job, "Yes" removes it.
    later = store.put({"args": [], "kwargs": {}}, name="shop.tasks.alpha", delay=3600)
    job_url = f"{live_server.url}/admin/queue_max_django/job/{later}/"
    page.goto(job_url)
    page.click("input[value='Cancel job…']")
    assert page.text_content("[data-testid=how-many]") == "1"
    assert page.evaluate(DANGER_JS) is True
    assert store.job(later) is not None  # nothing yet
    page.click("[data-testid=back]")
    page.wait_for_url(job_url)
    page.click("input[value='Cancel job…']")
    page.click("[data-testid=confirm]")
    assert "Cancelled 1 job." in (page.text_content("ul.messagelist") or "")
    assert store.job(later) is None

    # A scheduled job is run now: it waits from now on, with no attempt counted.
    due_later = store.put({"args": [], "kwargs": {}}, name="shop.tasks.alpha", delay=3600)
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{due_later}/")
    page.click("input[value='Run now']")
    page.wait_for_selector("ul.messagelist")
    assert page.text_content("[data-testid=state]") == "waiting"
    ran = store.job(due_later)
    assert ran is not None and (ran.state, ran.attempts, ran.eta) == (State.PENDING, 0, None)

    # A done job is enqueued again as a new waiting job, whose page opens.
    done = store.put({"args": ["again"], "kwargs": {}}, name="shop.tasks.alpha", queue="mail")
    store.claim(done).ack("ok")  # type: ignore[union-attr]
    page.goto(f"{live_server.url}/admin/queue_max_django/job/{done}/")
    page.click("input[value='Enqueue again']")
    page.wait_for_url(re.compile(r"/job/\d+/$"))
    new_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert new_id != done and page.text_content("[data-testid=state]") == "waiting"
    assert f"Enqueued job {done} again as job {new_id}." in (page.text_content("ul.messagelist") or "")
    again = store.job(new_id)
    assert again is not None and (again.payload, again.queue) == ({"args": ["again"], "kwargs": {}}, "mail")
