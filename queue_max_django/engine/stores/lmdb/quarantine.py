"""Broken data: a job whose record or payload does not decode goes to the dead letters with a "corrupted"
reason (error type ``Corrupted``), so that one bad record never blocks a queue, and each is logged once its
transaction has committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ... import codec
from ...concurrency import queue_of
from ...errors import QueueCorrupted, QueueError
from ...job import CORRUPTED
from ..types import CorruptedJobQuarantined
from . import layout, turns
from .access import (
    COUNTED,
    ShardDbs,
    counts_inexact,
    delete_entry,
    index_job,
    load_payload,
    load_record,
    store_record,
    tally,
)
from .keys import LIMITED, QUEUE_SEP, id_key, micros, time_key_parts
from .layout import (
    F_ERROR,
    F_ERROR_TYPE,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_LIMITS,
    F_PAYLOAD,
    F_RESULT,
    F_STATE,
    F_TOKEN,
    FAILED,
    PENDING,
    RUNNING,
)
from .records import unreadable_record

# (job id, the index it was met in, its key there, or None if unknown) of a record a read could not decode
Unreadable = tuple[int, Any, bytes | None]

logger = logging.getLogger("queue_max_django.engine")


def quarantine(
    shard: ShardDbs,
    txn: Any,
    job_id: int,
    ready_k: bytes | None,
    record: list[Any] | None,
    now_us: int,
    reason: str,
    *,
    bad_payload: bytes | None = None,
    counted: bool = True,
    waiting: bool = False,
) -> CorruptedJobQuarantined:
    """A job whose data is broken goes to the dead letters with a "corrupted" reason, so that one bad
    record never blocks the queue. ``ready_k``: its entry in the ready index (None: the caller
    unindexed it). ``bad_payload``: payload bytes that do not decode; they are kept, as a msgpack bin
    value, so that the dead letter reads (and shows what was there). ``record`` None: the record does
    not decode (``layout.unpack_record``); a minimal one replaces it (queue "default", no name, enqueued
    when its id says), its bytes on disk are kept as the dead letter's result, and a large payload of
    it stays its payload (as bytes, if those do not decode either).

    A record that does not decode may have been running, with limits it no longer says: the running counts
    are then counted again from the running records (``recount_running``), unless the job is known to have
    been waiting (``ready_k`` given, or ``waiting``): a claim that quarantines one has taken jobs whose
    slots it charges at its end, which a recount in between would count as well."""
    if ready_k is not None:  # a pending job, met by a claim: its queue (the key says which) has one fewer
        delete_entry(txn, shard.ready, ready_k, met=True)
        tally(shard, txn, queue_of_ready(ready_k), COUNTED[PENDING], -1)
    elif record is None and counted:  # pending or scheduled, perhaps: the record cannot say, nor its queue
        counts_inexact(shard, txn)
    undecodable = record is None
    if record is None:  # undecodable: rebuild a minimal record around what we know
        key = id_key(job_id)
        raw = txn.get(key, db=shard.jobs)
        record = unreadable_record(job_id)
        if raw is not None:
            raw = bytes(raw)
            record[F_RESULT] = codec.pack_value(raw, what="record", limit=len(raw) + 16)
            reason += "; the record's bytes on disk are kept as the job's result"
        external = txn.get(key, db=shard.payloads)
        if external is not None and bad_payload is None:
            try:
                codec.unpack_stored(external, job_id, "payload")
            except QueueCorrupted:
                bad_payload = bytes(external)
    record[F_STATE] = FAILED
    record[F_FINISHED_AT] = now_us
    record[F_TOKEN] = None
    record[F_LEASE_UNTIL] = None
    record[F_ERROR] = f"corrupted: {reason}"
    record[F_ERROR_TYPE] = CORRUPTED
    if bad_payload is not None:
        kept = codec.pack_value(bad_payload, what="payload", limit=len(bad_payload) + 16)
        if record[F_PAYLOAD] is None:
            txn.put(id_key(job_id), kept, db=shard.payloads)
        else:
            record[F_PAYLOAD] = kept
    index_job(shard, txn, job_id, record)
    store_record(shard, txn, job_id, record)
    if load_payload(shard, txn, job_id, record) is None:
        record[F_PAYLOAD] = codec.pack_value(None, what="payload", limit=16)
    store_record(shard, txn, job_id, record)
    if undecodable and not waiting and ready_k is None and turns.any_running(shard, txn):
        recount_running(shard, txn)  # it may have run with limits that its record no longer says
    return CorruptedJobQuarantined(job_id, reason)


def queue_of_ready(ready_k: bytes) -> bytes:
    """The queue name (UTF-8) of a ready entry's key: the text before its separator, or, for a limited job
    waiting under its group's head (``keys.group_head``: a byte that is no text, then the group), the queue
    the group names."""
    head = ready_k[: ready_k.index(QUEUE_SEP)]
    if head[:1] != LIMITED:
        return head
    return queue_of(head[len(LIMITED) :].decode()).encode()


def recount_running(shard: ShardDbs, txn: Any) -> None:
    """The jobs running per limit key here, counted again from the running jobs' records (those the lease
    index names): after a job whose record does not decode left the running state, its slots come back
    (its limits are unknown, so they cannot be taken off one by one). O(running jobs), on broken data only;
    a running record that does not decode either is left out (its own quarantine recounts again)."""
    counted: dict[str, int] = {}
    for key in txn.cursor(db=shard.lease).iternext(values=False):
        job_id = time_key_parts(bytes(key))[1]
        try:
            record = load_record(shard, txn, job_id)
        except QueueCorrupted:
            continue
        if record is None or record[F_STATE] != RUNNING or record[F_LIMITS] is None:
            continue
        for limit_key, _n in record[F_LIMITS][1]:
            counted[limit_key] = counted.get(limit_key, 0) + 1
    turns.reset(shard, txn, counted)


def quarantine_met(
    shard: ShardDbs, txn: Any, job_id: int, db: Any, key: bytes | None, now_us: int, reason: str
) -> CorruptedJobQuarantined:
    """``quarantine`` of a job whose record does not decode, met through the entry ``key`` of index
    ``db`` (the walk knows where it came from: the record cannot say). ``key`` None: every index entry
    that names the job goes (``drop_entries``)."""
    if key is None:
        drop_entries(shard, txn, {job_id})
    else:
        delete_entry(txn, db, key, met=True)
    waiting = key is not None and (db is shard.ready or db is shard.sched)
    counted = key is None or waiting  # else it was running, done or failed
    return quarantine(shard, txn, job_id, None, None, now_us, reason, counted=counted, waiting=waiting)


def drop_entries(shard: ShardDbs, txn: Any, job_ids: set[int]) -> None:
    """Delete every index entry that names one of ``job_ids`` (records that do not decode, so their
    keys cannot be computed). A dead letter's entry is its id; the others are found by a scan of the
    other indexes, O(their entries): only ever for broken records, and once for each batch of them."""
    wanted = {id_key(job_id) for job_id in job_ids}
    rest = {key for key in wanted if not txn.delete(key, db=shard.failed)}
    if not rest:
        return  # each was a dead letter: a consistent index has no other entry for it
    for db in (shard.ready, shard.sched, shard.lease, shard.done_at):
        stale = [key for key in txn.cursor(db=db).iternext(values=False) if key[-8:] in rest]
        for key in stale:
            txn.delete(key, db=db)


def quarantine_unreadable(shard: ShardDbs, now: float, met: Sequence[Unreadable]) -> bool:
    """Quarantine the records a read met that do not decode (a read transaction cannot write them):
    each that still does not decode (another process may have done it meanwhile), in one write
    transaction. Never raises, so that the read still answers: a failure is logged. -> whether it
    committed."""
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []

    def txn_fn(txn: Any) -> None:
        found.clear()
        for job_id, db, key in met:
            raw = txn.get(id_key(job_id), db=shard.jobs)
            if raw is None:
                continue
            try:
                layout.unpack_record(raw, job_id)
            except QueueCorrupted as exc:
                found.append(quarantine_met(shard, txn, job_id, db, key, now_us, str(exc)))

    try:
        shard.env.write(txn_fn)
    except QueueError:
        logger.exception("shard %d: %d job(s) whose record does not decode could not be moved to the "
                         "dead letters", shard.index, len(met))  # fmt: skip
        return False
    report(shard, found)
    return True


def report(shard: ShardDbs, found: Sequence[CorruptedJobQuarantined]) -> None:
    """One log line per job a committed transaction moved to the dead letters (or deleted) because its
    data is broken: it happens once per job, since the dead letter it becomes reads fine."""
    for item in found:
        fate = "deleted, as asked" if item.deleted else "moved to the dead letters (error type 'Corrupted')"
        logger.error("shard %d: job %d %s: %s", shard.index, item.job_id, fate, item.reason)


def load_or_quarantine(
    shard: ShardDbs, txn: Any, job_id: int, now_us: int, found: list[CorruptedJobQuarantined]
) -> list[Any] | None:
    """``load_record``, but a record that does not decode is first quarantined (noted in ``found``): -> the
    dead letter it became."""
    try:
        return load_record(shard, txn, job_id)
    except QueueCorrupted as exc:
        found.append(quarantine_met(shard, txn, job_id, None, None, now_us, str(exc)))
        return load_record(shard, txn, job_id)
