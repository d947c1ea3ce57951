"""Pauses: what a pause is, how its arguments are checked, and how every store keeps one.

A pause holds back the pending jobs of one queue (``task`` None) or of one task (job name) in one queue:
no consumer of the store claims them while it is in force. It is in force from ``paused_at`` until
``until`` (None: until resumed), both on the store's clock; it says why (``reason``) and who (``by``).
Jobs already running finish; scheduled jobs still come due (and then wait, pending, with the others).

A store keeps each pause under its target (``target_key``) as the bytes ``pack`` gives; ``unpack`` reads
them back (None for bytes that do not decode: such a pause still holds its target back, with no end and
no reason, until it is resumed, since a pause nobody can read is safer kept than dropped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import InvalidJob
from .validate import MAX_SECONDS, bad_character, validate_name, validate_queue_name

MAX_REASON = 500  # characters of a pause's reason
MAX_BY = 200  # characters of who paused
MAX_TARGETS = 1000  # queues (or tasks) one pause or resume names at most

Target = tuple[str, str | None]  # (queue, task or None for the whole queue)


@dataclass(frozen=True, slots=True)
class Pause:
    """One pause in force: ``queue`` (and ``task``, None: every job of the queue) held back since
    ``paused_at`` until ``until`` (None: until resumed; unix seconds on the store's clock), ``reason`` and
    ``by`` as given (None: not said)."""

    queue: str
    task: str | None
    paused_at: float
    until: float | None
    reason: str | None
    by: str | None

    def in_force(self, now: float) -> bool:
        return self.until is None or self.until > now

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "task": self.task, "paused_at": self.paused_at, "until": self.until,
                "reason": self.reason, "by": self.by}  # fmt: skip


def target_key(queue: str, task: str | None) -> str:
    """The key a store keeps a pause under: the queue, a NUL, the task (empty for the whole queue). Names
    cannot hold NUL (``validate``), so keys never collide, and a queue's pauses sort together."""
    return f"{queue}\x00{task or ''}"


def target_of(key: str) -> Target:
    queue, _, task = key.partition("\x00")
    return queue, task or None


def pack(paused_at: float, until: float | None, reason: str | None, by: str | None) -> bytes:
    return bytes(msgpack.packb([paused_at, until, reason, by]))


def unpack(key: str, raw: bytes) -> Pause:
    """The pause kept under ``key`` as ``raw``; bytes that do not decode give a pause with no end, no time
    and no reason (see the module docstring)."""
    queue, task = target_of(key)
    try:
        paused_at, until, reason, by = msgpack.unpackb(raw)
        if not isinstance(paused_at, (int, float)) or not (until is None or isinstance(until, (int, float))):
            raise ValueError("not a pause")
        why = reason if isinstance(reason, str) else None
        who = by if isinstance(by, str) else None
        return Pause(queue, task, float(paused_at), None if until is None else float(until), why, who)
    except (ValueError, TypeError, msgpack.UnpackException):
        return Pause(queue, task, 0.0, None, "(the stored pause does not decode: resume to lift it)", None)


def check_targets(queues: Any, task: Any) -> list[Target]:
    """``queues`` (a name, or an iterable of names) and ``task`` (None or a task name) as the pause's
    targets, each once, in the order given; ``InvalidJob`` for an empty list, a bad name, or too many."""
    if isinstance(queues, str):
        queues = [queues]
    try:
        names = list(queues)
    except TypeError:
        raise InvalidJob(f"queues must be a queue name or an iterable of them, not {queues!r}") from None
    if not names:
        raise InvalidJob("name at least one queue to pause or resume")
    if len(names) > MAX_TARGETS:
        raise InvalidJob(f"at most {MAX_TARGETS} queues at once, not {len(names)}")
    for name in names:
        validate_queue_name(name)
    if task is not None:
        validate_name(task)
    return [(name, task) for name in dict.fromkeys(names)]


def check_text(what: str, value: Any, limit: int) -> str | None:
    """A pause's ``reason`` or ``by``: None, or a str of at most ``limit`` characters with no control
    character (it reaches an operator's terminal); "" is None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidJob(f"{what} must be None or a str, not {type(value).__name__}")
    if len(value) > limit:
        raise InvalidJob(f"{what} must be at most {limit} characters, not {len(value)}")
    why = bad_character(value)
    if why is not None or "\x00" in value:
        raise InvalidJob(f"{what} cannot contain control characters: {value!r} has {why or 'NUL'}")
    return value


def check_duration(duration: Any) -> float | None:
    """A pause's ``duration`` (seconds from now): None (until resumed) or a finite number above 0."""
    if duration is None:
        return None
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not math.isfinite(duration):
        raise InvalidJob(f"duration must be None or a finite number of seconds, not {duration!r}")
    if not 0 < duration <= MAX_SECONDS:
        raise InvalidJob(f"duration must be above 0 and at most {MAX_SECONDS:.0f} seconds, not {duration!r}")
    return float(duration)


def in_force(rows: Any, now: float) -> list[Pause]:
    """The pauses of ``rows`` ((key, packed value) pairs, as a store keeps them) in force at ``now``, in
    key order: by queue, then task, a queue's own pause first."""
    found = [unpack(key, bytes(raw)) for key, raw in sorted(rows, key=lambda row: row[0])]
    return [pause for pause in found if pause.in_force(now)]


def ended(rows: Any, now: float) -> list[str]:
    """The keys of ``rows`` whose pause ended at or before ``now`` (a store drops them as it writes)."""
    return [key for key, raw in rows if not unpack(key, bytes(raw)).in_force(now)]
