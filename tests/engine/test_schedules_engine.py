"""The Queue's kept schedules (``ScheduleControl``, ``engine/schedulestate.py``) on every store kind: names
checked before anything is written, an edit that raises writes nothing, times from the store's clock, and
``AsyncQueue``'s coroutines. The store side is tests/store_contract/test_schedules.py's."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from queue_max_django.engine import AsyncQueue, InvalidJob, Queue
from queue_max_django.engine.schedulestate import ScheduleExists, StoredSchedule
from tests.engine.locations import StoreLocation

from .conftest import FakeClock


def test_names_are_checked_and_a_refused_edit_writes_nothing(queue: Queue) -> None:
    for bad in ("", "   ", "x" * 201, "new\nline", 5):
        with pytest.raises(InvalidJob):
            queue.change_schedule(bad, lambda old: StoredSchedule("x"))  # type: ignore[arg-type]
    made = StoredSchedule("nightly", "app.report", interval=60.0, changed_by="ann")
    kept = queue.change_schedule("nightly", lambda old: made)
    assert kept is not None and dataclasses.replace(kept, changed_at=0.0, created_at=0.0) == made

    def add_again(old: StoredSchedule | None) -> StoredSchedule:
        if old is not None:
            raise ScheduleExists("taken")
        return made

    with pytest.raises(ScheduleExists):
        queue.change_schedule("nightly", add_again)
    assert queue.schedules() == [kept]
    assert queue.change_schedule("nightly", lambda old: None) is None
    assert queue.schedules() == [] and queue.schedule("nightly") is None


def test_changed_at_is_the_stores_clock_and_created_at_stays(queue: Queue, clock: FakeClock) -> None:
    first = queue.change_schedule("a", lambda old: StoredSchedule("a", "t", interval=1.0))
    assert first is not None and first.changed_at == first.created_at == clock()
    clock.advance(30)
    again = queue.change_schedule("a", lambda old: old and dataclasses.replace(old, enabled=False))
    assert again is not None and (again.created_at, again.changed_at) == (first.created_at, clock())
    assert again.paused(clock()) and not first.paused(clock())


def test_async_queue_has_the_same(location: StoreLocation) -> None:
    async def run() -> None:
        async with AsyncQueue(location.where, do_recover=False, do_vacuum=False) as aq:
            await aq.change_schedule("b", lambda old: StoredSchedule("b", "t", cron="@daily"))
            assert [s.name for s in await aq.schedules()] == ["b"]
            assert (await aq.schedule("b")).cron == "@daily"  # type: ignore[union-attr]

    asyncio.run(run())
