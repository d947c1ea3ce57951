"""Pauses: ``Store.pauses`` (``PauseOps``, ``engine/stores/contract/pauses.py``), on the store's clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from queue_max_django.engine.pausestate import Pause
from queue_max_django.engine.stores.base import Store
from queue_max_django.engine.tokens import new_token
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import LEASE, claim, put
from tests.stores import KINDS


@pytest.fixture
def other(store: Store, store_kind: str, request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    """A second handle on ``store``'s data, as another process (or machine) would open it."""
    if store.kind == "memory":
        from queue_max_django.engine.stores.memory.store import MemoryStore

        opened: Store = MemoryStore(store.space, clock=clock)  # type: ignore[attr-defined]
    else:
        opened = KINDS[store_kind].open_store(request, clock)  # the same directory, the same database
    yield opened
    opened.close(flush=False)


@pytest.fixture
def kept_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that keeps its version a while (PostgreSQL) keeps it for an hour: a version read is then
    stale for sure, and the claim's own check is what holds a paused job back."""
    module = sys.modules.get("queue_max_django.engine.stores.postgres.pauses")
    if module is not None:
        monkeypatch.setattr(module, "VERSION_TTL", 3600.0)
        monkeypatch.setattr(module, "QUIET_TTL", 3600.0)


@pytest.mark.sc_pause_set
@pytest.mark.sc_pause_list
@pytest.mark.sc_pause_version
def test_a_pause_is_kept_with_its_time_reason_and_author_and_a_second_one_replaces_it(
    store: Store, clock: FakeClock
) -> None:
    version = store.pauses.version()
    made = store.pauses.pause([("mail", None), ("default", "app.send")], 60.0, "provider down", "ops")
    now = clock()
    assert made == [
        Pause("mail", None, now, now + 60.0, "provider down", "ops"),
        Pause("default", "app.send", now, now + 60.0, "provider down", "ops"),
    ]
    assert store.pauses.version() != version
    listed_version, listed = store.pauses.pauses()
    assert listed_version == store.pauses.version()
    assert listed == [made[1], made[0]]  # by queue, then task
    clock.advance(5.0)
    again = store.pauses.pause([("mail", None)], None, None, None)
    assert again == [Pause("mail", None, now + 5.0, None, None, None)]
    assert store.pauses.pauses()[1] == [made[1], again[0]]


@pytest.mark.sc_pause_list
def test_a_pause_ends_by_itself_on_the_stores_clock(store: Store, clock: FakeClock) -> None:
    store.pauses.pause([("mail", None)], 10.0, None, None)
    store.pauses.pause([("mail", "app.send")], 30.0, None, None)
    version = store.pauses.version()
    clock.advance(9.999)
    assert [pause.task for pause in store.pauses.pauses()[1]] == [None, "app.send"]
    clock.advance(0.001)
    assert [pause.task for pause in store.pauses.pauses()[1]] == ["app.send"]
    assert store.pauses.version() == version  # nobody lifted it: it ended
    assert store.pauses.resume([("mail", None)]) == []  # ended: nothing in force to lift


@pytest.mark.sc_pause_resume
def test_resume_lifts_exactly_its_targets_and_hints_the_consumers(store: Store, clock: FakeClock) -> None:
    queue_pause, task_pause = store.pauses.pause([("mail", None), ("mail", "app.send")], None, "r", "me")
    version = store.pauses.version()
    assert store.pauses.resume([("mail", "other"), ("default", None)]) == []
    assert store.pauses.version() == version  # nothing lifted, nothing changed
    store.hints.changed()
    store.hints.changed()  # consumed: no hint pending now
    assert store.pauses.resume([("mail", None)]) == [queue_pause]
    assert store.hints.changed()
    assert store.pauses.version() != version
    assert store.pauses.pauses()[1] == [task_pause]  # the task's pause is its own
    assert store.pauses.resume([("mail", "app.send")]) == [task_pause]
    assert store.pauses.pauses()[1] == []


@pytest.mark.sc_pause_fresh
@pytest.mark.usefixtures("kept_long")
def test_a_claim_never_decides_on_pauses_older_than_those_committed_before_it_asked(
    store: Store, other: Store, clock: FakeClock
) -> None:
    (job_id,) = put(store, clock(), "mail job", queue="mail")
    before = other.pauses.version()  # the other handle has read (and may keep) the pauses' version
    store.pauses.pause([("mail", None)], None, None, None)
    seen = other.pauses.version()
    outcome = other.claim(0, clock(), None, LEASE, new_token(), None, "w", 1)
    if seen == before:  # a kept, stale number: the claim's own check held the job back
        assert outcome.claimed == [] and outcome.head_priority is None
        assert other.pauses.version() != before  # and the next read is the committed one
        job = store.job(clock(), job_id)
        assert job is not None and job.state.value == "pending"
    # else the version read already told: the Queue leaves the paused queue out of its filter


@pytest.mark.sc_pause_fresh
@pytest.mark.usefixtures("kept_long")
def test_a_single_job_claim_checks_the_pauses_too_and_an_explicit_one_does_not(
    store: Store, other: Store, clock: FakeClock
) -> None:
    first, second = put(store, clock(), "a", "b", queue="mail")
    before = other.pauses.version()
    store.pauses.pause([("mail", None)], None, None, None)
    seen = other.pauses.version()
    taken = other.claim_job(clock(), first, LEASE, new_token(), "w", False)
    if seen == before:
        assert taken is None
        assert other.pauses.version() != before
    # Queue.claim(job_id) (scheduled_too) runs a job whatever pauses it: it asks nothing.
    assert other.claim_job(clock(), second, LEASE, new_token(), "w", True) is not None


@pytest.mark.sc_pause_fresh
def test_a_claim_of_a_thread_that_read_the_current_version_takes_its_job(
    store: Store, clock: FakeClock
) -> None:
    store.pauses.pause([("mail", None)], None, None, None)
    put(store, clock(), "default job")
    store.pauses.version()
    assert [job.payload for job in claim(store, clock())] == ["default job"]
