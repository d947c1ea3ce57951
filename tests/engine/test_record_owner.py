"""``Record`` is a handle: each way of ending a job (and ``touch``, and the result check) is one call to the
queue that claimed it, with the record itself, and nothing else; ``touch`` keeps the new lease end and the
cancel mark it reports. The record knows its owner only as the ``RecordOwner`` protocol, and flow control
hands back what the shard claimed, not records: neither module imports the queue
(tests/test_import_graph.py checks the whole engine for circles)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import queue_max_django.engine as engine
from queue_max_django.engine import Record, State
from queue_max_django.engine.stores.types import Claimed


class Owner:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def _ack(self, record: Record, result: Any) -> None:
        self.calls.append(("ack", record, result))

    def _nack(
        self, record: Record, error: BaseException | str | None, delay: float | None, permanent: bool
    ) -> State:
        self.calls.append(("nack", record, error, delay, permanent))
        return State.SCHEDULED

    def _release(self, record: Record, delay: float | None = None) -> None:
        self.calls.append(("release", record, delay))

    def _touch(self, record: Record) -> tuple[float, bool]:
        self.calls.append(("touch", record))
        return 1234.5, True  # the new lease end, and the job is marked "cancel requested"

    def _pack_result(self, result: Any) -> bytes:
        self.calls.append(("pack", result))
        return b"packed"


def claimed(job_id: int = 7) -> Claimed:
    return Claimed(
        job_id,
        token=b"t" * 16,
        payload={"to": "a@example.com"},
        retries=1,
        max_retries=3,
        attempts=2,
        enqueued_at=5.0,
        priority=3,
        queue="mail",
        name="send",
        timeout=2.5,
        lease_until=35.0,
        worker_ids=("w-1",),
    )


def test_a_record_reads_its_fields_from_the_claim() -> None:
    record = Record(Owner(), claimed())
    assert (record.job_id, record.payload, record.retries, record.attempts, record.enqueued_at) == (
        7, {"to": "a@example.com"}, 1, 2, 5.0,
    )  # fmt: skip
    assert (record.priority, record.queue, record.name, record.timeout, record.lease_until) == (
        3, "mail", "send", 2.5, 35.0,
    )  # fmt: skip
    assert record.worker_ids == ("w-1",) and record.finished is False


def test_each_completion_is_one_call_to_the_owner() -> None:
    owner = Owner()
    record = Record(owner, claimed())
    record.ack({"ok": 1})
    assert record.nack("boom", delay=3.0, permanent=True) is State.SCHEDULED
    record.release()
    record.release(delay=2.5)
    assert not record.cancel_requested
    assert record.touch() == 1234.5 and record.lease_until == 1234.5 and record.cancel_requested
    assert record.pack_result(None) is None  # nothing to check, nothing asked
    assert record.pack_result([1]) == b"packed"
    assert owner.calls == [
        ("ack", record, {"ok": 1}),
        ("nack", record, "boom", 3.0, True),
        ("release", record, None),
        ("release", record, 2.5),
        ("touch", record),
        ("pack", [1]),
    ]


def engine_modules_imported_by(module: str) -> set[str]:
    """The engine modules ``module`` imports anywhere in its source: at the top, in a function, or under
    ``if TYPE_CHECKING:`` (every relative import)."""
    found: set[str] = set()
    source = (Path(engine.__file__).parent / f"{module}.py").read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
    return found


def test_record_and_flow_import_neither_the_queue_nor_each_other() -> None:
    assert {"stores", "job"} <= engine_modules_imported_by("record")  # the reader sees imports
    assert "record" in engine_modules_imported_by("queue")
    assert engine_modules_imported_by("record").isdisjoint({"queue", "flow", "aio"})
    assert engine_modules_imported_by("flow").isdisjoint({"queue", "record", "aio"})
    assert engine_modules_imported_by("consuming").isdisjoint({"queue", "aio"})  # the records' owner
