"""Contract tests of listing: jobs() keyset paging across shards, its filters, and dead_letters().

DESIGN.md rule_paging (and rule_states for the state argument).
"""

from __future__ import annotations

from typing import Any

import pytest

from queue_max_django.engine import InvalidJob, Job, Queue, State
from queue_max_django.engine.job import shard_of
from tests.engine.conftest import FakeClock


def fill(q: Queue, count: int = 250, **options: Any) -> list[int]:
    """``count`` pending jobs spread over every shard: single puts and put_many batches mixed."""
    ids: list[int] = []
    while len(ids) < count:
        if len(ids) % 100 < 50:
            ids += q.put_many(range(min(25, count - len(ids))), **options)
        else:
            ids.append(q.put(len(ids), **options))
    assert len({shard_of(j) for j in ids}) == q.shard_count
    return ids


def page_through(
    q: Queue, state: State | str, *, limit: int, newest_first: bool = False, **filters: Any
) -> list[list[Job]]:
    pages: list[list[Job]] = []
    after = None
    while True:
        page = q.jobs(state, after=after, limit=limit, newest_first=newest_first, **filters)
        assert len(page) <= limit
        if not page:
            return pages
        pages.append(page)
        after = page[-1].job_id
        assert len(pages) < 1000, "paging does not end"


@pytest.mark.contract
@pytest.mark.rule_paging
@pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
def test_jobs_pages_through_every_shard_without_gaps_or_repeats(queue: Queue, newest_first: bool) -> None:
    """rule_paging: 250 pending jobs over 6 shards, pages of 50 -> 5 full pages, each in id order, together
    exactly the 250 ids once each."""
    ids = fill(queue)

    pages = page_through(queue, State.PENDING, limit=50, newest_first=newest_first)

    assert [len(page) for page in pages] == [50] * 5
    listed = [job.job_id for page in pages for job in page]
    assert listed == sorted(ids, reverse=newest_first)
    assert all(job.state is State.PENDING for page in pages for job in page)


@pytest.mark.contract
@pytest.mark.rule_paging
def test_jobs_default_limit_is_50_and_order_is_enqueue_order(queue: Queue, clock: FakeClock) -> None:
    """rule_paging: without arguments, the 50 oldest; job ids follow enqueue order across shards."""
    ids = []
    for i in range(70):
        ids.append(queue.put(i))
        clock.advance(0.001)
    first_page = queue.jobs(State.PENDING)
    assert [job.job_id for job in first_page] == ids[:50]
    assert [job.payload for job in first_page] == list(range(50))
    assert [job.job_id for job in queue.jobs(State.PENDING, newest_first=True, limit=3)] == ids[:-4:-1]


@pytest.mark.contract
@pytest.mark.rule_paging
def test_jobs_lists_one_state_only(queue: Queue) -> None:
    """rule_paging: jobs(state) holds the jobs in that state and no other, as the same snapshot as job()."""
    ids = [queue.put(i, max_retries=0) for i in range(12)]
    scheduled = queue.put("later", delay=60)
    records = [queue.get(0) for _ in range(9)]
    for record in records[:3]:
        record.ack(result=record.payload)
    for record in records[3:6]:
        record.nack("bad")
    by_state = {state: [job.job_id for job in queue.jobs(state, limit=100)] for state in State}
    assert sorted(by_state[State.DONE]) == sorted(r.job_id for r in records[:3])
    assert sorted(by_state[State.FAILED]) == sorted(r.job_id for r in records[3:6])
    assert sorted(by_state[State.RUNNING]) == sorted(r.job_id for r in records[6:])
    assert by_state[State.SCHEDULED] == [scheduled]
    assert len(by_state[State.PENDING]) == 3
    assert sorted(j for listed in by_state.values() for j in listed) == sorted([*ids, scheduled])
    for state in State:
        for job in queue.jobs(state, limit=100):
            assert job == queue.job(job.job_id)


@pytest.mark.contract
@pytest.mark.rule_paging
@pytest.mark.parametrize("newest_first", [False, True], ids=["oldest-first", "newest-first"])
def test_jobs_filters_by_queue_and_name_while_paging(queue: Queue, newest_first: bool) -> None:
    """rule_paging: queue= and name= select while paging; pages of 7 bring every match exactly once."""
    expected: dict[tuple[str, str | None], list[int]] = {}
    for i in range(120):
        queue_name = ("mail", "sms", "push")[i % 3]
        name = ("send", "retry", None)[(i // 3) % 3]
        job_id = queue.put(i, queue=queue_name, name=name, partition_key=i % 5)
        expected.setdefault((queue_name, name), []).append(job_id)

    mail = sorted((j for (q, _), v in expected.items() if q == "mail" for j in v), reverse=newest_first)
    listed = [
        j
        for page in page_through(queue, "pending", limit=7, newest_first=newest_first, queue="mail")
        for j in page
    ]
    assert [job.job_id for job in listed] == mail
    assert all(job.queue == "mail" for job in listed)

    retry = sorted((j for (_, n), v in expected.items() if n == "retry" for j in v), reverse=newest_first)
    listed = [
        j
        for page in page_through(queue, "pending", limit=7, newest_first=newest_first, name="retry")
        for j in page
    ]
    assert [job.job_id for job in listed] == retry

    both = sorted(expected["sms", "send"], reverse=newest_first)
    listed = [
        j
        for page in page_through(
            queue, "pending", limit=3, newest_first=newest_first, queue="sms", name="send"
        )
        for j in page
    ]
    assert [job.job_id for job in listed] == both
    assert queue.jobs(State.PENDING, queue="nowhere") == []
    assert queue.jobs(State.PENDING, name="nobody") == []


@pytest.mark.contract
@pytest.mark.rule_paging
def test_after_a_deleted_job_pages_on_where_the_id_is_the_position(queue: Queue) -> None:
    """rule_paging: where the listing order is the job id (failed, running), the cursor works after that
    job is gone; where it is not (pending: claim order), a vanished cursor is a clear InvalidJob, not a
    wrong page."""
    ids = queue.put_many(range(20), max_retries=0)
    for _ in ids:
        queue.get(0).nack("bad")
    first = queue.jobs(State.FAILED, limit=5)
    cursor = first[-1].job_id
    assert queue.purge(State.FAILED, older_than=0) == 20
    assert queue.jobs(State.FAILED, after=cursor) == []
    remaining = queue.put_many(range(4), max_retries=0)
    for _ in remaining:
        queue.get(0).nack("bad")
    later = sorted(job_id for job_id in remaining if job_id > cursor)
    assert [job.job_id for job in queue.jobs(State.FAILED, after=cursor)] == later

    pending = [queue.put(i) for i in range(6)]
    page = queue.jobs(State.PENDING, limit=3)
    assert queue.cancel(page[-1].job_id)
    with pytest.raises(InvalidJob, match="no longer exists"):
        queue.jobs(State.PENDING, after=page[-1].job_id)
    assert len(queue.jobs(State.PENDING)) == len(pending) - 1


@pytest.mark.contract
@pytest.mark.rule_paging
def test_dead_letters_are_failed_jobs_newest_first(queue: Queue) -> None:
    """rule_paging: dead_letters() == jobs(FAILED, newest_first=True), paged with after=, limit 100."""
    ids = queue.put_many(range(60), max_retries=0) + queue.put_many(range(60), max_retries=0)
    ids += [queue.put(i, max_retries=0) for i in range(30)]
    for _ in ids:
        queue.get(0).nack("bad")
    queue.put("not failed")
    assert queue.stats()["failed"] == 150

    first = queue.dead_letters()
    assert len(first) == 100
    assert first == queue.jobs(State.FAILED, newest_first=True, limit=100)
    rest = queue.dead_letters(after=first[-1].job_id)
    assert len(rest) == 50
    assert [job.job_id for job in first + rest] == sorted(ids, reverse=True)
    assert all(job.state is State.FAILED and job.error == "bad" for job in first + rest)
    small = queue.dead_letters(limit=7)
    assert [job.job_id for job in small] == sorted(ids, reverse=True)[:7]


@pytest.mark.contract
@pytest.mark.rule_paging
@pytest.mark.parametrize(
    "options",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": 2.5},
        {"after": -1},
        {"after": "10"},
        {"shard": -1},
        {"shard": 99},
        {"shard": "1"},
        {"shard": True},
    ],
    ids=str,
)
def test_bad_paging_arguments_are_refused(queue: Queue, options: dict[str, Any]) -> None:
    """rule_paging: a limit that is not a positive int, or an after that is not an id, raises InvalidJob."""
    queue.put("x")
    with pytest.raises(InvalidJob):
        queue.jobs(State.PENDING, **options)


@pytest.mark.contract
@pytest.mark.rule_paging
def test_jobs_of_one_shard_page_through_that_shard_only(queue: Queue) -> None:
    """rule_paging: ``shard=`` lists one shard, in the same order and with the same keyset paging."""
    for shard in range(queue.shard_count):
        queue.put_many_to_shard(shard, [f"{shard}-{n}" for n in range(7)])
    seen: list[Job] = []
    after = None
    while page := queue.jobs(State.PENDING, shard=2, after=after, limit=3):
        seen.extend(page)
        after = page[-1].job_id
    assert [job.payload for job in seen] == [f"2-{n}" for n in range(7)]
    assert {job.shard for job in seen} == {2}
    assert queue.jobs(State.PENDING, shard=2, limit=100) == seen
