"""A new job's record is written as precomputed bytes (NewRecords.records, the LMDB encoding of a JobSpec):
it must decode to exactly the
record msgpack's encoder makes of the same fields, whatever the options and the payload."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_max_django.engine.job import PRIORITY_MAX, PRIORITY_MIN, STATE_CODE, State
from queue_max_django.engine.jobspec import JobSpec, variant
from queue_max_django.engine.stores.lmdb import layout
from queue_max_django.engine.stores.lmdb.keys import ready_prefix
from queue_max_django.engine.stores.lmdb.newrecords import NewRecords, encoded

pytestmark = pytest.mark.lmdb  # the bytes of an LMDB record (layout.py) and of its ready key (keys.py)

names = st.text(min_size=1, max_size=40)
options = st.fixed_dictionaries({
    "queue": names,
    "name": st.none() | names,
    "priority": st.integers(PRIORITY_MIN, PRIORITY_MAX),
    "ready_at": st.none() | st.floats(0, 2e9),
    "max_retries": st.integers(0, 1000),
    "timeout": st.none() | st.floats(0.001, 1e6),
    "partition_key": (
        st.none() | st.text(max_size=40) | st.integers(-(2**63), 2**64 - 1) | st.binary(max_size=40)
    ),
    "metadata": st.none() | st.binary(min_size=2, max_size=300),  # JSON text (engine/metadata.py)
})  # fmt: skip
times = st.integers(0, 2**64 - 1)
payloads = st.none() | st.binary(max_size=layout.INLINE_PAYLOAD_MAX)


def expected_record(
    spec: dict[str, Any], scheduled: bool, enqueued: int, ready: int, payload: Any
) -> list[Any]:
    record: list[Any] = [None] * layout.RECORD_FIELDS
    record[layout.F_STATE] = STATE_CODE[State.SCHEDULED if scheduled else State.PENDING]
    record[layout.F_QUEUE] = spec["queue"]
    record[layout.F_NAME] = spec["name"]
    record[layout.F_PRIORITY] = spec["priority"]
    record[layout.F_RETRIES] = 0
    record[layout.F_MAX_RETRIES] = spec["max_retries"]
    record[layout.F_ENQUEUED_AT] = enqueued
    record[layout.F_READY_AT] = ready
    record[layout.F_TIMEOUT] = spec["timeout"]
    record[layout.F_PARTITION_KEY] = spec["partition_key"]
    record[layout.F_ATTEMPTS] = 0
    record[layout.F_PAYLOAD] = payload
    record[layout.F_METADATA] = spec["metadata"]
    return record


@given(options, st.booleans(), times, st.lists(st.tuples(times, payloads), min_size=1, max_size=5))
def test_new_records_decode_like_the_encoded_lists(
    spec: dict[str, Any], scheduled: bool, enqueued: int, jobs: list[tuple[int, bytes | None]]
) -> None:
    made = NewRecords(JobSpec(**spec)).records(
        scheduled, enqueued, [r for r, _ in jobs], [p for _, p in jobs]
    )
    one = NewRecords(JobSpec(**spec)).record(scheduled, enqueued, jobs[0][0], jobs[0][1])
    assert one == made[0]  # the single put's path writes the same bytes

    assert len(made) == len(jobs)
    for data, (ready, payload) in zip(made, jobs, strict=True):
        expected = expected_record(spec, scheduled, enqueued, ready, payload)
        assert layout.unpack_record(data, 1) == expected
        assert msgpack.unpackb(data, raw=False, strict_map_key=False) == msgpack.unpackb(
            layout.pack_record(expected), raw=False, strict_map_key=False
        )


def test_the_ready_prefix_and_index_value_come_from_the_options() -> None:
    spec = NewRecords(JobSpec("emails", "send", 7, None, 3, None, None))
    assert spec.ready_prefix == ready_prefix(b"emails", 7)
    assert spec.name_bytes == b"send"
    assert NewRecords(JobSpec("emails", None, 0, None, 3, None, None)).name_bytes == b""


def test_a_spec_is_encoded_once_and_keeps_its_encoding() -> None:
    spec = JobSpec("emails", "send", 7, None, 3, None, None)
    assert spec.encoded is None

    first = encoded(spec)

    assert spec.encoded is first
    assert encoded(spec) is first


limits = st.none() | st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(1, 1000)), min_size=1, max_size=3
).map(tuple)


@given(options, limits, st.none() | st.binary(min_size=2, max_size=100), limits, times, payloads)
def test_a_variants_encoding_is_what_its_own_spec_would_encode(
    spec: dict[str, Any], base_limits: Any, metadata: Any, new_limits: Any, ready: int, payload: Any
) -> None:
    """A variant (a unique key's note, a keyed limit: ``jobspec.variant``) is encoded from its base's
    ``NewRecords``; its records and ready keys are byte for byte those of a spec made whole."""
    base = JobSpec(**spec)
    base.concurrency = base_limits
    made = variant(base, metadata=metadata, concurrency=new_limits)
    assert made.base is base and variant(made, metadata=None).base is base
    whole = JobSpec(**{**spec, "metadata": metadata})
    whole.concurrency = new_limits
    derived, fresh = encoded(made), NewRecords(whole)
    assert encoded(base) is base.encoded and derived is not base.encoded
    assert derived.record(False, 5, ready, payload) == fresh.record(False, 5, ready, payload)
    assert derived.ready_key(ready, 9) == fresh.ready_key(ready, 9)
    assert (derived.group, derived.ready_head, derived.name_bytes) == (fresh.group, fresh.ready_head,
                                                                        fresh.name_bytes)  # fmt: skip
