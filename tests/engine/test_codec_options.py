"""The engine's readers of stored msgpack (``codec.unpack_value``, ``codec.unpack_stored``) spell out the
unpacker options instead of passing ``codec._unpacker_options`` (a call through ``**`` costs every claimed
job 0.2 µs): they must decode exactly as those options do, or a payload would read back otherwise than the
put's own check (``codec.pack_value`` decodes with the options) promised."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import QueueCorrupted, codec

VALUES: list[Any] = [
    {"text": "é", "bytes": b"\x00\xff", "n": [1, -2, 2**63 - 1], "f": 1.5, "none": None, "flag": True},
    {1: "an int key", 2.5: "a float key"},  # strict_map_key=False
    [b"raw", "str"],  # raw=False: str and bytes stay apart
]


@pytest.mark.parametrize("value", VALUES, ids=["plain", "odd-keys", "str-and-bytes"])
def test_the_readers_decode_as_the_options_do(value: Any) -> None:
    data = msgpack.packb(value, use_bin_type=True)
    expected = msgpack.unpackb(data, **codec._unpacker_options)
    assert codec.unpack_value(data) == expected
    assert codec.unpack_stored(data, 1, "payload") == expected


def test_a_timestamp_reads_as_the_options_say() -> None:
    data = msgpack.packb(msgpack.Timestamp(1_700_000_000, 5), use_bin_type=True)
    expected = msgpack.unpackb(data, **codec._unpacker_options)
    assert type(expected) is msgpack.Timestamp  # timestamp=0: not turned into a float or a datetime
    assert codec.unpack_value(data) == expected == codec.unpack_stored(data, 1, "payload")
    assert not isinstance(codec.unpack_value(data), dt.datetime)


def test_bytes_that_do_not_decode_are_a_corrupted_payload() -> None:
    with pytest.raises(QueueCorrupted, match="job 7: the stored payload cannot be decoded"):
        codec.unpack_stored(b"\xc1", 7, "payload")
