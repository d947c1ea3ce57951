"""The PostgreSQL store's ``Store.workflows.export_nodes``/``rewrite`` (``[sc_workflow_rewrite]``): the
user's data kept on ``qm_workflow_nodes`` (a waiting node's ``payload`` and ``metadata``, a node's
``result`` and ``error``), read by primary key order and replaced in place by one statement where it is
still what was read (``manage.py queue_rekey``). The statement's own test of the row (an ``UPDATE`` that
meets a row a settling changed meanwhile tests it again once that commits) is the compare-and-set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract.workflows import NodeData, NodeRef

_EXPORT = """
SELECT workflow_id, idx, payload, metadata::text, result, error FROM qm_workflow_nodes
WHERE (workflow_id, idx) > (%s, %s)
  AND (payload IS NOT NULL OR metadata IS NOT NULL OR result IS NOT NULL OR error IS NOT NULL)
ORDER BY workflow_id, idx LIMIT %s"""

_REWRITE = """
UPDATE qm_workflow_nodes n
SET payload = c.payload, metadata = c.metadata::jsonb, result = c.result, error = c.error
FROM unnest(%(wf)s::bigint[], %(idx)s::integer[], %(payload)s::bytea[], %(metadata)s::text[],
            %(result)s::bytea[], %(error)s::text[], %(old_payload)s::bytea[], %(old_metadata)s::text[],
            %(old_result)s::bytea[], %(old_error)s::text[])
     AS c(wf, idx, payload, metadata, result, error, old_payload, old_metadata, old_result, old_error)
WHERE n.workflow_id = c.wf AND n.idx = c.idx
  AND n.payload IS NOT DISTINCT FROM c.old_payload AND n.metadata IS NOT DISTINCT FROM c.old_metadata::jsonb
  AND n.result IS NOT DISTINCT FROM c.old_result AND n.error IS NOT DISTINCT FROM c.old_error
RETURNING n.workflow_id, n.idx"""


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def export_nodes(store: Any, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
    start = (-1, -1) if after is None else after
    conn = store.db.connection()
    with store.db.guard(conn):
        rows = conn.execute(_EXPORT, (*start, limit)).fetchall()
    return [
        (
            (int(workflow_id), int(idx)),
            NodeData(
                None if payload is None else bytes(payload),
                None if metadata is None else metadata.encode(),
                None if result is None else bytes(result),
                error,
            ),
        )
        for workflow_id, idx, payload, metadata, result, error in rows
    ]


def rewrite(store: Any, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
    params = {
        "wf": [ref[0] for ref, _o, _n in changes], "idx": [ref[1] for ref, _o, _n in changes],
        "payload": [new.payload for _r, _o, new in changes],
        "metadata": [_text(new.metadata) for _r, _o, new in changes],
        "result": [new.result for _r, _o, new in changes], "error": [new.error for _r, _o, new in changes],
        "old_payload": [old.payload for _r, old, _n in changes],
        "old_metadata": [_text(old.metadata) for _r, old, _n in changes],
        "old_result": [old.result for _r, old, _n in changes],
        "old_error": [old.error for _r, old, _n in changes],
    }  # fmt: skip
    with store.db.transaction() as conn:
        rows = conn.execute(_REWRITE, params).fetchall()
    return sorted((int(workflow_id), int(idx)) for workflow_id, idx in rows)
