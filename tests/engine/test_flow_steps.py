"""The pure steps of the flow operations (``flowstate``), which both stores apply inside their transaction:
what each returns is exactly what the store writes, from the stored values and ``now`` alone."""

from __future__ import annotations

from queue_max_django.engine import flowstate
from queue_max_django.engine.breaker import BreakerPolicy, BreakerState
from queue_max_django.engine.flowstate import unpack_breaker, unpack_limit
from queue_max_django.engine.ratelimit import Rate

NOW = 1_700_000_000.0
ONE_A_MINUTE = Rate(count=1, seconds=60, burst=1)
TEN_A_SECOND = Rate(count=10, seconds=1, burst=10)


def test_a_take_is_all_or_nothing_and_a_refusal_writes_nothing() -> None:
    limits = {
        "*": flowstate.limit_set("*", None, TEN_A_SECOND, NOW),
        "queue:a": flowstate.limit_set("queue:a", None, ONE_A_MINUTE, NOW),
    }
    granted, wait, writes = flowstate.tokens_taken(limits, ["*", "queue:a", "name:x"], 1, NOW)
    assert granted and wait == 0.0 and set(writes) == {"*", "queue:a"}
    limits.update(writes)
    granted, wait, writes = flowstate.tokens_taken(limits, ["*", "queue:a"], 1, NOW)
    assert not granted and 59.9 < wait <= 60.0 and writes == {}  # "*" keeps its token too
    assert unpack_limit(limits["*"]).bucket.tokens == 9


def test_a_refused_take_keeps_the_new_time_base_after_the_clock_was_set_back() -> None:
    limits = {"queue:a": flowstate.limit_set("queue:a", None, ONE_A_MINUTE, NOW)}
    _granted, _wait, writes = flowstate.tokens_taken(limits, ["queue:a"], 1, NOW)
    granted, _wait, writes = flowstate.tokens_taken(writes, ["queue:a"], 1, NOW - 30)
    assert not granted and set(writes) == {"queue:a"}
    assert unpack_limit(writes["queue:a"]).bucket.updated_us == int((NOW - 30) * 1_000_000)


def test_take_up_to_gives_back_then_takes_what_there_is() -> None:
    raw = flowstate.limit_set("*", None, TEN_A_SECOND, NOW)
    taken, raw_after = flowstate.tokens_taken_up_to("*", raw, 25, 0, NOW)
    assert taken == 10 and raw_after is not None
    assert flowstate.tokens_taken_up_to("*", raw_after, 25, 0, NOW) == (0, None)  # none left, nothing written
    taken, _ = flowstate.tokens_taken_up_to("*", raw_after, 25, 3, NOW)
    assert taken == 3


def test_admission_needs_every_breaker_and_every_limit_and_writes_nothing_when_refused() -> None:
    policy = BreakerPolicy(threshold=1, recovery_timeout=10.0)
    breakers = {"name:x": flowstate.breaker_set("name:x", None, policy)}
    limits = {"*": flowstate.limit_set("*", None, TEN_A_SECOND, NOW)}
    breakers.update(flowstate.outcome_counted(breakers, ["*", "name:x"], False, NOW))  # opens it
    assert unpack_breaker(breakers["name:x"]).breaker.state is BreakerState.OPEN
    ok, wait, limit_writes, breaker_writes = flowstate.admitted(limits, breakers, ["*", "name:x"], 1, NOW)
    assert not ok and 9.9 < wait <= 10.0 and (limit_writes, breaker_writes) == ({}, {})

    later = NOW + 10
    ok, _wait, limit_writes, breaker_writes = flowstate.admitted(limits, breakers, ["*", "name:x"], 1, later)
    assert ok and set(limit_writes) == {"*"} and set(breaker_writes) == {"name:x"}  # the one trial
    trial = breaker_writes["name:x"]
    assert unpack_breaker(trial).breaker.state is BreakerState.HALF_OPEN
    handed_limits, handed_breakers = flowstate.handed_back(
        limit_writes, {"name:x": trial}, ["*", "name:x"], 1, later
    )
    assert unpack_limit(handed_limits["*"]).bucket.tokens == 10
    assert unpack_breaker(handed_breakers["name:x"]).breaker.trial_started_us is None  # the next job tries


def test_reset_and_set_keep_what_they_should() -> None:
    policy = BreakerPolicy(threshold=1, recovery_timeout=10.0)
    opened = flowstate.outcome_counted({"*": flowstate.breaker_set("*", None, policy)}, ["*"], False, NOW)[
        "*"
    ]
    changed = unpack_breaker(
        flowstate.breaker_set("*", opened, BreakerPolicy(threshold=3, recovery_timeout=5.0))
    )
    assert changed.breaker.state is BreakerState.OPEN and changed.policy.threshold == 3
    assert unpack_breaker(flowstate.breaker_reset("*", opened) or b"").breaker.state is BreakerState.CLOSED
    emptied = flowstate.tokens_taken_up_to(
        "*", flowstate.limit_set("*", None, TEN_A_SECOND, NOW), 10, 0, NOW
    )[1]
    assert emptied is not None
    assert unpack_limit(flowstate.limit_reset("*", emptied, NOW) or b"").bucket.tokens == 10
