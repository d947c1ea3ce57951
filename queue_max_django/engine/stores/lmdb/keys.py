"""The byte layout of every LMDB key. Big-endian, so byte order is numeric order.

A job's id (``job.py``: ``sequence << 8 | shard``) is its key, so the jobs of a shard sort in enqueue order.
See docs/architecture.md for the databases these keys live in.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ...errors import QueueCorrupted

_Q = struct.Struct(">Q")
_QQ = struct.Struct(">QQ")
_HQQ = struct.Struct(">HQQ")
_PRIORITY_FLIP = 0x7FFF  # stored value = _PRIORITY_FLIP - priority: highest priority sorts first
PRIORITY_KEY_MIN = _PRIORITY_FLIP - 0xFFFF  # the lowest priority a ready key can hold (only a damaged one)

QUEUE_SEP = b"\x00"


def micros(seconds: float) -> int:
    """Unix seconds -> non-negative integer microseconds (the unit every time key is stored in)."""
    value = int(seconds * 1_000_000)
    return value if value > 0 else 0


# The two most used keys are the struct packers themselves (bound C methods: no Python frame per key).
# id_key(job_id): the jobs and payloads databases' key, and the failed index's.
id_key: Callable[[int], bytes] = _Q.pack


def id_from_key(key: bytes) -> int:
    return int(_Q.unpack(key)[0])


# time_key(when_us, job_id) -> (time, job id): the scheduled, lease and done indexes, scanned from
# ``first()`` while due.
time_key: Callable[[int, int], bytes] = _QQ.pack


def time_key_parts(key: bytes) -> tuple[int, int]:
    try:
        when, job_id = _QQ.unpack(key)
    except struct.error:
        raise _misshapen("time", key) from None
    return int(when), int(job_id)


def queue_prefix(queue: bytes) -> bytes:
    return queue + QUEUE_SEP


LIMITED = b"\xff"  # the first byte of a limited job's ready key: no queue name's UTF-8 holds it


def group_head(group: str) -> bytes:
    """Where a concurrency group's waiting jobs sort in the ready index (in place of a queue name): after
    every queue's, so a claim that walks the queues never meets them (lmdb/turns.py)."""
    return LIMITED + group.encode()


def ready_key(queue: bytes, priority: int, ready_us: int, job_id: int) -> bytes:
    """(queue, priority descending, ready time, job id): the head of a queue's range is the next job."""
    return queue + QUEUE_SEP + _HQQ.pack(_PRIORITY_FLIP - priority, ready_us, job_id)


def ready_prefix(queue: bytes, priority: int) -> bytes:
    """The part of a ready key before (ready time, job id)."""
    return queue + QUEUE_SEP + (_PRIORITY_FLIP - priority).to_bytes(2, "big")


def ready_key_parts(key: bytes) -> tuple[bytes, int, int, int]:
    """-> (queue, priority, ready µs, job id)."""
    queue = key[: -_HQQ.size - 1]
    try:
        flipped, ready_us, job_id = _HQQ.unpack(key[-_HQQ.size :])
    except struct.error:
        raise _misshapen("ready", key) from None
    return queue, _PRIORITY_FLIP - int(flipped), int(ready_us), int(job_id)


def _misshapen(index: str, key: bytes) -> QueueCorrupted:
    """An index key too short for its layout: only a damaged page (LMDB keeps no checksums) holds one."""
    return QueueCorrupted(f"a {index} index key of {len(key)} bytes ({bytes(key).hex()}): a damaged page")


def next_queue_prefix(queue: bytes) -> bytes:
    """The smallest key past every ready key of ``queue`` (queue names never contain NUL)."""
    return queue + b"\x01"
