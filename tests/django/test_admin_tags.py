"""The admin's search by tag (issue 34): ``tag:T`` words in the search box list the jobs of those tags
through the store's tag index (newest first), the rest of the text still searches names and errors; the job
page shows a job's tags, each a link to its search; "all that match" actions act on the tag's jobs only."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest
from django.test import Client, override_settings

from queue_max_django.admin.listing import search_words
from queue_max_django.conf import get_queue
from queue_max_django.engine import Queue, State
from tests.dead_letters import fail

Configure = Callable[..., override_settings]
BASE = "/admin/queue_max_django/job/"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(queue_max: Configure) -> Iterator[Queue]:
    with queue_max(RETRY_BACKOFF=0, MAX_RETRIES=1):
        yield get_queue()


def listed(client: Client, state: str, search: str) -> list[int]:
    response = client.get(f"{BASE}{state}/?q={quote(search)}")
    assert response.status_code == 200
    return [int(value) for value in re.findall(r'<tr data-job-id="(\d+)"', response.content.decode())]


def test_search_words_split_tags_from_text() -> None:
    assert search_words("tag:order:42 boom TAG:vip tag: tag:bad!") == (
        ("order:42", "vip"),
        "boom tag: tag:bad!",
    )


def test_a_tag_search_lists_the_tags_jobs_newest_first_with_the_other_filters(
    admin_client: Client, store: Queue
) -> None:
    tagged = [store.put(n, name="t.ship", metadata={"_tags": ["order:42"]}) for n in range(3)]
    vip = store.put(9, name="t.mail", queue="mail", metadata={"_tags": ["order:42", "vip"]})
    store.put(5, name="t.ship", metadata={"_tags": ["order:43"]})
    store.put(6, name="t.ship")
    assert listed(admin_client, "pending", "tag:order:42") == [vip, *reversed(tagged)]
    assert listed(admin_client, "pending", "tag:order:42 tag:vip") == [vip]
    assert listed(admin_client, "pending", "tag:order:42 mail") == [vip]  # and the text: the task name
    assert listed(admin_client, "pending", "tag:nothing") == []
    html = admin_client.get(f"{BASE}pending/?q=tag:order:42&queue=mail").content.decode()
    assert "a search by tag lists" in html and 'data-testid="count">1<' in html
    dead = fail(store, "x", metadata={"_tags": ["order:42"]})
    assert listed(admin_client, "failed", "tag:order:42") == [dead]
    page = admin_client.get(f"{BASE}{vip}/").content.decode()
    tags = re.search(r'data-testid="tags">(.*?)</dd>', page)
    assert tags is not None and re.findall(r"<code>(.*?)</code>", tags.group(1)) == ["order:42", "vip"]
    assert f'href="{BASE}pending/?q=tag:order%3A42"' in tags.group(1)


def test_all_that_match_a_tag_search_is_the_tags_jobs(admin_client: Client, store: Queue) -> None:
    mine = store.put_many([1, 2, 3], metadata={"_tags": ["tenant:acme"]})
    other = store.put(4, metadata={"_tags": ["tenant:other"]})
    confirm = admin_client.post(
        f"{BASE}pending/action/", {"action": "cancel", "scope": "matching", "q": "tag:tenant:acme"}
    )
    assert 'data-testid="how-many">3<' in confirm.content.decode()
    done = admin_client.post(
        f"{BASE}pending/action/",
        {
            "action": "cancel",
            "scope": "matching",
            "q": "tag:tenant:acme",
            "confirmed": "yes",
            "as_of": repr(store.now()),
        },
    )
    assert done.status_code == 302
    assert all(store.job(i) is None for i in mine) and store.job(other).state is State.PENDING  # type: ignore[union-attr]
    assert store.tagged("tenant:acme") == []


def test_args_and_meta_words_search_argument_and_metadata_values_by_a_bounded_scan(
    admin_client: Client, store: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queue_max_django.admin import listing

    add = "tests.testapp.tasks.add"
    acme = store.put({"args": [42, 1], "kwargs": {}}, name=add, metadata={"tenant": "acme"})
    other = store.put({"args": [43], "kwargs": {"b": 1}}, name=add, metadata={"tenant": "other"})
    keyword = store.put({"args": [], "kwargs": {"a": 42, "b": 2}}, name=add, metadata={"_tags": ["vip"]})
    assert listed(admin_client, "pending", "args.a:42") == [acme, keyword]  # claim order: a scan
    assert listed(admin_client, "pending", "args.b:1") == [acme, other]
    assert listed(admin_client, "pending", "meta.tenant:acme") == [acme]
    assert listed(admin_client, "pending", "META.tenant:acme args.a:42") == [acme]
    assert listed(admin_client, "pending", "args.a:42 tag:vip") == [keyword]  # the tag's jobs, then tested
    assert listed(admin_client, "pending", "args.nope:1") == []
    monkeypatch.setattr(listing, "PAGE_SCAN_LIMIT", 2)
    monkeypatch.setattr(listing, "BATCH", 1)
    html = admin_client.get(f"{BASE}pending/?q={quote('meta.tenant:nobody')}").content.decode()
    assert "Looked at 2 jobs without filling this page" in html
