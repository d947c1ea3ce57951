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


def in_turn(shard: TurnDbs, txn: Any, limit: int) -> list[tuple[str, bytes]]:
    """The first ``limit`` groups of the turns, in order, each with its place (as ``settle`` takes them)."""
    cursor = txn.cursor(db=shard.turns)
    out: list[tuple[str, bytes]] = []
    found = cursor.set_range(TURN_PREFIX)
    start, end = len(TURN_PREFIX), len(TURN_PREFIX) + _COUNT.size
    while found and len(out) < limit:
        key = bytes(cursor.key())
        if not key.startswith(TURN_PREFIX):
            break
        out.append((key[end:].decode(), key[start:end]))
        found = cursor.next()
    return out


def settle(
    shard: TurnDbs,
    txn: Any,
    read: list[tuple[str, bytes]],
    whole: bool,
    back: list[str],
    gone: list[str],
) -> None:
    """The turns after a claim: the groups ``gone`` (none of their jobs waits) leave them, and the groups
    ``back`` go to the back, in that order, as ``to_back`` of each in turn would leave them. ``read``: the
    groups in turn with their places, as ``in_turn`` gave them to the claim (every group named here is among
    them); ``whole``: they were all of the turns. Then a group of ``back`` keeps its place where the order
    allows: only those after the first one out of order are given new places (a claim that went round every
    group in turn order rewrites nothing but what ``gone`` removes)."""
    db = shard.turns
    places = dict(read)
    for group in gone:
        name = group.encode()
        txn.delete(TURN_PREFIX + places[group] + name, db=db)
        txn.delete(GROUP_PREFIX + name, db=db)
    if not back:
        return
    moving = back
    if whole:  # the order wanted: the groups that stay, as they are, then ``back``
        left, moved = set(gone), set(back)
        wanted = [group for group, _place in read if group not in left and group not in moved] + back
        previous = b""
        for index, group in enumerate(wanted):
            if places[group] <= previous:  # (places: fixed-width big-endian, so bytes compare as numbers)
                moving = wanted[index:]
                break
            previous = places[group]
        else:
            return
    raw = txn.get(LAST_KEY, db=db)
    last = 0 if raw is None else _COUNT.unpack(raw)[0]
    for group in moving:
        name = group.encode()
        txn.delete(TURN_PREFIX + places[group] + name, db=db)
        last += 1
        place = _COUNT.pack(last)
        txn.put(GROUP_PREFIX + name, place, db=db)
        txn.put(TURN_PREFIX + place + name, b"", db=db)
    txn.put(LAST_KEY, _COUNT.pack(last), db=db)


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


def count(shard: TurnDbs, txn: Any, key: str) -> int:
    """Jobs running with limit ``key`` here."""
    raw = txn.get(RUNNING_PREFIX + key.encode(), db=shard.turns)
    return 0 if raw is None else int(_COUNT.unpack(raw)[0])


def set_counts(shard: TurnDbs, txn: Any, counts: dict[str, int]) -> None:
    """The jobs running per limit key become ``counts`` (as a claim read them with ``count`` and changed
    them in the same transaction: one write per key, no read)."""
    db = shard.turns
    for key, value in counts.items():
        if value > 0:
            txn.put(RUNNING_PREFIX + key.encode(), _COUNT.pack(value), db=db)
        else:
            txn.delete(RUNNING_PREFIX + key.encode(), db=db)


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
