"""The PostgreSQL store's flow control (``PgControl``) and locks and worker registry (``PgCoordination``),
against a real server (tests/pgserver.py), on the injected fake clock.

What is proved: every ``FlowOps`` and ``LockOps`` method does what the LMDB store's does (each alone, with
what it stored read back with SQL, and then the same random scripts run on both stores, compared call by
call and row by row); ``version()`` changes with every flow write and is cached for ``VERSION_TTL`` only;
and across real processes (tests/engine/procs.py): two processes emptying one bucket take exactly its
tokens between them (never both the last one), a half-open breaker's trial and a lock each go to exactly
one process, a dead holder's lock is free once its ttl has passed on the clock and not before, and many
processes admitting, giving back, taking and recording on overlapping keys never deadlock.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import InvalidJob, LockHolder, WorkerInfo, ratelimit
from queue_max_django.engine.breaker import Breaker, BreakerPolicy, BreakerState
from queue_max_django.engine.flowstate import (
    BreakerEntry,
    Limit,
    pack_breaker,
    pack_limit,
    unpack_breaker,
    unpack_limit,
)
from queue_max_django.engine.ratelimit import BucketState, parse_rate
from queue_max_django.engine.stores.postgres import control as control_module
from queue_max_django.engine.stores.postgres.connection import Connections
from queue_max_django.engine.stores.postgres.control import PgControl
from queue_max_django.engine.stores.postgres.coordination import PgCoordination
from tests import pgserver
from tests.engine.conftest import FakeClock, open_queue
from tests.engine.procs import CHILD_TIMEOUT, Children, finish, kill, send

pytestmark = pytest.mark.postgres

MICRO = 1_000_000
BAD_IDS: list[Any] = ["", None, 7, b"bytes", "x" * 201, "\U0001f600" * 200, "\ud800", "nul\x00inside"]


@pytest.fixture
def db(pg_url: str) -> Iterator[Connections]:
    connections = Connections(pg_url)
    yield connections
    connections.close()


@pytest.fixture
def control(db: Connections, clock: FakeClock) -> PgControl:
    return PgControl(db, clock)


@pytest.fixture
def locks(db: Connections, clock: FakeClock) -> PgCoordination:
    return PgCoordination(db, clock)


@pytest.fixture
def sql(pg_url: str) -> Iterator[Any]:
    """A connection of the test's own, to read (and change) rows past the store."""
    conn = pgserver.connect(pg_url)
    yield conn
    conn.close()


def us(seconds: float) -> int:
    return round(seconds * MICRO)


def stored_limits(sql: Any) -> dict[str, Limit]:
    return {k: unpack_limit(bytes(v)) for k, v in sql.execute("SELECT key, value FROM qm_limits")}


def stored_breakers(sql: Any) -> dict[str, BreakerEntry]:
    return {k: unpack_breaker(bytes(v)) for k, v in sql.execute("SELECT key, value FROM qm_breakers")}


def stored_version(sql: Any) -> int:
    (version,) = sql.execute("SELECT version FROM qm_flow").fetchone()
    return int(version)


def flow_rows(sql: Any) -> list[tuple[str, str, bytes]]:
    rows = sql.execute(
        "SELECT 'limit', key, value FROM qm_limits UNION ALL SELECT 'breaker', key, value FROM qm_breakers"
    ).fetchall()
    return sorted((kind, key, bytes(value)) for kind, key, value in rows)


def lock_rows(sql: Any) -> list[tuple[Any, ...]]:
    return sql.execute(
        "SELECT name, owner, expires_us, since_us, last_owner, last_expires_us, last_since_us FROM qm_locks "
        "ORDER BY name"
    ).fetchall()


def worker_rows(sql: Any) -> list[tuple[Any, ...]]:
    return sql.execute(
        "SELECT worker_id, last_heartbeat_us, stale_after FROM qm_workers ORDER BY worker_id"
    ).fetchall()


def open_breaker(control: PgControl, key: str, threshold: int = 2, timeout: float = 10) -> None:
    control.set_breaker(key, BreakerPolicy(threshold, timeout))
    for _ in range(threshold):
        control.record([key], False)
    assert stored_state(control, key) is BreakerState.OPEN


def stored_state(control: PgControl, key: str) -> BreakerState:
    return control.state().breakers[key].breaker.state


# ------------------------------------------------------------------------------------------ limits


def test_a_new_limit_is_a_full_bucket_as_of_now(control: PgControl, sql: Any, clock: FakeClock) -> None:
    rate = parse_rate("10/s", burst=20)
    assert stored_version(sql) == 0 and control.version() == 0
    control.set_limit("name:api", rate)
    assert stored_limits(sql) == {"name:api": Limit(rate, BucketState(20 * MICRO, us(clock.now)))}
    assert stored_version(sql) == 1 and control.version() == 1, "a write bumps the version, seen at once"
    assert control.state().limits == stored_limits(sql)
    assert control.state().breakers == {}


def test_changing_a_limit_keeps_its_tokens_up_to_the_new_burst(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    control.set_limit("k", parse_rate("10/s"))
    assert control.take(["k"], 4) == (True, 0.0)
    clock.advance(0.1)  # one more token accrues at the old rate
    control.set_limit("k", parse_rate("100/s", burst=50))
    assert stored_limits(sql)["k"].bucket == BucketState(7 * MICRO, us(clock.now))
    control.set_limit("k", parse_rate("1/s", burst=3))
    assert stored_limits(sql)["k"] == Limit(parse_rate("1/s", burst=3), BucketState(3 * MICRO, us(clock.now)))
    assert stored_version(sql) == 4


def test_remove_and_reset_a_limit(control: PgControl, sql: Any, clock: FakeClock) -> None:
    rate = parse_rate("5/m")
    assert not control.reset_limit("k") and not control.remove_limit("k")
    assert stored_version(sql) == 0, "nothing changed: no new version"
    control.set_limit("k", rate)
    assert control.take(["k"], 5) == (True, 0.0)
    assert stored_limits(sql)["k"].bucket.tokens_micro == 0
    clock.advance(1)
    assert control.reset_limit("k")
    assert stored_limits(sql) == {"k": Limit(rate, BucketState(5 * MICRO, us(clock.now)))}
    assert control.remove_limit("k")
    assert stored_limits(sql) == {}
    assert not control.remove_limit("k")
    assert stored_version(sql) == 4


def test_take_is_all_or_nothing_over_its_keys(control: PgControl, sql: Any, clock: FakeClock) -> None:
    """Keys without a limit are free; one empty bucket refuses the take, and the others keep their
    tokens: the refusal writes nothing at all."""
    control.set_limit("a", parse_rate("2/s"))
    control.set_limit("b", parse_rate("1/s"))
    assert control.take(["*", "a", "b", "nolimit"]) == (True, 0.0)
    before, version = flow_rows(sql), stored_version(sql)
    granted, wait = control.take(["a", "b"])
    assert (granted, wait) == (
        False,
        ratelimit.retry_after(stored_limits(sql)["b"].bucket, parse_rate("1/s"), clock.now),
    )
    assert wait == pytest.approx(1.0)
    assert flow_rows(sql) == before and stored_version(sql) == version
    assert control.take(["a"]) == (True, 0.0), "a still had its token"
    assert control.take(["nolimit", "*"]) == (True, 0.0)
    assert stored_version(sql) == version + 1
    clock.advance(1)
    assert control.take(["a", "b"]) == (True, 0.0)
    assert {k: v.bucket.tokens_micro for k, v in stored_limits(sql).items()} == {"a": MICRO, "b": 0}


def test_take_n_more_than_the_burst_waits_forever(control: PgControl) -> None:
    control.set_limit("k", parse_rate("10/s"))
    assert control.take(["k"], 11) == (False, float("inf"))
    assert control.take(["k"], 10) == (True, 0.0)


def test_a_refused_take_keeps_the_new_time_base_after_the_clock_was_set_back(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    control.set_limit("k", parse_rate("1/s"))
    assert control.take(["k"]) == (True, 0.0)
    clock.advance(-60)
    version = stored_version(sql)
    granted, _ = control.take(["k"])
    assert not granted
    assert stored_limits(sql)["k"].bucket == BucketState(0, us(clock.now)), "resumes accruing from now"
    assert stored_version(sql) == version + 1
    clock.advance(1)
    assert control.take(["k"]) == (True, 0.0)


def test_take_up_to_takes_what_there_is_after_giving_back(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    assert control.take_up_to("nolimit", 7) == 7
    control.set_limit("k", parse_rate("10/s"))
    assert control.take_up_to("k", 4) == 4
    assert control.take_up_to("k", 100) == 6
    assert stored_limits(sql)["k"].bucket.tokens_micro == 0
    version = stored_version(sql)
    assert control.take_up_to("k", 5) == 0
    assert stored_version(sql) == version, "nothing taken, nothing written"
    assert control.take_up_to("k", 2, give_back=3) == 2
    assert stored_limits(sql)["k"].bucket.tokens_micro == 1 * MICRO
    assert control.take_up_to("k", 0, give_back=50) == 0
    assert stored_limits(sql)["k"].bucket.tokens_micro == 10 * MICRO, "given back up to the burst only"


def test_give_back_returns_tokens_and_a_half_open_trial(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    control.set_limit("name:x", parse_rate("2/m"))
    open_breaker(control, "name:x")
    clock.advance(10)
    assert control.admit(["*", "name:x"]) == (True, 0.0)
    entry = stored_breakers(sql)["name:x"]
    assert entry.breaker.state is BreakerState.HALF_OPEN and entry.breaker.trial_started_us == us(clock.now)
    assert stored_limits(sql)["name:x"].bucket.tokens_micro == 1 * MICRO
    control.give_back(["*", "name:x"])
    entry = stored_breakers(sql)["name:x"]
    assert entry.breaker.state is BreakerState.HALF_OPEN and entry.breaker.trial_started_us is None
    assert stored_limits(sql)["name:x"].bucket.tokens_micro == 2 * MICRO
    control.give_back(["name:x"])
    assert stored_limits(sql)["name:x"].bucket.tokens_micro == 2 * MICRO, "never above the burst"
    version = stored_version(sql)
    control.give_back(["nothing", "*"])
    assert stored_version(sql) == version


# ------------------------------------------------------------------------------------------ breakers


def test_set_breaker_starts_closed_and_a_new_policy_keeps_the_state(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    control.set_breaker("queue:q", BreakerPolicy(3, 30))
    assert stored_breakers(sql) == {"queue:q": BreakerEntry(BreakerPolicy(3, 30), Breaker.closed())}
    for _ in range(3):
        control.record(["queue:q"], False)
    opened = stored_breakers(sql)["queue:q"].breaker
    assert opened == Breaker(BreakerState.OPEN, 3, us(clock.now), None)
    control.set_breaker("queue:q", BreakerPolicy(5, 60))
    assert stored_breakers(sql) == {"queue:q": BreakerEntry(BreakerPolicy(5, 60), opened)}


def test_record_counts_failures_and_a_success_closes_the_trial(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    control.set_breaker("k", BreakerPolicy(2, 10))
    version = stored_version(sql)
    control.record(["k", "other"], True)
    assert stored_version(sql) == version, "a success that changes nothing writes nothing"
    control.record(["k"], False)
    assert stored_breakers(sql)["k"].breaker == Breaker(BreakerState.CLOSED, 1)
    control.record(["k"], True)
    assert stored_breakers(sql)["k"].breaker == Breaker.closed()
    control.record(["k"], False)
    control.record(["k"], False)
    opened_at = us(clock.now)
    assert stored_breakers(sql)["k"].breaker == Breaker(BreakerState.OPEN, 2, opened_at, None)
    clock.advance(5)
    control.record(["k"], False)
    assert stored_breakers(sql)["k"].breaker == Breaker(BreakerState.OPEN, 3, opened_at, None), "no extension"
    clock.advance(5)
    assert control.admit(["k"]) == (True, 0.0)
    control.record(["k"], True)
    assert stored_breakers(sql)["k"].breaker == Breaker.closed()


def test_remove_and_reset_a_breaker(control: PgControl, sql: Any, clock: FakeClock) -> None:
    assert not control.reset_breaker("k") and not control.remove_breaker("k")
    open_breaker(control, "k")
    assert control.reset_breaker("k")
    assert stored_breakers(sql) == {"k": BreakerEntry(BreakerPolicy(2, 10), Breaker.closed())}
    assert control.remove_breaker("k")
    assert stored_breakers(sql) == {}


def test_admit_hands_out_one_trial_and_is_all_or_nothing(
    control: PgControl, sql: Any, clock: FakeClock
) -> None:
    """An open breaker refuses (-> the seconds to its trial) and its keys' tokens stay; past the recovery
    timeout one admit gets the trial and takes the tokens, the next is refused until the trial is lost."""
    control.set_limit("*", parse_rate("100/s"))
    open_breaker(control, "name:x", timeout=10)
    clock.advance(4)
    before = flow_rows(sql)
    assert control.admit(["*", "queue:q", "name:x"]) == (False, 6.0)
    assert flow_rows(sql) == before, "refused: nothing taken, nothing written"
    assert control.admit(["*", "queue:q"]) == (True, 0.0), "the other keys are free"
    clock.advance(6)
    assert control.admit(["*", "queue:q", "name:x"]) == (True, 0.0)
    entry = stored_breakers(sql)["name:x"]
    assert (entry.breaker.state, entry.breaker.trial_started_us) == (BreakerState.HALF_OPEN, us(clock.now))
    assert stored_limits(sql)["*"].bucket.tokens_micro == 99 * MICRO  # refilled to 100 meanwhile, one taken
    assert control.admit(["name:x"]) == (False, 10.0), "the trial is out"
    clock.advance(10)
    assert control.admit(["name:x"]) == (True, 0.0), "a trial lost for a recovery timeout is replaced"
    control.set_limit("name:x", parse_rate("1/h"))
    control.record(["name:x"], True)
    assert control.admit(["name:x"]) == (True, 0.0)
    granted, wait = control.admit(["name:x"])
    assert not granted and wait == pytest.approx(3600)


def test_admit_with_nothing_to_check_writes_nothing(control: PgControl, sql: Any) -> None:
    control.set_breaker("k", BreakerPolicy())
    version = stored_version(sql)
    assert control.admit(["k", "other"]) == (True, 0.0)
    assert control.admit([]) == (True, 0.0)
    assert stored_version(sql) == version


# ------------------------------------------------------------------------------------------ state and version


def test_state_lists_keys_in_code_point_order_whatever_the_collation(control: PgControl) -> None:
    """As the LMDB store lists them (UTF-8 byte order), not as the database sorts text (ICU: a < B)."""
    for key in ["é", "a", "B", "*"]:
        control.set_limit(key, parse_rate("1/s"))
        control.set_breaker(key, BreakerPolicy())
    state = control.state()
    assert list(state.limits) == list(state.breakers) == ["*", "B", "a", "é"]


def test_version_is_cached_for_a_few_ms_except_after_own_writes(
    control: PgControl, db: Connections, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's write is seen once the cached reading is ``VERSION_TTL`` old; this process's own
    write at once; and reading the version in a tight loop costs a round trip per ``VERSION_TTL`` at most."""
    other_db = Connections(db.conninfo)
    other = PgControl(other_db, clock)
    try:
        monkeypatch.setattr(control_module, "VERSION_TTL", 3600.0)
        assert control.version() == 0
        other.set_limit("k", parse_rate("1/s"))
        assert control.version() == 0, "cached"
        control.set_breaker("b", BreakerPolicy())
        assert control.version() == 2, "its own write: at once (and it includes the other's)"
        other.remove_breaker("b")
        assert control.version() == 2
        monkeypatch.setattr(control_module, "VERSION_TTL", 0.0)
        assert control.version() == 3
        monkeypatch.setattr(control_module, "VERSION_TTL", 0.005)
        transactions = 0
        real = db.transaction

        def counting() -> Any:
            nonlocal transactions
            transactions += 1
            return real()

        monkeypatch.setattr(db, "transaction", counting)
        start = time.monotonic()
        for _ in range(2000):
            assert control.version() == 3
        elapsed = time.monotonic() - start
        assert transactions <= elapsed / 0.005 + 1, (transactions, elapsed)
        assert transactions < 2000
    finally:
        other_db.close()


def test_bad_keys_raise_before_anything_is_written(control: PgControl, sql: Any) -> None:
    """PostgreSQL's text holds no NUL: such a key is refused as an invalid key, not by the driver."""
    with pytest.raises(InvalidJob):
        control.set_limit("a\x00b", parse_rate("1/s"))
    with pytest.raises(InvalidJob):
        control.take(["*", "a\x00b"])
    with pytest.raises(InvalidJob):
        control.set_breaker("a\x00b", BreakerPolicy())
    with pytest.raises(InvalidJob):
        control.admit(["a\x00b"])
    assert flow_rows(sql) == [] and stored_version(sql) == 0


def test_an_invalid_token_count_changes_nothing(control: PgControl, sql: Any) -> None:
    control.set_limit("k", parse_rate("1/s"))
    before = flow_rows(sql)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ratelimit.InvalidRate):
            control.take(["k"], bad)  # type: ignore[arg-type]
    assert flow_rows(sql) == before


# ------------------------------------------------------------------------------------------ locks


def test_a_lock_has_one_holder_until_its_ttl_passes(
    locks: PgCoordination, sql: Any, clock: FakeClock
) -> None:
    t0 = clock.now
    assert locks.lock_holder("leader") is None and locks.last_lock_holder("leader") is None
    assert locks.acquire_lock("leader", "a", 10)
    assert lock_rows(sql) == [("leader", "a", us(t0 + 10), us(t0), None, None, None)]
    assert not locks.acquire_lock("leader", "b", 10)
    clock.advance(9.999)
    assert not locks.acquire_lock("leader", "b", 10), "refused until the ttl has passed on the clock"
    assert locks.lock_holder("leader") == LockHolder("a", t0 + 10, t0)
    clock.advance(0.001)
    assert locks.lock_holder("leader") is None
    assert locks.last_lock_holder("leader") == LockHolder("a", t0 + 10, t0)
    assert locks.acquire_lock("leader", "b", 5)
    assert lock_rows(sql) == [("leader", "b", us(clock.now + 5), us(clock.now), None, None, None)]
    assert not locks.release_lock("leader", "a")


def test_the_owner_renews_and_keeps_since_until_it_lets_it_expire(
    locks: PgCoordination, sql: Any, clock: FakeClock
) -> None:
    t0 = clock.now
    assert locks.acquire_lock("leader", "a", 10)
    clock.advance(8)
    assert locks.acquire_lock("leader", "a", 10)
    assert locks.lock_holder("leader") == LockHolder("a", clock.now + 10, t0)
    assert lock_rows(sql)[0][1:4] == ("a", us(clock.now + 10), us(t0))
    clock.advance(20)
    assert locks.acquire_lock("leader", "a", 10)
    assert locks.lock_holder("leader") == LockHolder("a", clock.now + 10, clock.now), "a new tenure"


def test_release_moves_the_lease_to_last_and_frees_the_lock(
    locks: PgCoordination, sql: Any, clock: FakeClock
) -> None:
    t0 = clock.now
    assert locks.acquire_lock("leader", "a", 10)
    clock.advance(3)
    before = lock_rows(sql)
    assert not locks.release_lock("leader", "b")
    assert not locks.release_lock("leader", 7)  # type: ignore[arg-type]
    assert not locks.release_lock("never-taken", "a")
    assert lock_rows(sql) == before, "a release by someone else changes nothing"
    assert locks.release_lock("leader", "a")
    assert lock_rows(sql) == [("leader", None, None, None, "a", us(clock.now), us(t0))]
    assert locks.lock_holder("leader") is None
    assert locks.last_lock_holder("leader") == LockHolder("a", clock.now, t0)
    assert not locks.release_lock("leader", "a"), "released already"
    clock.advance(1)
    assert locks.acquire_lock("leader", "b", 10)
    assert (
        locks.last_lock_holder("leader")
        == locks.lock_holder("leader")
        == LockHolder("b", clock.now + 10, clock.now)
    )


def test_releasing_an_expired_lease_changes_nothing(
    locks: PgCoordination, sql: Any, clock: FakeClock
) -> None:
    t0 = clock.now
    assert locks.acquire_lock("leader", "a", 10)
    clock.advance(30)
    before = lock_rows(sql)
    assert not locks.release_lock("leader", "a")
    assert lock_rows(sql) == before
    assert locks.last_lock_holder("leader") == LockHolder("a", t0 + 10, t0)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_lock_names_owners_and_worker_ids_raise_before_writing(
    locks: PgCoordination, sql: Any, bad: Any
) -> None:
    """As the LMDB store (InvalidJob, the same messages), and NUL, which PostgreSQL's text cannot hold."""
    calls: list[Callable[[], Any]] = [
        lambda: locks.acquire_lock(bad, "owner", 10),
        lambda: locks.acquire_lock("name", bad, 10),
        lambda: locks.lock_holder(bad),
        lambda: locks.last_lock_holder(bad),
        lambda: locks.release_lock(bad, "owner"),
        lambda: locks.report_worker(bad, stale_after=10),
        lambda: locks.remove_worker(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidJob):
            call()
    assert lock_rows(sql) == [] and worker_rows(sql) == []


def test_the_same_messages_as_the_lmdb_store(locks: PgCoordination, tmp_path: Path) -> None:
    with open_queue(tmp_path / "lmdb") as q:
        lmdb_locks = q._store.locks
        for bad in BAD_IDS[:-1]:
            for call in ("acquire_name", "acquire_owner", "report"):
                errors = []
                for store in (lmdb_locks, locks):
                    with pytest.raises(InvalidJob) as raised:
                        if call == "acquire_name":
                            store.acquire_lock(bad, "owner", 10)
                        elif call == "acquire_owner":
                            store.acquire_lock("name", bad, 10)
                        else:
                            store.report_worker(bad, stale_after=10)
                    errors.append(str(raised.value))
                assert errors[0] == errors[1], (bad, call)


# ------------------------------------------------------------------------------------------ workers


def test_a_worker_report_round_trips_and_is_stored(locks: PgCoordination, sql: Any, clock: FakeClock) -> None:
    locks.report_worker(
        "w-1", stale_after=15.0, pid=4242, host="box", started_at=clock.now - 100, queues=("mail", "reports"),
        threads=8, current_jobs=(11, 12, 13), processed=500, failed=3,
    )  # fmt: skip
    expected = WorkerInfo("w-1", 4242, "box", clock.now - 100, clock.now, 15.0, ("mail", "reports"), 8,
                          (11, 12, 13), 500, 3)  # fmt: skip
    assert locks.workers() == [expected]
    assert worker_rows(sql) == [("w-1", us(clock.now), 15.0)]
    first = clock.now
    clock.advance(3)
    locks.report_worker("w-2", stale_after=5.0)
    locks.report_worker("w-2", stale_after=5.0, processed=7)
    (info,) = [w for w in locks.workers() if w.worker_id == "w-2"]
    assert (info.pid, info.started_at, info.last_heartbeat, info.queues, info.processed) == (
        os.getpid(),
        clock.now,
        clock.now,
        None,
        7,
    )
    clock.advance(1)
    locks.report_worker("w-1", stale_after=15.0)
    (info,) = [w for w in locks.workers() if w.worker_id == "w-1"]
    assert info.started_at == first - 100, "a report without started_at keeps the last one's"


def test_workers_live_until_stale_and_are_pruned(locks: PgCoordination, sql: Any, clock: FakeClock) -> None:
    for worker_id, stale_after in [("b", 1.0), ("a", 2.0), ("B", 100.0), ("é", 100.0)]:
        locks.report_worker(worker_id, stale_after=stale_after)
    assert [w.worker_id for w in locks.workers()] == ["B", "a", "b", "é"], "code point order, as LMDB's"
    assert locks.prune_workers() == 0
    clock.advance(1)
    assert [w.worker_id for w in locks.workers()] == ["B", "a", "b", "é"], "alive at exactly stale_after"
    clock.advance(0.5)
    assert [w.worker_id for w in locks.workers()] == ["B", "a", "é"]
    assert [w.worker_id for w in locks.workers(include_dead=True)] == ["B", "a", "b", "é"]
    assert locks.prune_workers() == 1
    assert sorted(row[0] for row in worker_rows(sql)) == ["B", "a", "é"]
    assert locks.remove_worker("a") and not locks.remove_worker("a")
    assert sorted(w.worker_id for w in locks.workers(include_dead=True)) == ["B", "é"]


# ------------------------------------------------------------------------------------------ the same as LMDB


def _flow_script(rng: random.Random, clock: FakeClock, steps: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    keys = ["*", "queue:a", "name:x", "name:y"]
    for _ in range(steps):
        clock.advance(rng.choice([0, 0, 0.125, 0.25, 0.5, 1, 5, 30, -2]))
        some = rng.sample(keys, rng.randint(0, 3))
        roll = rng.random()
        if roll < 0.08:
            yield "set_limit", (rng.choice(keys), parse_rate(rng.choice(["4/s", "2/m", "10/5s", "1/s"]),
                                                              burst=rng.choice([None, 1, 3])))  # fmt: skip
        elif roll < 0.12:
            yield "set_breaker", (rng.choice(keys), BreakerPolicy(rng.randint(1, 3), rng.choice([1, 5, 20])))
        elif roll < 0.14:
            yield (
                rng.choice(["remove_limit", "reset_limit", "remove_breaker", "reset_breaker"]),
                (rng.choice(keys),),
            )
        elif roll < 0.40:
            yield "take", (some, rng.choice([1, 1, 2]))
        elif roll < 0.50:
            yield "take_up_to", (rng.choice(keys), rng.randint(0, 5), rng.choice([0, 0, 1, 3]))
        elif roll < 0.72:
            yield "admit", (some, 1)
        elif roll < 0.80:
            yield "give_back", (some, 1)
        else:
            yield "record", (some, rng.random() < 0.4)


def _call(store: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "take_up_to":
        key, most, back = args
        return store.take_up_to(key, most, give_back=back)
    return getattr(store, method)(*args)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flow_does_what_the_lmdb_store_does(
    control: PgControl, sql: Any, clock: FakeClock, tmp_path: Path, seed: int
) -> None:
    """The same random script of every FlowOps call (the clock stepping forward, and sometimes back) on
    both stores: the same answers, the same state, the same bytes stored for every key."""
    rng = random.Random(seed)
    with open_queue(tmp_path / "lmdb", clock=clock) as q:
        lmdb = q._store.control
        for step, (method, args) in enumerate(_flow_script(rng, clock, 300)):
            assert _call(control, method, args) == _call(lmdb, method, args), (step, method, args)
            if step % 25 == 0 or method.startswith(("set", "remove", "reset")):
                assert control.state() == lmdb.state(), (step, method, args)
        final = lmdb.state()
        assert control.state() == final
        lmdb_rows = [("limit", k, pack_limit(v)) for k, v in final.limits.items()]
        lmdb_rows += [("breaker", k, pack_breaker(v)) for k, v in final.breakers.items()]
        assert flow_rows(sql) == sorted(lmdb_rows)


def _lock_script(rng: random.Random, clock: FakeClock, steps: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    names, owners = ["leader", "cron"], ["a", "b", "c"]
    for _ in range(steps):
        clock.advance(rng.choice([0, 0.125, 0.5, 1, 4, 10]))  # dyadic steps: times exact in microseconds too
        roll = rng.random()
        if roll < 0.4:
            yield "acquire_lock", (rng.choice(names), rng.choice(owners), rng.choice([1, 5, 10.5]))
        elif roll < 0.55:
            yield "release_lock", (rng.choice(names), rng.choice(owners))
        elif roll < 0.65:
            yield "lock_holder", (rng.choice(names),)
        elif roll < 0.75:
            yield "last_lock_holder", (rng.choice(names),)
        elif roll < 0.88:
            yield "report_worker", (rng.choice(owners), rng.choice([2.0, 8.0]), rng.randint(0, 9))
        elif roll < 0.92:
            yield "remove_worker", (rng.choice(owners),)
        elif roll < 0.96:
            yield "workers", (rng.random() < 0.5,)
        else:
            yield "prune_workers", ()


def _lock_call(store: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "report_worker":
        worker_id, stale_after, processed = args
        return store.report_worker(worker_id, stale_after=stale_after, processed=processed, pid=1, host="h")
    if method == "workers":
        return store.workers(include_dead=args[0])
    return getattr(store, method)(*args)


@pytest.mark.parametrize("seed", [1, 2])
def test_locks_and_workers_do_what_the_lmdb_store_does(
    locks: PgCoordination, clock: FakeClock, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    with open_queue(tmp_path / "lmdb", clock=clock) as q:
        lmdb = q._store.locks
        for step, (method, args) in enumerate(_lock_script(rng, clock, 300)):
            assert _lock_call(locks, method, args) == _lock_call(lmdb, method, args), (step, method, args)
        assert locks.workers(include_dead=True) == lmdb.workers(include_dead=True)


# ------------------------------------------------------------------------------------------ processes


def drain_bucket(url: str, key: str, now: float, go: str) -> None:
    """Child: take from ``key`` (take, and take_up_to of 1-3) on a stopped clock until it is empty; report
    how many tokens it got."""
    db = Connections(url)
    control = PgControl(db, lambda: now)
    control.version()  # connected before the start
    send({"ready": True})
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    rng = random.Random(os.getpid())
    got = calls = 0
    while True:
        calls += 1
        if rng.random() < 0.5:
            granted, _ = control.take([key])
            got += granted
            if not granted:
                break
        else:
            taken = control.take_up_to(key, rng.randint(1, 3))
            got += taken
            if not taken:
                break
    db.close()
    send({"got": got, "calls": calls})


@pytest.mark.slow
def test_two_processes_emptying_one_bucket_take_exactly_its_tokens(
    control: PgControl, pg_url: str, sql: Any, clock: FakeClock, tmp_path: Path, children: Children
) -> None:
    """A bucket of 400 tokens on a stopped clock (nothing accrues), emptied by two processes at once: they
    get 400 between them, each some: never both the same token, the last one included."""
    burst = 400
    control.set_limit("name:api", parse_rate("1/d", burst=burst))
    go = tmp_path / "go"
    takers = [children.start(drain_bucket, pg_url, "name:api", clock.now, str(go)) for _ in range(2)]
    children.together(go, takers)
    reports = [taker.recv() for taker in takers]
    for taker in takers:
        finish(taker)
    assert sum(report["got"] for report in reports) == burst, reports
    assert all(report["got"] > 0 for report in reports), reports
    assert stored_limits(sql)["name:api"].bucket.tokens_micro == 0


def admit_each(url: str, keys: list[str], now: float, go: str) -> None:
    """Child: admit each key once, in order, on a stopped clock; report the keys it was admitted for."""
    db = Connections(url)
    control = PgControl(db, lambda: now)
    control.version()
    send({"ready": True})
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    admitted = [key for key in keys if control.admit([key])[0]]
    db.close()
    send({"admitted": admitted})


@pytest.mark.slow
def test_a_half_open_breakers_trial_goes_to_one_process(
    control: PgControl, pg_url: str, clock: FakeClock, tmp_path: Path, children: Children
) -> None:
    """60 breakers due for their trial, three processes admitting each in turn at once: every trial goes to
    exactly one of them."""
    keys = [f"name:job{n}" for n in range(60)]
    for key in keys:
        open_breaker(control, key, threshold=1, timeout=10)
    go = tmp_path / "go"
    racers = [children.start(admit_each, pg_url, keys, clock.now + 10, str(go)) for _ in range(3)]
    children.together(go, racers)
    reports = [racer.recv()["admitted"] for racer in racers]
    for racer in racers:
        finish(racer)
    assert sorted(key for admitted in reports for key in admitted) == sorted(keys), reports
    for key in keys:
        assert stored_state(control, key) is BreakerState.HALF_OPEN


def take_locks(url: str, names: list[str], owner: str, now: float, go: str) -> None:
    """Child: try to take each lock once, in order, on a stopped clock; report the ones it got."""
    db = Connections(url)
    locks = PgCoordination(db, lambda: now)
    locks.lock_holder("warm-up")
    send({"ready": True})
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    got = [name for name in names if locks.acquire_lock(name, owner, 60)]
    db.close()
    send({"got": got})


@pytest.mark.slow
def test_processes_racing_for_new_locks_get_one_holder_each(
    locks: PgCoordination, pg_url: str, clock: FakeClock, tmp_path: Path, children: Children
) -> None:
    """Four processes taking the same 50 never-used locks at once (each lock's row created by whichever
    comes first): every lock has exactly one holder, and it is who the store says holds it."""
    names = [f"lock-{n}" for n in range(50)]
    go = tmp_path / "go"
    racers = [children.start(take_locks, pg_url, names, f"p{n}", clock.now, str(go)) for n in range(4)]
    children.together(go, racers)
    reports = {f"p{n}": racer.recv()["got"] for n, racer in enumerate(racers)}
    for racer in racers:
        finish(racer)
    winners = {name: [owner for owner, got in reports.items() if name in got] for name in names}
    assert all(len(owners) == 1 for owners in winners.values()), winners
    for name, (owner,) in winners.items():
        holder = locks.lock_holder(name)
        assert holder is not None and holder.owner == owner


def hold_lock(url: str, name: str, now: float, ttl: float) -> None:
    """Child: take ``name`` at ``now`` for ``ttl``, say so, and wait to be killed."""
    db = Connections(url)
    locks = PgCoordination(db, lambda: now)
    send({"took": locks.acquire_lock(name, "child", ttl)})
    time.sleep(CHILD_TIMEOUT)


@pytest.mark.slow
def test_a_killed_holders_lock_is_free_once_its_ttl_passed_on_the_clock(
    pg_url: str, db: Connections, clock: FakeClock, children: Children
) -> None:
    holder = children.start(hold_lock, pg_url, "leader", clock.now, 30.0)
    assert holder.recv() == {"took": True}
    kill(holder)
    late = FakeClock(clock.now + 29.999)
    assert not PgCoordination(db, late).acquire_lock("leader", "parent", 30)
    assert PgCoordination(db, late).lock_holder("leader") == LockHolder("child", clock.now + 30, clock.now)
    late.advance(0.001)
    assert PgCoordination(db, late).lock_holder("leader") is None
    assert PgCoordination(db, late).acquire_lock("leader", "parent", 30)


def churn(url: str, keys: list[str], seconds: float, seed: int, go: str) -> None:
    """Child: admit, give back, take, take_up_to, record and set on random subsets of ``keys`` (in random
    order) for ``seconds``; report how many calls it made and the errors it met."""
    db = Connections(url)
    control = PgControl(db, time.time)
    control.version()
    send({"ready": True})
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    rng = random.Random(seed)
    calls, errors = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        some = rng.sample(keys, rng.randint(1, len(keys)))
        method = rng.choice(["admit", "give_back", "take", "record", "take_up_to", "set_limit"])
        try:
            if method == "record":
                control.record(some, rng.random() < 0.5)
            elif method == "take_up_to":
                control.take_up_to(some[0], 3, give_back=1)
            elif method == "set_limit":
                control.set_limit(some[0], parse_rate("1000/s"))
            else:
                getattr(control, method)(some)
        except Exception as exc:
            errors.append(f"{method}: {type(exc).__name__}: {exc}")
        calls += 1
    db.close()
    send({"calls": calls, "errors": errors[:5]})


@pytest.mark.slow
def test_processes_on_overlapping_keys_never_deadlock(
    control: PgControl, pg_url: str, tmp_path: Path, children: Children
) -> None:
    """Three processes locking random subsets of five keys, in random orders, in every kind of flow call,
    for 1.5 s: no deadlock (PostgreSQL would detect one and fail a call), no other error, and work done."""
    keys = ["*", "queue:a", "queue:b", "name:x", "name:y"]
    for key in keys:
        control.set_limit(key, parse_rate("1000/s"))
        control.set_breaker(key, BreakerPolicy(3, 0.01))
    go = tmp_path / "go"
    workers = [children.start(churn, pg_url, keys, 1.5, seed, str(go)) for seed in range(3)]
    children.together(go, workers)
    reports = [worker.recv() for worker in workers]
    for worker in workers:
        finish(worker)
    assert all(report["errors"] == [] for report in reports), reports
    assert all(report["calls"] > 20 for report in reports), reports
