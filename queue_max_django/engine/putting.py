"""``Putter``: a Queue's writes of new jobs, once their options are checked (``options.PutOptions``). It
packs the payloads, picks their shard (the partition key's, or the next of the Queue's rotation), writes
them (one job, a batch in one transaction, or parts spread over the shards, one transaction each), and
tells listeners: an enqueue event per job, and an alert when the store's pending jobs pass the Queue's
threshold. ``Queue.put``'s common case (no unique key, not durable) goes to the store itself and asks the
Putter only to pack, route and announce, so that the hot path takes no extra call.
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgpack

from . import codec
from .errors import ConfigurationError
from .events import ALERT, JOB_ENQUEUED, Events
from .jobspec import JobSpec
from .stores.base import Store
from .stores.contract.uniqueness import UniqueRule
from .stores.types import NewJobs
from .uniqueness import UniquePut

ALERT_QUIET = 1.0  # seconds from one pending alert to the next, at least


def shard_of_key(partition_key: Any, shards: int) -> int:
    """The shard a put with ``partition_key`` (or a unique key's text) goes to in a store of ``shards``."""
    return zlib.crc32(msgpack.packb(partition_key, use_bin_type=True)) % shards


class PutOwner(Protocol):
    """What a ``Putter`` reads of its Queue, at each put (so that a Queue's settings and ``events`` stay
    its own): the store behind the closed and fork checks, the clock, and the put settings."""

    events: Events
    shard_count: int
    max_payload_bytes: int
    sync: bool
    alert_threshold: int | None
    _clock: Callable[[], float]

    def _live(self) -> Store: ...


class Putter:
    """The writes of new jobs for one Queue (its ``PutOwner``). ``rotation``: the shard a put without a
    partition key goes to first; each such put or batch takes the next one."""

    def __init__(self, owner: PutOwner, rotation: int) -> None:
        self._owner = owner
        self._rotation = itertools.count(rotation)
        self._alert_quiet_until = 0.0

    def pack(self, payload: Any) -> bytes:
        """The payload as stored: ``PayloadNotSerializable`` or ``PayloadTooLarge`` if it cannot be."""
        return codec.pack_value(payload, what="payload", limit=self._owner.max_payload_bytes)

    def route(self, partition_key: Any) -> int:
        """The shard of a put: the partition key's (a hash of its msgpack form), else the next in turn."""
        if partition_key is None:
            return next(self._rotation) % self._owner.shard_count
        return shard_of_key(partition_key, self._owner.shard_count)

    def put_one(
        self,
        store: Store,
        now: float,
        payload: Any,
        spec: JobSpec,
        unique: UniqueRule | None,
        partition_key: Any,
        connection: Any = None,
    ) -> UniquePut:
        """``Queue.put``'s other cases: with a unique key (routed by it: the check and the write meet on
        its shard; ``uniqueputs.py`` refused a partition key with it, and gives the limits' route key of a
        limited job, whose unique key is scoped to it), or durable (``sync``: group commit,
        which picks the shard of a put without a key itself). -> the job's id (or the holder's of the
        key) and what the put did."""
        if unique is not None and partition_key is None:
            partition_key = unique.text  # one key, one shard: the check and the write meet there
        job = NewJobs((self.pack(payload),), spec, unique)
        if connection is not None:
            job_id = joined(store).enqueue(now, self.route(partition_key), [job], False, connection)[0]
        elif self._owner.sync:
            # Durable puts without a key join a batch already forming on some shard, if any (the store
            # picks): an fsync shared by more puts is the whole point of group commit.
            shard = None if partition_key is None else self.route(partition_key)
            job_id = store.enqueue(now, shard, [job], True)[0]
        else:
            job_id = store.enqueue(now, self.route(partition_key), [job], False)[0]
        if self.watching and not job.unique_hit:
            self.announce([job_id], spec.queue, spec.name)
        return UniquePut.of(job_id, job)

    def put_many(
        self, shard: int, payloads: Iterable[Any], spec: JobSpec, connection: Any = None
    ) -> list[int]:
        """Pack every payload, then store them all in ``shard``, in one transaction (the caller's, on
        ``connection``). -> their ids."""
        packed = codec.pack_values(payloads, what="payload", limit=self._owner.max_payload_bytes)
        if connection is not None:
            store = joined(self._owner._live())
            ids = store.enqueue(self._owner._clock(), shard, [NewJobs(packed, spec)], False, connection)
            if ids and self.watching:
                self.announce(ids, spec.queue, spec.name)
            return ids
        return self._write(shard, packed, spec)

    def put_parts(
        self, payloads: Iterable[Any], spec: JobSpec, part_size: int | None, partition_key: Any
    ) -> list[int]:
        """Pack every payload, then store them ``part_size`` a part (None: as many parts as shards), one
        transaction each, the parts on the shards in turn from the next of the rotation (all on the key's
        shard with ``partition_key``). -> the ids, in the payloads' order."""
        packed = codec.pack_values(payloads, what="payload", limit=self._owner.max_payload_bytes)
        count = self._owner.shard_count
        size = part_size or max(1, -(-len(packed) // count))
        first = self.route(partition_key)
        step = 0 if partition_key is not None else 1
        ids: list[int] = []
        for part, start in enumerate(range(0, len(packed), size)):
            ids += self._write((first + part * step) % count, packed[start : start + size], spec)
        return ids

    def _write(self, shard: int, packed: list[bytes], spec: JobSpec) -> list[int]:
        """Store packed payloads in one shard, in one transaction. -> their ids."""
        owner = self._owner
        store = owner._live()
        if not packed:
            return []
        ids = store.enqueue(owner._clock(), shard, [NewJobs(packed, spec)], owner.sync)
        if self.watching:
            self.announce(ids, spec.queue, spec.name)
        return ids

    @property
    def watching(self) -> bool:
        """Does anyone listen for puts (an enqueue listener, or an alert threshold with a listener)?"""
        owner = self._owner
        events = owner.events
        return events.listening(JOB_ENQUEUED) or (
            owner.alert_threshold is not None and events.listening(ALERT)
        )

    def announce(self, ids: list[int], queue: str, name: str | None) -> None:
        """After a put: an enqueue event per job, and an alert (at most one a second) when the store's
        pending jobs are over the threshold."""
        owner = self._owner
        events = owner.events
        if len(ids) == 1:  # a single put: emit asks what listening would (no second look)
            events.emit(JOB_ENQUEUED, job_id=ids[0], queue=queue, name=name)
        elif events.listening(JOB_ENQUEUED):
            for job_id in ids:
                events.emit(JOB_ENQUEUED, job_id=job_id, queue=queue, name=name)
        threshold = owner.alert_threshold
        if threshold is not None and events.listening(ALERT) and time.monotonic() >= self._alert_quiet_until:
            pending = owner._live().pending_count()  # the store keeps this cheap: see its pending_count
            if pending > threshold:
                self._alert_quiet_until = time.monotonic() + ALERT_QUIET
                events.emit(ALERT, type="pending", pending=pending, threshold=threshold)


def joined(store: Store) -> Store:
    """``store``, if a put can join the caller's database transaction on it; ``ConfigurationError`` if not."""
    if not store.transactional_enqueue:
        raise ConfigurationError(
            f"put(connection=...) joins the caller's database transaction, which the {store.kind} store "
            f"cannot: its jobs are not in the application's database (use the PostgreSQL store for that)"
        )
    return store
