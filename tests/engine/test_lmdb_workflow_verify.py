"""LMDB's ``verify()`` (behind ``queue_check``) walks the workflows too (``lmdb/workflow_checks.py``): a
consistent workflow gives no problem; a head whose counts are not its nodes', a node whose count of parents
is wrong, a node entry that does not decode, a queued node whose job is gone and a node entry of no workflow
are each named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.lmdb.workflows import _head_key, _node_key, _state_key
from queue_max_django.engine.workflowing import Step


def diamond(queue: Queue) -> int:
    steps = [
        Step("a", {"n": 0}),
        Step("b", {"n": 1}, parents=(0,)),
        Step("c", {"n": 2}, parents=(0,)),
        Step("d", {"n": 3}, parents=(1, 2)),
    ]
    return queue.workflows.put(steps)


def poke(queue: Queue, workflow_id: int, change: Callable[[Any, Any], None]) -> None:
    shard = queue._live()._shards[workflow_id & 0xFF]  # type: ignore[attr-defined]
    shard.env.write(lambda txn: change(txn, shard.workflows))


def edit(key: bytes, at: int, value: Any) -> Callable[[Any, Any], None]:
    def change(txn: Any, db: Any) -> None:
        fields = msgpack.unpackb(txn.get(key, db=db), raw=False)
        fields[at] = value
        txn.put(key, msgpack.packb(fields, use_bin_type=True), db=db)

    return change


def test_a_consistent_workflow_has_no_problem_and_each_damage_is_named(tmp_path: Path) -> None:
    with Queue(tmp_path / "store", shards=2) as queue:
        workflow_id = diamond(queue)
        record = queue.get(0)
        record.ack(1)  # a: b and c released
        assert queue.verify() == []

        poke(queue, workflow_id, edit(_head_key(workflow_id), 3, 7))  # nodes not ended: 3, not 7
        assert any("head counts" in problem and "(7, 0)" in problem for problem in queue.verify())
        poke(queue, workflow_id, edit(_head_key(workflow_id), 3, 3))
        assert queue.verify() == []

        poke(queue, workflow_id, edit(_state_key(workflow_id, 3), 0, 1))  # d waits on b and c: 2
        assert any("node 3 ('d'): waits on 1 parents, 2 have not ended" in p for p in queue.verify())
        poke(queue, workflow_id, edit(_state_key(workflow_id, 3), 0, 2))

        poke(queue, workflow_id, lambda txn, db: txn.put(_state_key(workflow_id, 2), b"\xc1", db=db))
        poke(queue, workflow_id, lambda txn, db: txn.put(_node_key(workflow_id, 9), b"\x90", db=db))
        problems = queue.verify()
        assert any("node 2 does not decode" in problem for problem in problems)
        assert any(f"(workflow {workflow_id}, node 9)" in problem for problem in problems)

    with Queue(tmp_path / "other", shards=1) as queue:
        workflow_id = diamond(queue)
        job_of_a = queue.workflows.get(workflow_id).nodes[0].job_id  # type: ignore[union-attr]
        assert job_of_a is not None
        edit_job = edit(_state_key(workflow_id, 0), 2, job_of_a + (1 << 20))  # a job id never put
        poke(queue, workflow_id, edit_job)
        problems = queue.verify()
        assert any(f"node 0 ('a'): its job {job_of_a + (1 << 20)} is not stored" in p for p in problems)
