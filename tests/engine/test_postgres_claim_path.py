"""The PostgreSQL store's one-job path (issue 35): a claim is one statement unless a scheduled job is due,
and claims and acknowledgements bring back the flow control's version, so that a busy consumer reads it in
no round trip of its own. What is stored is checked beside the statements that ran."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from queue_max_django.engine.ratelimit import parse_rate
from queue_max_django.engine.stores.postgres import control
from queue_max_django.engine.stores.postgres.store import PostgresStore
from queue_max_django.engine.tokens import new_token
from tests.engine.conftest import FakeClock
from tests.store_contract.conftest import LEASE, T0, put

pytestmark = pytest.mark.postgres

PROMOTE = "WITH due AS"  # upkeep.PROMOTE's first words
CLAIM = "WITH picked AS"  # job_sql.CLAIM's
FLOW_READ = "SELECT version FROM qm_flow WHERE id = 1"  # PgControl.version()'s own statement


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements every psycopg connection of this process runs (their first words)."""
    texts: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self: Any, query: Any, params: Any = None, **options: Any) -> Any:
        texts.append(str(query).strip())
        return execute(self, query, params, **options)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    return texts


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    opened = PostgresStore.open(pg_url, clock=FakeClock(T0))
    try:
        yield opened
    finally:
        opened.close(False)


def started(texts: list[str], prefix: str) -> int:
    return sum(text.startswith(prefix) for text in texts)


def test_a_claim_is_one_statement_until_a_scheduled_job_is_due_then_it_is_promoted_first(
    store: PostgresStore, sent: list[str]
) -> None:
    low, later = put(store, T0, "low", "later")
    [due] = put(store, T0, "due", priority=5, ready_at=T0 + 10)
    sent.clear()
    [first] = store.claim(0, T0, None, LEASE, new_token(), None, "w1", 1).claimed
    assert first.job_id == low
    assert sent and all(text.startswith(CLAIM) for text in sent), sent  # no promotion: nothing is due
    sent.clear()
    # The caller's view says nothing is due (it passes no hint): the claim still takes the due job of
    # higher priority, not the older one of lower priority.
    [second] = store.claim(0, T0 + 10, None, LEASE, new_token(), None, "w1", 1).claimed
    assert second.job_id == due
    assert started(sent, PROMOTE) == 1 and started(sent, CLAIM) == 2, sent
    assert store.counts()["pending"] == 1 and store.counts()["scheduled"] == 0
    assert store.counts()["running"] == 2
    assert store.job(T0 + 10, later).state.value == "pending"  # type: ignore[union-attr]
    assert store.verify() == []


def test_claims_and_acks_bring_back_the_flow_version_another_process_committed(
    store: PostgresStore, pg_url: str, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "VERSION_TTL", 3600.0)  # a kept version is never read again by time
    other = PostgresStore.open(pg_url, clock=FakeClock(T0))
    try:
        first = store.control.version()
        put(store, T0, "a", "b")
        other.control.set_limit("queue:elsewhere", parse_rate("10/s"))
        assert store.control.version() == first  # kept: another process's write is not seen yet
        sent.clear()
        token = new_token()
        [job] = store.claim(0, T0, None, LEASE, token, None, "w1", 1).claimed
        assert store.control.version() > first  # the claim brought the committed version back
        assert started(sent, FLOW_READ) == 0, sent
        seen = store.control.version()
        other.control.set_limit("queue:elsewhere", parse_rate("20/s"))
        sent.clear()
        store.complete(T0, job.job_id, token, None, False)
        assert store.control.version() > seen  # and so did the acknowledgement
        assert started(sent, FLOW_READ) == 0, sent
        assert store.counts()["done"] == 1 and store.counts()["pending"] == 1
    finally:
        other.close(False)
