"""A shard's bookkeeping of concurrency limits (``stores/contract/concurrency.py``), in its ``turns``
database, changed inside the transactions that move limited jobs:

- ``b"r" + key`` -> the jobs running with limit ``key`` here (>Q; no entry while none);
- ``b"g" + group`` -> the group's place in the turns (>Q), and ``b"t" + place + group`` -> b"", the turns
  in order; ``b"s"`` -> the last place given. A group is in the turns while it has waiting jobs.

A limited job waits in the ready index under its group (``keys.group_head``) instead of its queue, so the
claims that walk the queues never meet it. Every job of a limit key is in one shard (the Queue places it by
its broadest key), so a shard's counts are the store's. ``access.index_job``/``unindex_job`` call the
functions here; ``Shard._complete`` calls ``end`` (it writes a completion without them).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, Protocol

from .keys import QUEUE_SEP, group_head

_COUNT = struct.Struct(">Q")
RUNNING_PREFIX = b"r"
GROUP_PREFIX = b"g"
TURN_PREFIX = b"t"
LAST_KEY = b"s"


class TurnDbs(Protocol):
    ready: Any
    turns: Any


def join(shard: TurnDbs, txn: Any, group: str) -> None:
    """A job of ``group`` waits: a group not in the turns joins them at the back."""
    if txn.get(GROUP_PREFIX + group.encode(), db=shard.turns) is None:
        to_back(shard, txn, group)


def to_back(shard: TurnDbs, txn: Any, group: str) -> None:
    """``group`` takes the last place in the turns (leaving its old one)."""
    db = shard.turns
    name = group.encode()
    old = txn.get(GROUP_PREFIX + name, db=db)
    if old is not None:
        txn.delete(TURN_PREFIX + bytes(old) + name, db=db)
    raw = txn.get(LAST_KEY, db=db)
    place = _COUNT.pack((0 if raw is None else _COUNT.unpack(raw)[0]) + 1)
    txn.put(LAST_KEY, place, db=db)
    txn.put(GROUP_PREFIX + name, place, db=db)
    txn.put(TURN_PREFIX + place + name, b"", db=db)


def leave_if_done(shard: TurnDbs, txn: Any, group: str) -> None:
    """After a job of ``group`` stopped waiting: the group leaves the turns if none of its jobs waits."""
    head = group_head(group) + QUEUE_SEP
    cursor = txn.cursor(db=shard.ready)
    if cursor.set_range(head) and bytes(cursor.key()).startswith(head):
        return
    db = shard.turns
    name = group.encode()
    old = txn.get(GROUP_PREFIX + name, db=db)
    if old is not None:
        txn.delete(TURN_PREFIX + bytes(old) + name, db=db)
        txn.delete(GROUP_PREFIX + name, db=db)


def in_turn(shard: TurnDbs, txn: Any, limit: int) -> list[str]:
    """The first ``limit`` groups of the turns, in order."""
    cursor = txn.cursor(db=shard.turns)
    out: list[str] = []
    found = cursor.set_range(TURN_PREFIX)
    while found and len(out) < limit:
        key = bytes(cursor.key())
        if not key.startswith(TURN_PREFIX):
            break
        out.append(key[1 + _COUNT.size :].decode())
        found = cursor.next()
    return out


def waiting_groups(shard: TurnDbs, txn: Any) -> list[str]:
    """Every group with waiting jobs here (by name)."""
    cursor = txn.cursor(db=shard.turns)
    out = []
    found = cursor.set_range(GROUP_PREFIX)
    while found:
        key = bytes(cursor.key())
        if not key.startswith(GROUP_PREFIX):
            break
        out.append(key[1:].decode())
        found = cursor.next()
    return out


def running(shard: TurnDbs, txn: Any, keys: Iterable[str] | None = None) -> dict[str, int]:
    """Jobs running per limit key here: of ``keys``, or of every key with some (None)."""
    db = shard.turns
    if keys is not None:
        out = {}
        for key in keys:
            raw = txn.get(RUNNING_PREFIX + key.encode(), db=db)
            out[key] = 0 if raw is None else _COUNT.unpack(raw)[0]
        return out
    cursor = txn.cursor(db=db)
    found = cursor.set_range(RUNNING_PREFIX)
    counted = {}
    while found:
        raw_key = bytes(cursor.key())
        if not raw_key.startswith(RUNNING_PREFIX):
            break
        counted[raw_key[1:].decode()] = _COUNT.unpack(cursor.value())[0]
        found = cursor.next()
    return counted


def change(shard: TurnDbs, txn: Any, limits: list[list[Any]], step: int) -> None:
    """A job with ``limits`` started (``step`` 1) or ended (-1): its keys' running counts follow."""
    db = shard.turns
    for key, _n in limits:
        _add(txn, db, RUNNING_PREFIX + key.encode(), step)


def change_by(shard: TurnDbs, txn: Any, jobs: dict[str, int], sign: int = 1) -> None:
    """``jobs[key]`` jobs with limit ``key`` started (``sign`` 1) or ended (-1): one write per key (a
    batch's starts or ends)."""
    db = shard.turns
    for key, count in jobs.items():
        _add(txn, db, RUNNING_PREFIX + key.encode(), sign * count)


def _add(txn: Any, db: Any, name: bytes, step: int) -> None:
    """The count ``name`` moves by ``step`` (no entry while it is 0)."""
    raw = txn.get(name, db=db)
    count = (0 if raw is None else _COUNT.unpack(raw)[0]) + step
    if count > 0:
        txn.put(name, _COUNT.pack(count), db=db)
    elif raw is not None:
        txn.delete(name, db=db)


def any_running(shard: TurnDbs, txn: Any) -> bool:
    """Does a limited job run here? (One seek.)"""
    cursor = txn.cursor(db=shard.turns)
    return bool(cursor.set_range(RUNNING_PREFIX)) and bytes(cursor.key()).startswith(RUNNING_PREFIX)


def reset(shard: TurnDbs, txn: Any, counted: dict[str, int]) -> None:
    """The running counts become ``counted`` (jobs running per limit key, as a walk found them)."""
    db = shard.turns
    for key in running(shard, txn):
        txn.delete(RUNNING_PREFIX + key.encode(), db=db)
    for key, count in counted.items():
        if count > 0:
            txn.put(RUNNING_PREFIX + key.encode(), _COUNT.pack(count), db=db)
