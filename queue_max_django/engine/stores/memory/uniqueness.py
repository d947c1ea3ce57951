"""Unique keys in the memory store (``contract/uniqueness.py``): each put's decision, under the space's lock
that the put holds, and the vacuum's forgetting. ``Space.unique`` maps a key to its entry, (holder id, µs
it was taken, hold, window end µs); ``Space.duplicates`` counts the duplicates skipped and replaced."""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import DuplicateJob
from ...job import STATE_CODE, State
from ..contract.uniqueness import (
    HOLD_REMEMBERED,
    HOLD_WINDOW,
    ON_DUPLICATE_RAISE,
    ON_DUPLICATE_REPLACE,
    UniqueRule,
    counted,
    holds,
    until_of,
)
from ..types import NewJobs
from .space import Row, Space, micros


def _holder(space: Space, key: bytes, now_us: int) -> Row | int | None:
    """The holder of ``key`` now: its row, or its id when it holds the key without a row (a window or a
    remembered key whose job is gone); None when nobody holds it."""
    entry = space.unique.get(key)
    if entry is None:
        return None
    job_id, _used_us, hold, until_us = entry
    row = space.rows.get(job_id)
    if not holds(hold, until_us, None if row is None else STATE_CODE[row.state], now_us):
        return None
    return job_id if row is None else row


def refuse(space: Space, batches: Sequence[NewJobs], now_us: int) -> None:
    """``DuplicateJob`` for the first batch with ``ON_DUPLICATE_RAISE`` whose key is held, before anything
    of the put is written (the memory store has no rollback). The Queue never puts two batches with one
    key and ``raise`` in one call, so what the batches before it write cannot change its answer."""
    for batch in batches:
        rule = batch.unique
        if rule is not None and rule.on_duplicate == ON_DUPLICATE_RAISE:
            holder = _holder(space, rule.key, now_us)
            if holder is not None:
                raise DuplicateJob(holder if isinstance(holder, int) else holder.job_id, rule.text)


def decide(space: Space, batch: NewJobs, rule: UniqueRule, now_us: int) -> int | None:
    """The put of ``batch``'s key: None, write the job (then ``take``); else the holder's id, the batch a
    duplicate (skipped, or its payload given to the waiting holder)."""
    holder = _holder(space, rule.key, now_us)
    if holder is None:
        return None
    if rule.on_duplicate == ON_DUPLICATE_RAISE:  # (refuse() raised it already, before any write)
        raise DuplicateJob(holder if isinstance(holder, int) else holder.job_id, rule.text)
    if rule.on_duplicate == ON_DUPLICATE_REPLACE:
        if isinstance(holder, int) or holder.state not in (State.PENDING, State.SCHEDULED):
            return None  # not waiting: untouched, and the new job takes the key
        _replace(space, holder, batch, now_us)
        batch.replaced = True
    if counted(rule):
        space.duplicates[1 if batch.replaced else 0] += 1
    batch.unique_hit = True
    return holder if isinstance(holder, int) else holder.job_id


def _replace(space: Space, row: Row, batch: NewJobs, now_us: int) -> None:
    """The waiting ``row`` takes the batch's payload, metadata and ready time."""
    spec = batch.spec
    ready_us = now_us if spec.ready_at is None else micros(spec.ready_at)
    space.unindex(row)
    row.payload = bytes(batch.payloads[0])
    space.untag(row)  # the new put's tags are the job's now (engine/tags.py)
    row.metadata = spec.metadata
    space.tag(row)
    row.state = State.SCHEDULED if ready_us > now_us else State.PENDING
    row.ready_us = ready_us if ready_us > now_us else now_us
    space.index(row)
    space.hint()


def take(space: Space, rule: UniqueRule, job_id: int, now_us: int) -> None:
    """The key now names the new job ``job_id``, taken now."""
    space.unique[rule.key] = (job_id, now_us, rule.hold, until_of(rule, now_us))


def forget(space: Space, now: float, forget_us: int) -> None:
    """Vacuum: drop every entry that holds nothing now, and remembered or window entries taken at or
    before ``forget_us``."""
    now_us = micros(now)
    for key, (_id, used_us, hold, _until) in list(space.unique.items()):
        aged = hold in (HOLD_REMEMBERED, HOLD_WINDOW) and used_us <= forget_us
        if aged or _holder(space, key, now_us) is None:
            del space.unique[key]
