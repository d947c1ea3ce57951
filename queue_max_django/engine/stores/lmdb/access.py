"""What every transaction of a shard does to a job: read its record and payload, write the record, keep the
index entry of its state and its queue's counts in step with it (invariant 1). Functions of the shard
(``ShardDbs``: a ``Shard`` is one) and the open transaction, shared by ``shard.py``, ``upkeep.py``,
``reads.py``, ``manage.py`` and ``quarantine.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from ...errors import QueueCorrupted
from ...job import CANCELLED, STATES, State
from ...tags import TAGS_MARK
from ...workflows import WORKFLOW_MARK
from . import layout, tagkeys, turns
from .env import Env
from .keys import (
    LIMITED,
    QUEUE_SEP,
    group_head,
    id_key,
    micros,
    next_queue_prefix,
    queue_prefix,
    ready_key,
    time_key,
    time_key_parts,
)
from .layout import (
    DONE,
    F_ERROR,
    F_ERROR_TYPE,
    F_ERRORS,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_LIMITS,
    F_METADATA,
    F_NAME,
    F_PAYLOAD,
    F_PRIORITY,
    F_QUEUE,
    F_READY_AT,
    F_RETRIES,
    F_STATE,
    F_TOKEN,
    F_TRACEBACK,
    FAILED,
    HISTORY_MAX,
    PENDING,
    RUNNING,
    SCHEDULED,
)


class ShardDbs(Protocol):
    """One shard's environment and databases, as the functions of its transactions use them."""

    index: int
    env: Env
    jobs: Any
    payloads: Any
    ready: Any
    sched: Any
    lease: Any
    done_at: Any
    failed: Any
    workflows: Any
    node_ended: Any  # settles a workflow node whose job ended (lmdb/workflows.ended)
    unique: Any
    cancels: Any
    turns: Any
    tags: Any  # the tag index (tagged.py)
    indexes: dict[State, Any]  # one per state; its entry count is the state's count


# (last sequence, total successful puts, ready floor), in the jobs database under a key past every job id:
# new records are appended at the end of that B-tree, so a put dirties one page for the record and the
# counters both. The ready floor is the ready time (µs) of the last job put pending: a new pending job is
# ready at max(now, floor), so FIFO outlives the clock stepping back, and a put is ready at its own
# microsecond (ties broken by id), as a retry or requeue at that microsecond is. A store written before the
# floor has the first two only (``COUNTERS.unpack_from`` reads those of either); its floor is the sequence,
# the ready time its puts were given then.
COUNTERS_KEY = b"\xff" * 8
COUNTERS = struct.Struct(">QQ")
PUT_COUNTERS = struct.Struct(">QQQ")


def put_counters(raw: bytes | None) -> tuple[int, int, int]:
    """(last sequence, total puts, ready floor) from the counters' stored value (None: a new shard)."""
    if raw is None:
        return 0, 0, 0
    if len(raw) == PUT_COUNTERS.size:
        return PUT_COUNTERS.unpack(raw)
    sequence, total = COUNTERS.unpack(raw)
    return sequence, total, sequence


# Per queue, right after them: QUEUE_COUNTS_KEY + queue name -> (pending, scheduled) jobs of that queue
# here, changed in the same transactions as the states (no key while both are 0), so that queue_counts()
# is O(queues) for the states that grow without bound. (Running jobs are few by nature, at most what the
# workers hold: queue_counts() reads their records, which spares every ack a counter write.) The key alone
# (an empty queue name, which no queue has) says they are exact: without it (a store older than them, or a
# quarantined record whose queue could not be read) the next queue_counts() rebuilds them from the
# indexes, in one write transaction. They sit on the last page of the jobs B-tree, with the newest records
# and the shard's counters, which a put writes anyway.
QUEUE_COUNTS_KEY = COUNTERS_KEY + b"q"
QUEUE_COUNTS = struct.Struct(">qq")  # (pending, scheduled): a queue's counts as first stored
# Then (pending, scheduled, jobs ever put into the queue in this shard): the put's tally counts the put in
# the same value it writes anyway (``Store.enqueued_totals``), so the key of a queue that ever had a job
# stays (zeros and its total) and a rebuild of the counts keeps the totals. A store written before the
# totals counts from its first put since.
QUEUE_COUNTS_TOTAL = struct.Struct(">qqQ")
QUEUE_COUNTS_EXACT = b"exact"
COUNTED = {PENDING: 0, SCHEDULED: 1}  # state code -> its place in a queue's counts
# And after those: (done jobs, dead letters) that ever left their state in this shard: vacuumed, purged,
# deleted or requeued. The state counts plus these are the jobs ever done and ever dead-lettered
# (``Store.finished_totals``), counted by the operations that remove such jobs (``unindex_job``), so an ack
# or a failure writes nothing more for them.
FINISHED_LEFT_KEY = COUNTERS_KEY + b"r"
FINISHED_LEFT = struct.Struct(">QQ")
# And (cancelled jobs among the dead letters now, cancelled ones that left the failed state since): a job
# counts while it is a dead letter whose error type is ``job.CANCELLED``, kept in step by ``index_job`` and
# ``unindex_job`` as the state counts are (``Store.cancel_counts``).
CANCELLED_KEY = COUNTERS_KEY + b"c"
CANCELLED_COUNTS = struct.Struct(">qQ")
UNIQUE = struct.Struct(">QQ")  # a unique key's value: (job id, when the key was used, µs)


def load_record(shard: ShardDbs, txn: Any, job_id: int) -> list[Any] | None:
    raw = txn.get(id_key(job_id), db=shard.jobs)
    return None if raw is None else layout.unpack_record(raw, job_id)


def load_payload(shard: ShardDbs, txn: Any, job_id: int, record: list[Any]) -> bytes | None:
    inline: bytes | None = record[F_PAYLOAD]
    return inline if inline is not None else txn.get(id_key(job_id), db=shard.payloads)


def store_record(shard: ShardDbs, txn: Any, job_id: int, record: list[Any]) -> None:
    txn.put(id_key(job_id), layout.pack_record(record), db=shard.jobs)


def index_key_of(shard: ShardDbs, job_id: int, record: list[Any]) -> tuple[Any, bytes | None]:
    """(database, key) of the job's entry in the index of its current state."""
    state = record[F_STATE]
    if state == PENDING:
        limits = record[F_LIMITS]  # a limited job waits under its group (turns.py)
        queue = record[F_QUEUE].encode() if limits is None else group_head(limits[0])
        return shard.ready, ready_key(queue, record[F_PRIORITY], record[F_READY_AT], job_id)
    if state == SCHEDULED:
        return shard.sched, time_key(record[F_READY_AT], job_id)
    if state == RUNNING:
        lease = record[F_LEASE_UNTIL]
        return shard.lease, None if lease is None else time_key(lease, job_id)
    if state == DONE:
        return shard.done_at, time_key(record[F_FINISHED_AT], job_id)
    return shard.failed, id_key(job_id)


def unindex_job(shard: ShardDbs, txn: Any, job_id: int, record: list[Any]) -> None:
    """Remove the job from the index of its current state (and from its queue's count of it)."""
    db, key = index_key_of(shard, job_id, record)
    if key is not None:
        delete_entry(txn, db, key)
    state = record[F_STATE]
    limits = record[F_LIMITS]
    if limits is not None:
        if state == PENDING:
            turns.leave_if_done(shard, txn, limits[0])
        elif state == RUNNING:
            turns.change(shard, txn, limits[1], -1)
    place = COUNTED.get(state)
    if place is not None:
        tally(shard, txn, record[F_QUEUE].encode(), place, -1)
    elif state in (DONE, FAILED):
        finished_left(shard, txn, state)
        if state == FAILED and record[F_ERROR_TYPE] == CANCELLED:
            cancelled_count(shard, txn, -1)


def cancelled_count(shard: ShardDbs, txn: Any, change: int) -> None:
    """A cancelled dead letter came (+1) or went (-1, counted as one that left) (``CANCELLED_KEY``)."""
    raw = txn.get(CANCELLED_KEY, db=shard.jobs)
    now, left = CANCELLED_COUNTS.unpack(raw) if raw is not None else (0, 0)
    now, left = max(0, now + change), left + (change < 0)
    txn.put(CANCELLED_KEY, CANCELLED_COUNTS.pack(now, left), db=shard.jobs)


def cancel_counts(shard: ShardDbs, txn: Any) -> tuple[int, int]:
    """(cancelled dead letters now, jobs ever cancelled) in this shard, from ``CANCELLED_KEY``."""
    raw = txn.get(CANCELLED_KEY, db=shard.jobs)
    now, left = CANCELLED_COUNTS.unpack(raw) if raw is not None else (0, 0)
    return now, now + left


def finished_left(shard: ShardDbs, txn: Any, state: int) -> None:
    """One more job left the done (``DONE``) or the failed state of this shard (``FINISHED_LEFT_KEY``)."""
    raw = txn.get(FINISHED_LEFT_KEY, db=shard.jobs)
    done, failed = FINISHED_LEFT.unpack(raw) if raw is not None else (0, 0)
    if state == DONE:
        done += 1
    else:
        failed += 1
    txn.put(FINISHED_LEFT_KEY, FINISHED_LEFT.pack(done, failed), db=shard.jobs)


def index_job(shard: ShardDbs, txn: Any, job_id: int, record: list[Any]) -> None:
    """Add the job to the index of its (new) state (and to its queue's count of it)."""
    db, key = index_key_of(shard, job_id, record)
    assert key is not None  # a running job always gets its lease before being indexed
    # A ready entry carries the job's name, so flow control can walk past held-back jobs by key alone.
    txn.put(key, name_bytes(record[F_NAME]) if db is shard.ready else b"", db=db)
    limits = record[F_LIMITS]
    if limits is not None:
        if db is shard.ready:
            turns.join(shard, txn, limits[0])
        elif record[F_STATE] == RUNNING:
            turns.change(shard, txn, limits[1], 1)
    place = COUNTED.get(record[F_STATE])
    if place is not None:
        tally(shard, txn, record[F_QUEUE].encode(), place, 1)
    elif record[F_STATE] == FAILED and record[F_ERROR_TYPE] == CANCELLED:
        cancelled_count(shard, txn, 1)
    if record[F_STATE] == FAILED and record[F_METADATA] is not None and WORKFLOW_MARK in record[F_METADATA]:
        shard.node_ended(shard, txn, record)  # a node's job is a dead letter: settle its node


def queue_counts_of(raw: bytes) -> tuple[int, int, int]:
    """A queue counts value: (pending, scheduled, jobs ever put; 0 in a value written before the totals)."""
    if len(raw) == QUEUE_COUNTS_TOTAL.size:
        return QUEUE_COUNTS_TOTAL.unpack(raw)
    pending, scheduled = QUEUE_COUNTS.unpack(raw)
    return pending, scheduled, 0


def queue_count_rows(shard: ShardDbs, txn: Any) -> Iterator[tuple[bytes, tuple[int, int, int]]]:
    """Each queue's counts value in this shard, by name: (queue name, (pending, scheduled, jobs ever
    put)). The marker key ``QUEUE_COUNTS_KEY`` alone (the counts are exact) is not one of them."""
    cursor = txn.cursor(db=shard.jobs)
    if not cursor.set_range(QUEUE_COUNTS_KEY + b"\x00"):
        return
    prefix = len(QUEUE_COUNTS_KEY)
    for key, value in cursor:
        if not key.startswith(QUEUE_COUNTS_KEY):
            return
        yield bytes(key[prefix:]), queue_counts_of(value)


def tally(shard: ShardDbs, txn: Any, queue: bytes, place: int, change: int, put: int = 0) -> None:
    """Add ``change`` to the count of ``queue``'s jobs in state ``place`` (see ``COUNTED``), and ``put`` to
    its jobs ever put (a put's tally)."""
    key = QUEUE_COUNTS_KEY + queue
    jobs = shard.jobs
    raw = txn.get(key, db=jobs)
    pending, scheduled, total = queue_counts_of(raw) if raw is not None else (0, 0, 0)
    if place:
        scheduled += change
    else:
        pending += change
    total += put
    if pending or scheduled or total:
        txn.put(key, QUEUE_COUNTS_TOTAL.pack(pending, scheduled, total), db=jobs)
    elif raw is not None:
        txn.delete(key, db=jobs)


def counts_inexact(shard: ShardDbs, txn: Any) -> None:
    """A job left a counted state and its queue cannot be told (its record does not decode): the
    queue counts are rebuilt by the next ``queue_counts()``."""
    txn.delete(QUEUE_COUNTS_KEY, db=shard.jobs)


def delete_job(shard: ShardDbs, txn: Any, job_id: int, record: list[Any]) -> None:
    unindex_job(shard, txn, job_id, record)
    meta = record[F_METADATA]
    if meta is not None and record[F_STATE] in (PENDING, SCHEDULED) and WORKFLOW_MARK in meta:
        shard.node_ended(shard, txn, record)  # a node's job removed while it waited: cancelled
    if meta is not None and TAGS_MARK in meta:
        tagkeys.unindex(shard, txn, job_id, meta)
    key = id_key(job_id)
    txn.delete(key, db=shard.jobs)
    if record[F_PAYLOAD] is None:
        txn.delete(key, db=shard.payloads)
    txn.delete(key, db=shard.cancels)  # a cancel request, if any, goes with the job


def fail_record(
    shard: ShardDbs,
    txn: Any,
    job_id: int,
    record: list[Any],
    now: float,
    error: tuple[str | None, str | None, str | None],
    retry_at: float | None,
) -> State:
    now_us = micros(now)
    unindex_job(shard, txn, job_id, record)
    retries = record[F_RETRIES] + 1
    record[F_RETRIES] = retries
    record[F_ERROR], record[F_ERROR_TYPE], record[F_TRACEBACK] = error
    history = record[F_ERRORS] or []
    history.append([error[1], error[0]])
    record[F_ERRORS] = history[-HISTORY_MAX:]
    record[F_TOKEN] = None
    record[F_LEASE_UNTIL] = None
    if retry_at is None:
        record[F_STATE] = FAILED
        record[F_FINISHED_AT] = now_us
    elif retry_at > now:
        record[F_STATE] = SCHEDULED
        record[F_READY_AT] = micros(retry_at)
    else:
        record[F_STATE] = PENDING
        record[F_READY_AT] = now_us
    index_job(shard, txn, job_id, record)
    store_record(shard, txn, job_id, record)
    new_state: State = STATES[record[F_STATE]]
    return new_state


def name_bytes(name: str | None) -> bytes:
    return b"" if name is None else name.encode()


# Walks over a damaged page. LMDB keeps no checksums: a flipped bit in a key leaves it out of order in its
# page, where a cursor still meets it but a lookup by key (``txn.get``, ``txn.delete``) misses it, and a
# seek can land before its target. A walk that deletes the entry it met by key and seeks on from it would
# then find the same entry again, for ever, inside a write transaction that holds the shard's lock. So a
# walk that seeks from key to key moves forward only (``seek``), and one that consumes the entries it meets
# (a claim: a queue's next job is the first entry of its range) removes each with ``delete_entry(met=True)``,
# which deletes it wherever a cursor finds it when a lookup cannot, or raises: each step takes one entry away.


def seek(cursor: Any, target: bytes) -> bool:
    """``cursor.set_range(target)``: whether the cursor is on an entry at or past ``target``. False also
    when the entry it found sorts before ``target`` (only a damaged page gives one): the walk ends there."""
    return bool(cursor.set_range(target)) and cursor.key() >= target


def delete_entry(txn: Any, db: Any, key: bytes, *, met: bool = False) -> bool:
    """Delete index entry ``key``; where a lookup misses it (a damaged page holds it out of order), delete
    it where a cursor's seek finds it. ``met``: a walk's cursor met the entry, so it is there: failing
    both, it is looked for along the whole index (O(entries), once: only a damaged page costs it) and
    deleted where it is, or ``QueueCorrupted`` is raised, so that no walk meets it again and again.
    -> whether it was there."""
    if txn.delete(key, db=db):
        return True
    cursor = txn.cursor(db=db)
    if cursor.set_range(key) and cursor.key() == key:
        return bool(cursor.delete())
    if not met:
        return False
    found = cursor.first()
    while found and cursor.key() != key:
        found = cursor.next()
    if found:
        return bool(cursor.delete())
    raise QueueCorrupted(
        f"an index entry ({bytes(key).hex()}) that a walk met can be neither found nor deleted: a page of "
        f"this shard's file is damaged"
    )


def queue_prefixes(cursor: Any) -> list[bytes]:
    """The (queue name + NUL) prefixes present in the ready index: one seek per queue."""
    prefixes = []
    found = cursor.first()
    while found:
        key = cursor.key()
        prefix = key[: key.index(QUEUE_SEP) + 1]
        prefixes.append(prefix)
        found = seek(cursor, next_queue_prefix(prefix[:-1]))
    return prefixes


def entry_count(txn: Any, db: Any) -> int:
    return int(txn.stat(db)["entries"])


def best_ready(cursor: Any, queues: Sequence[bytes] | None) -> bytes | None:
    """The ready key that runs next among ``queues`` (all queues if None): highest priority, then the
    earliest ready time, then the lowest id. One seek per queue name, never a scan of jobs."""
    heads = queue_heads(cursor, queues)
    return min(heads)[1] if heads else None


def queue_heads(cursor: Any, queues: Sequence[bytes] | None) -> list[list[bytes]]:
    """[order part, full key, queue prefix] of the next ready job of each queue (of ``queues``, or of
    every queue) that has one: ``min()`` of them is what ``best_ready`` returns."""
    heads: list[list[bytes]] = []
    if queues is None:
        found = cursor.first()
        while found:
            key = cursor.key()
            if key[:1] == LIMITED:
                break  # limited jobs' groups from here on: claimed in turn (turns.py), not here
            cut = key.index(b"\x00") + 1
            heads.append([key[cut:], key, key[:cut]])
            found = seek(cursor, next_queue_prefix(key[: cut - 1]))
    else:
        for queue in queues:
            prefix = queue_prefix(queue)
            if cursor.set_range(prefix):
                key = cursor.key()
                if key.startswith(prefix):
                    heads.append([key[len(prefix) :], key, prefix])
    return heads


def next_eta(shard: ShardDbs, txn: Any) -> float | None:
    """The earliest ETA of this shard's scheduled jobs (unix seconds), or None."""
    cursor = txn.cursor(db=shard.sched)
    return time_key_parts(cursor.key())[0] / 1_000_000 if cursor.first() else None
