"""The slot rows of the PostgreSQL store's limits (``postgres/limitslots.py``, schema version 8; before it a
claim counted running rows): ``schema.create`` (what ``migrate`` runs) brings a version 6 database up, and a
limited job running across the upgrade holds its slot; the vacuum forgets the free slot rows not taken since
its cutoff, never a taken one."""

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
        assert schema.version(conn) == schema.SCHEMA_VERSION >= schema.SLOTS_VERSION
        assert conn.execute("SELECT key, slot, job_id FROM qm_limit_slots").fetchall() == [("task:t", 0, a)]
    with location.open_queue() as queue:
        store = queue._store
        assert store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 1).claimed == []
        store.complete(T0, a, taken[0].token, None, False)
        again = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 1).claimed
        assert [c.job_id for c in again] == [b]


def test_the_vacuum_forgets_free_slots_not_taken_since_its_cutoff_and_keeps_taken_ones(pg_url: str) -> None:
    location = StoreLocation("postgres", pg_url)
    with location.open_queue() as queue:
        store = queue._store
        lput(store, T0, "a", "b", "c", limits=[("task:t", 3)])
        [d] = lput(store, T0, "d", limits=[("task:u", 3)])
        claimed = store.concurrency.claim(0, T0, None, LEASE, new_token(), "w1", None, 4).claimed
        assert len(claimed) == 4
        for job in claimed:
            if job.job_id != d:
                store.complete(T0, job.job_id, job.token, None, False)

        def slots() -> list[tuple[str, int | None]]:
            return [
                (key, job_id) for key, job_id in store.rows("SELECT key, job_id FROM qm_limit_slots", None)
            ]

        assert len(slots()) == 4
        store.vacuum(T0 + 10, T0 - 1, 0)  # none was taken before the cutoff
        assert len(slots()) == 4
        store.vacuum(T0 + 10, T0 + 1, 0)
        assert slots() == [("task:u", d)]  # the running job's slot stays
