"""The vocabulary shared by every layer: job ids and priorities, job states and the read-only ``Job``
snapshot.

Job ids: ``sequence << 8 | shard``: the shard that holds a job is the low byte of its id. The sequence of a
shard is ``max(previous + 1, now in µs)``, so ids are unique, grow with time in every shard, and sort across
shards in (roughly) enqueue order."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any

SHARD_BITS = 8
MAX_SHARDS = 1 << SHARD_BITS
PRIORITY_MIN = -100
PRIORITY_MAX = 100


def job_id_for(sequence: int, shard: int) -> int:
    return (sequence << SHARD_BITS) | shard


def utc_datetime(seconds: float | None) -> dt.datetime | None:
    """A time of a job (unix seconds) as an aware UTC datetime, for people; None for none, and for one that
    no datetime can hold (a row or record edited past the engine: year 287168, ``nan``), which the admin and
    the commands then show as no time rather than fail."""
    if seconds is None:
        return None
    try:
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None


def shard_of(job_id: int) -> int:
    return job_id & (MAX_SHARDS - 1)


class State(enum.StrEnum):
    """A job's state. The values are the ``stats()`` keys and what ``jobs()``/``purge()`` take."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


# The error type of a dead letter that a store quarantined because its data does not decode (its record,
# payload, partition key or metadata): it can be read and deleted, never requeued (nothing is left to run).
CORRUPTED = "Corrupted"

# The error type of a job ended because someone cancelled it while it ran (``cancels.Cancelled``, by its
# module path as ``nack`` stores error types): stored as a dead letter, but its own outcome, not a failure
# (``Job.cancelled``). Who cancelled it and when are in its metadata under ``CANCEL_KEY`` (``cancel_note``).
CANCELLED = "queue_max_django.engine.cancels.Cancelled"
CANCEL_KEY = "_cancel"  # {"by": who, "at": unix seconds}: written by Queue.request_cancel
UNIQUE_NOTE_KEY = "_unique"  # {"key", "until", "on_duplicate"}: a put's unique key (engine/uniqueness.py)


# Order matters: the integer code of a state is its index here, and that code is what is stored on disk.
STATES: tuple[State, ...] = (State.PENDING, State.SCHEDULED, State.RUNNING, State.DONE, State.FAILED)
STATE_CODE: dict[State, int] = {state: code for code, state in enumerate(STATES)}


@dataclass(frozen=True, slots=True)
class Job:
    """A frozen snapshot of one job, read in one transaction. Times are unix seconds or ``None``."""

    job_id: int
    state: State
    queue: str
    name: str | None
    priority: int
    payload: Any
    result: Any
    retries: int
    max_retries: int
    error: str | None
    error_type: str | None
    traceback: str | None
    enqueued_at: float
    started_at: float | None
    finished_at: float | None
    eta: float | None
    attempts: int = 0
    timeout: float | None = None
    partition_key: Any = None
    lease_until: float | None = None
    worker_ids: tuple[str, ...] = ()  # who claimed each attempt (the last 10), when workers said who they are
    errors: tuple[tuple[str | None, str | None], ...] = ()  # (error type, error) of each failed attempt
    damage: str | None = None  # why what is stored does not decode: a payload, result or partition key
    # (kept as the raw bytes), metadata (read as none)
    metadata: dict[str, Any] = field(default_factory=dict)  # the stored metadata (engine/metadata.py)

    @property
    def corrupted(self) -> bool:
        """A dead letter the store quarantined because its data does not decode (error type ``Corrupted``):
        ``Queue.requeue`` refuses it."""
        return self.state is State.FAILED and self.error_type == CORRUPTED

    @property
    def cancelled(self) -> bool:
        """Ended because someone cancelled it while it ran (error type ``Cancelled``): stored as a dead
        letter (state ``failed``) but shown and counted as cancelled, not as a failure. A job cancelled
        while it waited is removed instead, and leaves no job behind."""
        return self.state is State.FAILED and self.error_type == CANCELLED

    @property
    def cancel_note(self) -> CancelNote | None:
        """Who asked to cancel this job and when (``Queue.request_cancel(by=)``), as stored in its metadata
        under ``CANCEL_KEY``; None when no cancel was requested of it (or the note does not read)."""
        return CancelNote.of(self.metadata)

    @property
    def unique(self) -> UniqueNote | None:
        """The unique key this job was put with, its ``unique_until`` and ``on_duplicate``, as its metadata
        keeps them under ``UNIQUE_NOTE_KEY``; None without one (a periodic tick's key is not noted)."""
        return UniqueNote.of(self.metadata)

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags this job was put with (sorted; engine/tags.py), as its metadata keeps them under
        ``tags.TAGS_KEY``; () for none."""
        from .tags import tags_of

        return tags_of(self.metadata)

    @property
    def shard(self) -> int:
        """The shard that holds this job (derivable from its id)."""
        return shard_of(self.job_id)


@dataclass(frozen=True, slots=True)
class CancelNote:
    """A cancel request as the job's metadata keeps it: ``by`` whom (None: not said) ``at`` what time (unix
    seconds)."""

    by: str | None
    at: float

    def stored(self) -> dict[str, Any]:
        """The note as the metadata's value under ``CANCEL_KEY``."""
        return {"by": self.by, "at": self.at}

    @classmethod
    def of(cls, metadata: dict[str, Any] | None) -> CancelNote | None:
        """The note in ``metadata`` (a job's), or None."""
        note = (metadata or {}).get(CANCEL_KEY)
        if not isinstance(note, dict) or not isinstance(note.get("at"), (int, float)):
            return None
        by = note.get("by")
        return cls(by if isinstance(by, str) else None, float(note["at"]))


@dataclass(frozen=True, slots=True)
class UniqueNote:
    """A job's unique key as its metadata keeps it: the ``key``, ``until`` (``"started"``, ``"finished"`` or
    seconds) and ``on_duplicate`` (``"skip"``, ``"replace"``, ``"raise"``)."""

    key: str
    until: str | float
    on_duplicate: str

    def __str__(self) -> str:
        until = self.until if isinstance(self.until, str) else f"{self.until:g} s"
        return f"{self.key} (until {until}, on duplicate {self.on_duplicate})"

    @classmethod
    def of(cls, metadata: dict[str, Any] | None) -> UniqueNote | None:
        note = (metadata or {}).get(UNIQUE_NOTE_KEY)
        if not isinstance(note, dict) or not isinstance(note.get("key"), str):
            return None
        until, mode = note.get("until"), note.get("on_duplicate")
        if not isinstance(until, (str, int, float)) or isinstance(until, bool) or not isinstance(mode, str):
            return None
        return cls(note["key"], until, mode)
