"""``layout.unpack_record`` refuses a record that decodes but is not one the engine writes (a field of the
wrong type or out of range), so that every path treats it as a record it cannot read (QueueCorrupted),
and accepts every record the engine does write, in every state. Its fast check (``_well_typed``, on every
claim and completion) gives the same answers as the readable one (``record_problem``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import Queue, QueueCorrupted
from queue_max_django.engine.stores.lmdb import keys, layout
from tests.engine.conftest import FakeClock, open_queue

pytestmark = pytest.mark.lmdb  # the LMDB store's record layout (layout.py), read from its shards

ODD_VALUES: list[Any] = [None, True, False, 0, 3, -1, 150, -150, 2**63, 1.5, -0.5, "", "s", b"", b"b",
                         [], ["a"], ["a", "b"], [["T", "e"]], [["T"]], [[1, "e"]], {"a": 1}]  # fmt: skip


def records_the_engine_writes(path: Path, clock: FakeClock) -> list[list[Any]]:
    """One record of each kind the engine stores: pending, scheduled, running (held by a named worker),
    done with a result, a retry with an error history, failed, requeued, with a timeout and partition key,
    with a large payload."""
    with open_queue(path, clock, shards=1, max_retries=1) as q:
        q.worker_id = "host-1-0"
        q.put({"n": 1}, name="a.task", timeout=2.5, partition_key="k")
        q.put("late", delay=60, priority=-100)
        q.put("x" * 5000, priority=100)
        held = q.get_many(2, timeout=0)
        held[0].ack({"ok": True})
        q.put("again", max_retries=2)
        retried = q.get(0)
        retried.nack(ValueError("boom"))
        q.put("dead", max_retries=0)
        q.get(0).nack("no", permanent=True)
        q.requeue(q.dead_letters()[0].job_id)
        q.put("failed for good", max_retries=0)
        q.get(0).nack("no")
        out = []
        shard = q._store._shards[0]
        with shard.env.env.begin() as txn:
            for key, raw in txn.cursor(db=shard.jobs):
                if not key.startswith(b"\xff" * 8):  # job ids; the counters sort past them
                    out.append(layout.unpack_record(raw, keys.id_from_key(key)))
        states = {record[layout.F_STATE] for record in out}
        assert states >= {0, 1, 2, 3}, states
        return out


def test_every_record_the_engine_writes_is_well_formed(tmp_path: Path, clock: FakeClock) -> None:
    for record in records_the_engine_writes(tmp_path / "store", clock):
        assert layout.record_problem(record) is None, record
        assert layout._well_typed(record)


def test_the_fast_check_and_the_readable_one_agree_on_every_field(tmp_path: Path, clock: FakeClock) -> None:
    """Each field of each kind of record set to each odd value: the two checks give the same answer, and
    a wrong field is refused by ``unpack_record`` with a message that names it."""
    refused = 0
    for base, position, value in itertools.product(
        records_the_engine_writes(tmp_path / "store", clock), range(layout.F_ERRORS + 1), ODD_VALUES
    ):
        record = list(base)
        record[position] = value
        problem = layout.record_problem(record)
        assert layout._well_typed(record) is (problem is None), (position, value, problem)
        if problem is not None:
            refused += 1
            with pytest.raises(QueueCorrupted, match="the stored record has"):
                layout.unpack_record(msgpack.packb(record, use_bin_type=True), 1)
    assert refused > 1000  # the product above really exercised the refusals


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (layout.F_NAME, ["t"], "a list as its name (None or str expected)"),
        (layout.F_QUEUE, 7, "an int as its queue (str expected)"),
        (layout.F_PRIORITY, "high", "a str as its priority (int expected)"),
        (layout.F_PRIORITY, 101, "a priority out of range (101)"),
        (layout.F_STATE, 5, "an unknown state 5"),
        (layout.F_ENQUEUED_AT, 1.5, "a float as its enqueued_at (int expected)"),
        (layout.F_READY_AT, -1, "a negative time as its ready_at"),
        (layout.F_RETRIES, None, "None as its retries (int expected)"),
        (layout.F_MAX_RETRIES, -1, "a negative retry count"),
        (layout.F_TIMEOUT, "5", "a str as its timeout (None or float or int expected)"),
        (layout.F_WORKERS, "w", "a str as its workers (None or list expected)"),
        (layout.F_ERRORS, [["only one"]], "an entry of its errors that is not [error type, error]"),
    ],
)
def test_a_wrong_field_is_named(tmp_path: Path, position: int, value: Any, message: str) -> None:
    with Queue(tmp_path / "store", shards=1, do_recover=False, do_vacuum=False) as q:
        job_id = q.put("x")
        shard = q._store._shards[0]
        with shard.env.env.begin() as txn:
            record = layout.unpack_record(txn.get(keys.id_key(job_id), db=shard.jobs), job_id)
    record[position] = value
    with pytest.raises(QueueCorrupted) as caught:
        layout.unpack_record(msgpack.packb(record, use_bin_type=True), job_id)
    assert str(caught.value) == f"job {job_id}: the stored record has {message}"


def test_a_done_record_without_its_finish_time_is_refused() -> None:
    """A done job is indexed by its finish time: without one no path could find its index entry."""
    record: list[Any] = [None] * layout.RECORD_FIELDS
    record[: layout.F_STARTED_AT] = [3, "default", None, 0, 0, 0, 1, 1]
    record[layout.F_ATTEMPTS] = 1
    assert layout.record_problem(record) == "no finished_at although it is done"
    assert not layout._well_typed(record)
    record[layout.F_FINISHED_AT] = 5
    assert layout.record_problem(record) is None and layout._well_typed(record)


def test_older_records_with_fewer_fields_still_decode() -> None:
    """Fields are only ever appended: a record from before the last ones (attempts, payload, history)
    reads, its attempts as 0."""
    short = [0, "default", "a.task", 0, 0, 3, 10, 10] + [None] * 8
    record = layout.unpack_record(msgpack.packb(short, use_bin_type=True), 1)
    assert len(record) == layout.RECORD_FIELDS and record[layout.F_ATTEMPTS] == 0


def test_a_completion_holding_the_token_checks_only_what_it_uses(tmp_path: Path) -> None:
    """``unpack_held``: a running record with the holder's token and a usable lease and queue is taken as
    it is (its claim checked the rest); with another token, or a lease it cannot use, it gets the whole
    check, so a bad field is named."""
    with Queue(tmp_path / "store", shards=1, do_recover=False, do_vacuum=False) as q:
        q.put("x")
        record = q.get(0)
        shard = q._store._shards[0]
        with shard.env.env.begin() as txn:
            stored = layout.unpack_record(txn.get(keys.id_key(record.job_id), db=shard.jobs), record.job_id)
    token = stored[layout.F_TOKEN]
    stored[layout.F_NAME] = ["not", "a", "name"]
    raw = msgpack.packb(stored, use_bin_type=True)
    assert layout.unpack_held(raw, record.job_id, token)[layout.F_NAME] == ["not", "a", "name"]
    with pytest.raises(QueueCorrupted, match="a list as its name"):
        layout.unpack_held(raw, record.job_id, b"another token....")
    stored[layout.F_NAME], stored[layout.F_LEASE_UNTIL] = "a.task", "soon"
    with pytest.raises(QueueCorrupted, match="a str as its lease_until"):
        layout.unpack_held(msgpack.packb(stored, use_bin_type=True), record.job_id, token)
    with pytest.raises(QueueCorrupted, match="cannot be decoded"):
        layout.unpack_held(b"\xc1", record.job_id, token)
