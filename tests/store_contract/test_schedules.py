"""Kept schedules: ``Store.schedules`` (``ScheduleOps``, ``engine/stores/contract/schedules.py``), and the
records ``schedulestate`` packs into it, on every store kind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from queue_max_django.engine import schedulestate
from queue_max_django.engine.schedulestate import StoredSchedule, editor
from queue_max_django.engine.stores.base import Store
from tests.engine.conftest import FakeClock
from tests.stores import KINDS


@pytest.fixture
def other(store: Store, store_kind: str, request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    """A second handle on ``store``'s data, as another process (or machine) would open it."""
    if store.kind == "memory":
        from queue_max_django.engine.stores.memory.store import MemoryStore

        opened: Store = MemoryStore(store.space, clock=clock)  # type: ignore[attr-defined]
    else:
        opened = KINDS[store_kind].open_store(request, clock)
    yield opened
    opened.close(flush=False)


@pytest.mark.sc_schedule_change
@pytest.mark.sc_schedule_get
@pytest.mark.sc_schedule_list
def test_a_change_adds_replaces_and_removes_and_another_handle_reads_it(store: Store, other: Store) -> None:
    seen: list[bytes | None] = []

    def put(value: bytes) -> object:
        def edit(old: bytes | None) -> bytes | None:
            seen.append(old)
            return value

        return edit

    assert store.schedules.all() == [] and store.schedules.get("b") is None
    assert store.schedules.change("b", put(b"one")) == b"one"  # type: ignore[arg-type]
    assert store.schedules.change("a", put(b"\x00\xff")) == b"\x00\xff"  # type: ignore[arg-type]
    assert store.schedules.change("b", put(b"two")) == b"two"  # type: ignore[arg-type]
    assert seen == [None, None, b"one"]
    assert other.schedules.get("b") == b"two"
    assert other.schedules.all() == [("a", b"\x00\xff"), ("b", b"two")]  # by name
    assert store.schedules.change("a", lambda old: None) is None
    assert store.schedules.change("never", lambda old: None) is None  # nothing to remove: nothing done
    assert other.schedules.all() == [("b", b"two")]


@pytest.mark.sc_schedule_change
def test_an_edit_that_raises_writes_nothing(store: Store) -> None:
    store.schedules.change("kept", lambda old: b"first")

    def refuse(old: bytes | None) -> bytes | None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        store.schedules.change("kept", refuse)
    with pytest.raises(ValueError, match="no"):
        store.schedules.change("new", refuse)
    assert store.schedules.all() == [("kept", b"first")]


@pytest.mark.sc_schedule_serial
def test_concurrent_changes_of_one_name_lose_none(store: Store, other: Store) -> None:
    """Two handles (two processes' worth) increment one counter 40 times each: every increment is kept."""

    def bump(old: bytes | None) -> bytes:
        return str(int(old or b"0") + 1).encode()

    def run(handle: Store) -> None:
        for _ in range(40):
            handle.schedules.change("counter", bump)

    threads = [threading.Thread(target=run, args=(handle,)) for handle in (store, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert store.schedules.get("counter") == b"80"


def test_a_schedule_record_round_trips_with_its_times_from_the_stores_clock(
    store: Store, clock: FakeClock
) -> None:
    made = StoredSchedule(
        "nightly report", "app.report", [1, "x"], {"to": "ops"}, cron="0 3 * * *", tz="Europe/Berlin",
        queue="reports", priority=5, misfire_grace_time=120.0, coalesce=True, changed_by="ann",
    )  # fmt: skip
    store.schedules.change(made.name, editor(made.name, lambda old: made, store.clock))
    created = clock()
    clock.advance(10.0)

    def disable(old: StoredSchedule | None) -> StoredSchedule | None:
        assert old is not None
        return StoredSchedule(**{**old.as_dict(), "enabled": False})

    store.schedules.change(made.name, editor(made.name, disable, store.clock))
    raw = store.schedules.get(made.name)
    assert raw is not None
    kept = schedulestate.unpack(made.name, raw)
    assert kept == StoredSchedule(**{**made.as_dict(), "enabled": False, "changed_at": created + 10.0,
                                     "created_at": created})  # fmt: skip
    assert kept.paused(clock()) and not kept.declared
    assert schedulestate.unpack("x", b"\xc1 not msgpack") is None
