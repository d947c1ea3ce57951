"""The PostgreSQL store settles the nodes of an acknowledged batch together (schema version 12: the
statement trigger ``qm_wf_finished``, workflow_schema.py): a chord's callback row is changed once per
batch, not once per member, so two workers' batches do not queue for its lock member by member; children
that two batches share are locked in one order, so two ackers never deadlock; and what is stored is what
the walk of one parent at a time stored (the count, one release)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.postgres import schema
from queue_max_django.engine.tokens import new_token
from queue_max_django.engine.workflows import NewNode, NodeState
from tests import pgserver
from tests.engine.locations import StoreLocation
from tests.store_contract.conftest import LEASE, T0, pack, spec

pytestmark = pytest.mark.postgres

WAIT = 10.0  # seconds, at most, for a backend to be seen waiting for a lock


@pytest.fixture
def queue(pg_url: str) -> Iterator[Queue]:
    with StoreLocation("postgres", pg_url).open_queue() as opened:
        yield opened


def claim_all(queue: Queue, count: int) -> dict[int, tuple[int, bytes]]:
    """Claim ``count`` jobs. -> {node index: (job id, token)}."""
    store: Any = queue._store
    token = new_token()
    claimed = store.claim(0, T0, None, LEASE, token, None, "w1", count).claimed
    assert len(claimed) == count
    with pgserver.connect(store.url) as conn:
        rows = conn.execute(
            "SELECT id, (metadata -> '_workflow' ->> 1)::int FROM qm_jobs WHERE id = ANY(%s)",
            ([job.job_id for job in claimed],),
        ).fetchall()
    return {idx: (job_id, token) for job_id, idx in rows}


def node_row(url: str, workflow_id: int, idx: int) -> tuple[Any, ...]:
    with pgserver.connect(url) as conn:
        row = conn.execute(
            "SELECT state, waiting, job_id FROM qm_workflow_nodes WHERE workflow_id = %s AND idx = %s",
            (workflow_id, idx),
        ).fetchone()
    return tuple(row)


def jobs_of_node(url: str, workflow_id: int, idx: int) -> int:
    with pgserver.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM qm_jobs "
            "WHERE metadata -> '_workflow' = jsonb_build_array(%s::bigint, %s::int)",
            (workflow_id, idx),
        ).fetchone()
    return int(found[0])


def test_a_batch_of_a_chords_members_changes_the_callbacks_count_once(queue: Queue) -> None:
    """30 members acknowledged in one call: the callback's row is written once (a test trigger logs each
    change of its count), its count is 20 after, and the last 20 in one call release it exactly once."""
    store: Any = queue._store
    members = [NewNode(f"m{i}", pack(i), spec()) for i in range(50)]
    callback = NewNode("cb", pack("cb"), spec(), tuple(range(50)))
    workflow_id = store.workflows.put(T0, 0, [*members, callback])
    held = claim_all(queue, 50)
    with pgserver.connect(store.url) as conn:
        conn.execute("CREATE TABLE test_count_changes (idx integer NOT NULL, waiting integer NOT NULL)")
        conn.execute(
            "CREATE FUNCTION test_log_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO test_count_changes VALUES (NEW.idx, NEW.waiting); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER test_log_count AFTER UPDATE ON qm_workflow_nodes FOR EACH ROW "
            "WHEN (OLD.waiting IS DISTINCT FROM NEW.waiting) EXECUTE FUNCTION test_log_count()"
        )
    try:
        first = [(held[i][0], held[i][1], pack(i)) for i in range(30)]
        assert store.complete_many(T0 + 1, first, False) == {}
        assert node_row(store.url, workflow_id, 50) == ("waiting", 20, None)
        rest = [(held[i][0], held[i][1], pack(i)) for i in range(30, 50)]
        assert store.complete_many(T0 + 2, rest, False) == {}
        with pgserver.connect(store.url) as conn:
            changes = conn.execute("SELECT idx, waiting FROM test_count_changes").fetchall()
    finally:
        with pgserver.connect(store.url) as conn:
            conn.execute("DROP TABLE test_count_changes")
            conn.execute("DROP TRIGGER test_log_count ON qm_workflow_nodes")
            conn.execute("DROP FUNCTION test_log_count()")
    assert changes == [(50, 20), (50, 0)]  # once per batch (the row trigger wrote it 50 times)
    state, waiting, job_id = node_row(store.url, workflow_id, 50)
    assert (state, waiting) == ("queued", 0) and job_id is not None
    assert jobs_of_node(store.url, workflow_id, 50) == 1
    found = store.workflows.get(T0 + 2, workflow_id)
    assert [node.state for node in found.nodes[:50]] == [NodeState.SUCCEEDED] * 50
    with pgserver.connect(store.url) as conn:
        results = conn.execute(
            "SELECT result FROM qm_workflow_nodes WHERE workflow_id = %s AND idx < 50 ORDER BY idx",
            (workflow_id,),
        ).fetchall()
    assert [bytes(row[0]) for row in results] == [pack(i) for i in range(50)]


def waiting_for_locks(url: str, count: int) -> None:
    """Return once ``count`` backends of the database wait for a lock (bounded: ``WAIT``)."""
    deadline = time.monotonic() + WAIT
    with pgserver.connect(url) as conn:
        while True:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if found >= count:
                return
            assert time.monotonic() < deadline, f"{found} backends wait for a lock, not {count}"
            time.sleep(0.01)


def test_two_batches_that_share_children_lock_them_in_one_order(queue: Queue) -> None:
    """Batch A ends p1 (child c1) and p2 (child c2); batch B ends p3 (child c2) and p4 (child c1). With c1
    held by a third transaction, A waits for c1, then B starts: settled one parent at a time, in the rows'
    order, B would lock c2 and wait for c1, and A, given c1, would wait for c2: a deadlock. Both batches now
    lock c1 before c2: both end, and each child is released once."""
    store: Any = queue._store
    nodes = [NewNode(f"p{i}", pack(i), spec()) for i in range(1, 5)]
    nodes += [NewNode("c1", pack("c1"), spec(), (0, 3)), NewNode("c2", pack("c2"), spec(), (1, 2))]
    workflow_id = store.workflows.put(T0, 0, nodes)
    held = claim_all(queue, 4)
    errors: list[BaseException] = []

    def ack(indexes: tuple[int, ...]) -> None:
        try:
            skipped = store.complete_many(T0 + 1, [(*held[i], None) for i in indexes], False)
            assert skipped == {}
        except BaseException as error:  # the test reads it
            errors.append(error)

    with pgserver.connect(store.url) as blocker, blocker.transaction():
        blocker.execute(
            "SELECT 1 FROM qm_workflow_nodes WHERE workflow_id = %s AND idx = 4 FOR UPDATE", (workflow_id,)
        )
        first = threading.Thread(target=ack, args=((0, 1),))
        first.start()
        waiting_for_locks(store.url, 1)
        second = threading.Thread(target=ack, args=((2, 3),))
        second.start()
        waiting_for_locks(store.url, 2)
    first.join(WAIT)
    second.join(WAIT)
    assert not first.is_alive() and not second.is_alive()
    assert errors == []
    for idx in (4, 5):
        state, waiting, job_id = node_row(store.url, workflow_id, idx)
        assert (state, waiting) == ("queued", 0) and job_id is not None
        assert jobs_of_node(store.url, workflow_id, idx) == 1


def test_a_failed_member_in_a_batch_cancels_the_callback_once_the_rest_succeed(queue: Queue) -> None:
    """A member's dead letter dooms the callback; the others, acknowledged in one batch after it, bring its
    count to zero: it is cancelled then (its children's walk), never released, its count stored as 0."""
    store: Any = queue._store
    members = [NewNode(f"m{i}", pack(i), spec(max_retries=0)) for i in range(5)]
    nodes = [
        *members,
        NewNode("cb", pack("cb"), spec(), tuple(range(5))),
        NewNode("after", pack(0), spec(), (5,)),
    ]
    workflow_id = store.workflows.put(T0, 0, nodes)
    held = claim_all(queue, 5)
    store.fail(T0 + 1, *held[0], ("boom", "ValueError", None), None, False)
    assert node_row(store.url, workflow_id, 5) == ("waiting", 4, None)
    assert store.complete_many(T0 + 2, [(*held[i], None) for i in range(1, 5)], False) == {}
    found = store.workflows.get(T0 + 2, workflow_id)
    assert [node.state for node in found.nodes] == [
        NodeState.FAILED, *[NodeState.SUCCEEDED] * 4, NodeState.CANCELLED, NodeState.CANCELLED,
    ]  # fmt: skip
    assert node_row(store.url, workflow_id, 5)[1] == 0
    assert jobs_of_node(store.url, workflow_id, 5) == jobs_of_node(store.url, workflow_id, 6) == 0


def test_schema_version_11_is_brought_up_to_the_statement_trigger(pg_url: str) -> None:
    """A database of version 11 (the row trigger) gets the statement trigger from ``schema.create``."""
    with pgserver.connect(pg_url) as conn:
        conn.execute("DROP TRIGGER qm_wf_finished ON qm_finished")
        conn.execute(
            "CREATE TRIGGER qm_wf_finished AFTER INSERT ON qm_finished FOR EACH ROW "
            "WHEN (NEW.metadata ? '_workflow') EXECUTE FUNCTION qm_wf_removed()"
        )
        conn.execute("UPDATE qm_meta SET value = '11' WHERE key = 'schema_version'")
        schema.create(conn)
        assert schema.version(conn) == schema.SCHEMA_VERSION == 12
        level = conn.execute(
            "SELECT action_orientation FROM information_schema.triggers WHERE trigger_name = 'qm_wf_finished'"
        ).fetchall()
        assert level == [("STATEMENT",)]


def _count_updates() -> list[str]:
    """The settling's quick updates of a waiting child's count, as the DDL has them, with their plpgsql
    variables as parameters ($1 workflow, $2 child, $3 parents ended; the parents succeeded)."""
    from queue_max_django.engine.stores.postgres.workflow_schema import workflow_ddl

    ddl = workflow_ddl(0, 1, 2, -1, "qm_test")
    found = re.findall(r"UPDATE qm_workflow_nodes SET waiting = waiting - (\S+)\n\s*WHERE ([^;]+);", ddl)
    statements = []
    for by, where in found:
        workflow, child = re.findall(r"workflow_id = (\S+) AND idx = (\S+) AND", where)[0]
        names = {workflow: "$1", child: "$2"}
        names[by] = "$3"
        names["p_st"] = "'succeeded'"  # qm_wf_child's: how the parents ended
        for name, param in sorted(names.items(), key=lambda item: -len(item[0])):
            where = where.replace(name, param)
        statements.append(f"UPDATE qm_workflow_nodes SET waiting = waiting - $3 WHERE {where}")
    return statements


def test_a_childs_count_is_found_by_its_key_not_by_the_waiting_nodes(queue: Queue) -> None:
    """Each step of a chain of 3,000 takes one from the next step's count: the plan PL/pgSQL caches for that
    update (a generic one, after five runs) finds the child by its primary key. With the state tested as an
    indexed column it walked the (workflow_id, state) index over every node still waiting: the steps of a
    chain of n read n(n-1)/2 rows in all, whenever the table's statistics say that few nodes wait (the
    usual case: most nodes of a store have ended), as they do here."""
    store: Any = queue._store
    with pgserver.connect(store.url) as conn:
        # the statistics of a store whose nodes have ended: 1,000 old workflows' 20,000 (ids of their own,
        # below 0), analyzed
        conn.execute(
            "INSERT INTO qm_workflows (id, created_us, nodes) "
            "SELECT -g, 0, 20 FROM generate_series(1, 1000) AS g"
        )
        conn.execute(
            "INSERT INTO qm_workflow_nodes "
            "(workflow_id, idx, name, parents, children, always, waiting, state) "
            "SELECT -w, i, 'n', '{}', '{}', false, 0, 'succeeded' "
            "FROM generate_series(1, 1000) AS w, generate_series(0, 19) AS i"
        )
        conn.execute("ANALYZE qm_workflow_nodes")
    nodes = [NewNode("s0", pack(0), spec())]
    nodes += [NewNode(f"s{i}", pack(i), spec(), (i - 1,)) for i in range(1, 3000)]
    workflow_id = store.workflows.put(T0, 0, nodes)
    statements = _count_updates()
    assert len(statements) == 2  # qm_wf_child's, and the batch settling's copy of it
    with pgserver.connect(store.url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for number, statement in enumerate(statements):
            conn.execute(f"PREPARE count_update_{number} (bigint, integer, integer) AS {statement}")
            conn.execute("BEGIN")
            explained = conn.execute(
                f"EXPLAIN (ANALYZE) EXECUTE count_update_{number} ({workflow_id:d}, 1500, 1)"
            )
            plan = "\n".join(row[0] for row in explained)
            conn.execute("ROLLBACK")
            assert "qm_workflow_nodes_pkey" in plan, plan
            assert "Rows Removed by Filter: 1\n" in plan + "\n", plan  # the one row of the key, not 2,999
