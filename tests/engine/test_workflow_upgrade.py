"""Schema version 5 added workflows to the PostgreSQL store: ``schema.create`` (what ``migrate`` runs)
brings a version 2 database up, and its workflows then run."""

from __future__ import annotations

import pytest

from queue_max_django.engine.stores.postgres import schema
from queue_max_django.engine.workflows import NewNode, NodeState
from tests import pgserver
from tests.engine.locations import StoreLocation
from tests.engine.test_contract_metadata import drop_workflows
from tests.store_contract.conftest import T0, pack, spec

pytestmark = pytest.mark.postgres


def test_create_upgrades_a_version_2_database_to_workflows(pg_url: str) -> None:
    from queue_max_django.engine import SchemaError

    location = StoreLocation("postgres", pg_url)
    with pgserver.connect(pg_url) as conn:
        drop_workflows(conn)
        conn.execute("UPDATE qm_meta SET value = '2' WHERE key = 'schema_version'")
        with pytest.raises(SchemaError, match="schema version 2"):
            location.open_queue()
        schema.create(conn)
        schema.create(conn)  # idempotent
        assert schema.version(conn) == schema.SCHEMA_VERSION >= 5
    with location.open_queue() as queue:
        store = queue._store
        nodes = [NewNode("a", pack("a"), spec()), NewNode("b", pack("b"), spec(), (0,))]
        workflow_id = store.workflows.put(T0, 0, nodes)
        record = queue.get(0)
        record.ack()
        found = store.workflows.get(T0, workflow_id)
        assert found is not None
        assert [node.state for node in found.nodes] == [NodeState.SUCCEEDED, NodeState.QUEUED]
