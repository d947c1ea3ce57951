"""Moving jobs from one store to another (``manage.py queue_transfer``, ``engine/transfer.py``): what a store
hands out and takes in, as ``Store.transfer``.

A job crosses as a ``MovedJob``: every field a store keeps of a job that is not running, as plain values
(times in integer µs, the payload and result as the bytes the Queue packed, the partition key as msgpack
bytes, the metadata as its JSON text), so that no store's layout crosses the line. The move itself is the
engine's (``engine/transfer.py``): it reads a batch from the source (``export``), writes it to the target
(``insert``, one transaction that also *marks* each id as moved), then removes it from the source
(``remove``). A move killed between the two leaves the batch in both stores, and the rerun skips the ids the
target marked, so that a job that ran (and even was vacuumed) in the target is never written there again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgpack

from ...errors import QueueError
from ...job import State


@dataclass(slots=True)
class MovedJob:
    """One job as a store exports it and another inserts it (see the module docstring)."""

    job_id: int
    state: State  # never RUNNING
    queue: str
    name: str | None
    priority: int
    retries: int
    max_retries: int
    attempts: int
    enqueued_us: int
    ready_us: int  # pending: when it became claimable; scheduled: its ETA; done and failed: 0
    started_us: int | None
    finished_us: int | None  # done and failed only
    timeout: float | None
    partition_key: bytes | None  # msgpack, as the Queue validated it (None: none)
    payload: bytes
    result: bytes | None
    error: str | None
    error_type: str | None
    traceback: str | None
    worker_ids: tuple[str, ...]
    errors: tuple[tuple[str | None, str | None], ...]  # (error type, error) of each failed attempt
    metadata: bytes | None  # JSON text (engine/metadata.py)
    limits: tuple[tuple[str, int], ...] | None  # its concurrency limits (engine/concurrency.py), or None
    alone_next: bool  # its lease once expired: its next claim takes it alone
    cancel_us: int | None  # when a cancel was requested of it (a dead letter that was cancelled keeps it)
    unique: UniqueEntry | None = None  # the entry of a unique key that names it (``unique_entries``)


@dataclass(frozen=True, slots=True)
class UniqueEntry:
    """A unique key's entry as a store keeps it (``contract/uniqueness.py``), for the job it names."""

    key: bytes
    used_us: int
    hold: int
    until_us: int


@dataclass(frozen=True, slots=True)
class SealedFields:
    """The fields of a job that hold its user's data, as ``MovedJob`` carries them: what an encrypted job
    keeps sealed (``engine/sealing.py``) and ``rewrite`` replaces in place (``engine/rekey.py``)."""

    payload: bytes
    result: bytes | None
    error: str | None
    traceback: str | None
    errors: tuple[tuple[str | None, str | None], ...]
    metadata: bytes | None

    @classmethod
    def of(cls, job: MovedJob) -> SealedFields:
        return cls(job.payload, job.result, job.error, job.traceback, job.errors, job.metadata)


class TransferConflict(QueueError):
    """``insert`` met an id the target holds as a job of its own (not one it took in a move): nothing of
    that call was written."""


class TransferOps(Protocol):
    """The operations of a move, on the source (``export``, ``remove``) and on the target (``insert``,
    ``forget_marks``). None of them is on a hot path.

    - [sc_transfer_export] ``export(shard, after, limit)``: up to ``limit`` jobs of ``shard`` that are not
      running, by id, all after ``after`` (None: from the first), as ``MovedJob`` values, in one consistent
      read. A job whose stored data does not decode is exported as the store reads it (``Store.job``): the
      engine names it rather than move it. Changes nothing. ``unique_entries(shard)``: every unique key's
      entry of ``shard`` (``contract/uniqueness.py``), as (the id of the job it names, ``UniqueEntry``),
      in one read: the engine sets ``MovedJob.unique`` of the jobs it moves from them.
    - [sc_transfer_insert] ``insert(jobs)``: write ``jobs`` (all of one shard of this store: the low byte of
      their ids) in one transaction, all or nothing, each as it was exported: its state, its place in its
      state's order, its counts (``counts``, ``queue_counts``, and as a put in ``total`` and
      ``enqueued_totals``), its cancel mark; a limited pending job waits for its turn in its group as a put
      one does. A job's unique entry is written with it unless the store has an entry for that key (its
      holder keeps it). Each id is *marked* as moved in the same transaction. An id already marked is
      skipped (a rerun); -> the ids written. An id the store holds as a job it did not take in a move
      raises ``TransferConflict``, nothing written.
    - [sc_transfer_ids] An inserted job keeps its id. On a store of several shards its low byte names the
      shard that holds it (``InvalidJob`` for one the store does not have, nothing written); a store of one
      shard holds any id (the low byte of its own ids stays 0, and job operations find the job by its id).
      Later puts in that shard get larger ids than every id inserted there (``sc_ids``: never reused).
    - [sc_transfer_remove] ``remove(shard, ids)``: remove those jobs of ``shard`` that are not running, as
      ``delete`` does, in one transaction. -> how many went.
    - [sc_transfer_marks] ``forget_marks()``: drop every mark (the move is over: the source holds none of
      those ids). -> how many there were. ``marks()``: how many there are now.
    - [sc_transfer_rewrite] ``rewrite(shard, changes)``: each change ``(job_id, old, new)`` (``SealedFields``)
      replaces, in place, the payload, result, error, traceback, error history and metadata of that job of
      ``shard`` by ``new`` if the job is there, is not running, and holds exactly ``old`` (as ``export``
      gave them; the metadata compared as JSON); any other job is left as it is. Its state, times, counts,
      indexes, tags (``new`` keeps its metadata's ``_tags``) and everything else stay. One transaction for
      all of ``changes``. -> the ids rewritten. (``manage.py queue_rekey``: a job that changed between the
      export and the rewrite, such as one claimed, is seen again by the next pass.)
    """

    def export(self, shard: int, after: int | None, limit: int) -> list[MovedJob]: ...

    def unique_entries(self, shard: int) -> list[tuple[int, UniqueEntry]]: ...

    def insert(self, jobs: Sequence[MovedJob]) -> list[int]: ...

    def remove(self, shard: int, ids: Sequence[int]) -> int: ...

    def forget_marks(self) -> int: ...

    def marks(self) -> int: ...

    def rewrite(self, shard: int, changes: Sequence[tuple[int, SealedFields, SealedFields]]) -> list[int]: ...


def pack_key(value: object) -> bytes | None:
    """A partition key (None, str, int or bytes, as the Queue validated it) as ``MovedJob`` carries it."""
    return None if value is None else bytes(msgpack.packb(value, use_bin_type=True))


def unpack_key(raw: bytes | None) -> object:
    return None if raw is None else msgpack.unpackb(raw, raw=False)
