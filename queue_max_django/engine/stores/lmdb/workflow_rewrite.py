"""The LMDB store's ``Store.workflows.export_nodes``/``rewrite`` (``[sc_workflow_rewrite]``): the user's
data kept on a shard's nodes (``workflows.py`` has their entries: a waiting node's payload and options in its
fixed part, its result and error in its state part), read in key order and replaced in place where it is
still what was read, one write transaction per call (``manage.py queue_rekey``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract.workflows import NodeData, NodeRef, holds
from .workflow_keys import _NODE, _node_key, _pack, _state_key, _unpack

_EMPTY = NodeData(None, None, None, None)


def _data(fixed: list[Any], state: list[Any]) -> NodeData:
    spec = fixed[4]
    return NodeData(fixed[3], None if spec is None else spec[6], state[4], state[5])


def export_nodes(shard: Any, after: NodeRef | None, limit: int) -> list[tuple[NodeRef, NodeData]]:
    db = shard.workflows

    def txn_fn(txn: Any) -> list[tuple[NodeRef, NodeData]]:
        out: list[tuple[NodeRef, NodeData]] = []
        cursor = txn.cursor(db=db)
        start = b"N" if after is None else _node_key(*after)
        if not cursor.set_range(start):
            return out
        for key, value in cursor:
            key = bytes(key)
            if not key.startswith(b"N"):
                break
            ref: NodeRef = _NODE.unpack(key[1:])
            if after is not None and ref <= after:
                continue
            state = txn.get(_state_key(*ref), db=db)
            data = _data(list(_unpack(value)), list(_unpack(state)))
            if data == _EMPTY:
                continue
            out.append((ref, data))
            if len(out) == limit:
                break
        return out

    return shard.env.read(txn_fn)  # type: ignore[no-any-return]


def rewrite(shard: Any, changes: Sequence[tuple[NodeRef, NodeData, NodeData]]) -> list[NodeRef]:
    db = shard.workflows

    def txn_fn(txn: Any) -> list[NodeRef]:
        done: list[NodeRef] = []
        for ref, old, new in changes:
            fixed_key, state_key = _node_key(*ref), _state_key(*ref)
            raw_fixed, raw_state = txn.get(fixed_key, db=db), txn.get(state_key, db=db)
            if raw_fixed is None or raw_state is None:
                continue
            fixed, state = list(_unpack(raw_fixed)), list(_unpack(raw_state))
            if not holds(_data(fixed, state), old):
                continue
            if old.payload is not None or old.metadata is not None:
                fixed[3] = new.payload
                if fixed[4] is not None:
                    fixed[4] = [*fixed[4][:6], new.metadata]
                txn.put(fixed_key, _pack(fixed), db=db)
            if old.result is not None or old.error is not None:
                state[4], state[5] = new.result, new.error
                txn.put(state_key, _pack(state), db=db)
            done.append(ref)
        return done

    return shard.env.write(txn_fn)  # type: ignore[no-any-return]
