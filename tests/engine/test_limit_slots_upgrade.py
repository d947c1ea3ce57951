"""Schema version 7 gave the PostgreSQL store's limits slot rows (``postgres/limitslots.py``) where version
6 counted running rows: ``schema.create`` (what ``migrate`` runs) brings a version 6 database up, and a
limited job running across the upgrade holds its slot."""

from __future__ import annotations

import pytest

from queue_max_django.engine.stores.postgres import schema
from queue_max_django.engine.tokens import new_token
from tests import pgserver
from tests.engine.locations import StoreLocation
from tests.store_contract.conftest import LEASE, T0
from tests.store_contract.test_concurrency import lput

pytestmark = pytest.mark.postgres


def test_create_upgrades_a_version_6_database_and_running_jobs_keep_their_slots(pg_url: str) -> None:
    location = StoreLocation("postgres", pg_url)
    with location.open_queue() as queue:
        store = queue._store
        a, b = lput(store, T0, "a", "b", limits=[("task:t", 1)])
        taken = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 1).claimed
        assert [c.job_id for c in taken] == [a]
    with pgserver.connect(pg_url) as conn:  # back to version 6: no slot rows, no dead letter's limits
        conn.execute("DROP TABLE qm_limit_slots")
        conn.execute("DROP FUNCTION qm_take_slots")
        conn.execute("ALTER TABLE qm_finished DROP COLUMN cgroup, DROP COLUMN climits, DROP COLUMN cns")
        conn.execute("UPDATE qm_meta SET value = '6' WHERE key = 'schema_version'")
        schema.create(conn)
        schema.create(conn)  # idempotent
        assert schema.version(conn) == schema.SCHEMA_VERSION == 7
        assert conn.execute("SELECT key, slot, job_id FROM qm_limit_slots").fetchall() == [("task:t", 0, a)]
    with location.open_queue() as queue:
        store = queue._store
        assert store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 1).claimed == []
        store.complete(T0, a, taken[0].token, None, False)
        again = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 1).claimed
        assert [c.job_id for c in again] == [b]
