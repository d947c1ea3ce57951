"""Reads of one shard: the best job a consumer under flow control may take, a job's snapshot, where it
sorts and the listings by state, the state and queue counts (and their rebuild), and the consistency
check. A record met that does not decode is quarantined once the read is done
(``quarantine.quarantine_unreadable``: a read transaction cannot write).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ... import codec
from ...concurrency import GROUP_SEP, queue_of
from ...errors import QueueCorrupted
from ...job import CORRUPTED, STATE_CODE, STATES, Job, State
from ..types import Candidate, CorruptedJobQuarantined
from . import layout
from .access import (
    COUNTED,
    COUNTERS,
    COUNTERS_KEY,
    QUEUE_COUNTS_EXACT,
    QUEUE_COUNTS_KEY,
    QUEUE_COUNTS_TOTAL,
    ShardDbs,
    cancel_counts,
    entry_count,
    index_key_of,
    load_payload,
    load_record,
    queue_count_rows,
    queue_counts_of,
    queue_prefixes,
    seek,
)
from .keys import (
    LIMITED,
    PRIORITY_KEY_MIN,
    group_head,
    id_from_key,
    id_key,
    micros,
    next_queue_prefix,
    queue_prefix,
    ready_key,
    ready_key_parts,
    ready_prefix,
    time_key,
    time_key_parts,
)
from .layout import (
    F_ERROR,
    F_ERROR_TYPE,
    F_FINISHED_AT,
    F_LEASE_UNTIL,
    F_MAX_RETRIES,
    F_NAME,
    F_PAYLOAD,
    F_PRIORITY,
    F_QUEUE,
    F_READY_AT,
    F_RESULT,
    F_RETRIES,
    F_STATE,
    F_TOKEN,
    FAILED,
)
from .quarantine import Unreadable, quarantine_met, quarantine_unreadable, report
from .records import record_to_job, unreadable_record
from .workflow_checks import verify_workflows

_READY_TAIL = struct.Struct(">QQ")  # after the queue name, NUL and the 2-byte flipped priority


@dataclass(frozen=True, slots=True)
class Listed:
    """A job found by ``list_jobs``, not decoded yet: shards are merged by ``sort_key`` first."""

    sort_key: bytes
    job_id: int
    record: list[Any]
    payload: bytes | None

    def job(self) -> Job:
        return record_to_job(self.job_id, self.record, self.payload)


def peek_allowed(
    shard: ShardDbs,
    now: float,
    queues: Sequence[bytes] | None,
    skip_queues: frozenset[bytes],
    skip_names: frozenset[str],
    scan_limit: int = 100_000,
) -> tuple[Candidate | None, float | None]:
    """Like ``Shard.peek``, for a consumer under flow control: the best job that no blocked key holds back
    (its queue not in ``skip_queues``, its name not in ``skip_names``), walking past held-back jobs in
    claim order by their index entries alone (an entry carries its job's name), at most ``scan_limit``
    per queue: about 10 ms for 100,000. -> (that job or None, the earliest ETA). A job whose record does
    not decode is passed over, and quarantined once the read is done."""
    unreadable: list[Unreadable] = []

    def txn_fn(txn: Any) -> tuple[Candidate | None, float | None]:
        unreadable.clear()
        cursor = txn.cursor(db=shard.ready)
        prefixes = [queue_prefix(q) for q in queues] if queues is not None else queue_prefixes(cursor)
        best: Candidate | None = None
        best_tail = b""
        for prefix in prefixes:
            if prefix[:-1] in skip_queues or prefix[:1] == LIMITED:
                continue  # held back, or limited jobs (claimed in turn: turns.py)
            found = cursor.set_range(prefix)
            scanned = 0
            while found and scanned < scan_limit:
                key, value = cursor.item()
                if not key.startswith(prefix):
                    break
                tail = key[len(prefix) :]
                if best is not None and tail >= best_tail:
                    break  # nothing further in this queue can beat the best so far
                if value.decode() not in skip_names:
                    job_id = id_from_key(key[-8:])
                    try:
                        record = load_record(shard, txn, job_id)
                    except QueueCorrupted:
                        unreadable.append((job_id, shard.ready, bytes(key)))
                        record = None
                    if record is not None:
                        _q, priority, ready_us, _id = ready_key_parts(key)
                        best_tail = tail
                        order = (-priority, ready_us, job_id)
                        best = Candidate(order, job_id, shard.index, record[F_QUEUE], record[F_NAME])
                        break
                found = cursor.next()
                scanned += 1
        eta = None
        sched = txn.cursor(db=shard.sched)
        if sched.first():
            eta = time_key_parts(sched.key())[0] / 1_000_000
        return best, eta

    outcome = shard.env.read(txn_fn)
    if unreadable:
        quarantine_unreadable(shard, now, unreadable)
    return outcome


def job(shard: ShardDbs, job_id: int, *, now: float) -> Job | None:
    """A snapshot of the job, or None if there is none. Never raises on broken data: a job whose
    record does not decode is quarantined first (``quarantine_unreadable``), and this is the dead
    letter it became (or, if that write failed, what it would have become, ``damage`` saying why)."""

    def txn_fn(txn: Any) -> Job | str | None:
        try:
            record = load_record(shard, txn, job_id)
        except QueueCorrupted as exc:
            return str(exc)
        if record is None:
            return None
        return record_to_job(job_id, record, load_payload(shard, txn, job_id, record))

    snapshot = shard.env.read(txn_fn)
    if not isinstance(snapshot, str):
        return snapshot
    if quarantine_unreadable(shard, now, [(job_id, None, None)]):
        again = shard.env.read(txn_fn)
        if not isinstance(again, str):
            return again
    record = unreadable_record(job_id)  # the write failed: what the dead letter would hold
    record[F_STATE], record[F_FINISHED_AT] = FAILED, micros(now)
    record[F_ERROR], record[F_ERROR_TYPE] = f"corrupted: {snapshot}", CORRUPTED
    return replace(record_to_job(job_id, record, None), damage=snapshot)


def sort_key(shard: ShardDbs, state: State, job_id: int) -> bytes | None:
    """Where ``job_id`` sorts in the listing of ``state`` (see ``list_jobs``), from its record; the job
    need not be in that state any more. None if that cannot be known (the record is gone, or does not
    decode)."""
    if state in (State.RUNNING, State.FAILED):
        return id_key(job_id)

    def txn_fn(txn: Any) -> bytes | None:
        try:
            record = load_record(shard, txn, job_id)
        except QueueCorrupted:
            return None  # nowhere in any listing
        if record is None:
            return None
        if state is State.PENDING:
            return ready_key(b"", record[F_PRIORITY], record[F_READY_AT], job_id)[1:]
        if state is State.SCHEDULED:
            return time_key(record[F_READY_AT], job_id)
        finished = record[F_FINISHED_AT]
        return None if finished is None else time_key(finished, job_id)

    return shard.env.read(txn_fn)


def list_jobs(
    shard: ShardDbs,
    state: State,
    *,
    after_key: bytes | None,
    limit: int,
    newest_first: bool,
    queue: str | None,
    name: str | None,
    now: float,
) -> list[Listed]:
    """Up to ``limit`` jobs in ``state`` of this shard with their sort keys, strictly past ``after_key``,
    undecoded: the caller merges shards by sort key and decodes (``Listed.job()``) only what it keeps.

    Each state is listed in the order of its index: pending in claim order (priority, then ready
    time), scheduled by ETA, done by finish time; running and failed by job id. Sort keys compare
    across shards, so the caller merges shards by them. A job whose record does not decode is
    quarantined once the read is done (``quarantine_unreadable``) and the listing read again: it is
    then among the dead letters."""
    index = shard.indexes[state]
    code = STATE_CODE[state]
    unreadable: list[Unreadable] = []

    def txn_fn(txn: Any) -> list[Listed]:
        unreadable.clear()
        cursor = txn.cursor(db=index)
        out: list[Listed] = []

        def take(sort_key: bytes, job_id: int, index_key: bytes | None) -> None:
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted:
                unreadable.append((job_id, index, index_key))
                return
            if (
                record is not None
                and record[F_STATE] == code
                and (queue is None or record[F_QUEUE] == queue)
                and (name is None or record[F_NAME] == name)
            ):
                out.append(Listed(sort_key, job_id, record, load_payload(shard, txn, job_id, record)))

        if state is State.RUNNING:  # few by nature: sort them all by id
            keys = sorted(key[-8:] for key in cursor.iternext(values=False))
            if newest_first:
                keys.reverse()
            for key in keys:
                if len(out) >= limit:
                    break
                if after_key is None or (key < after_key if newest_first else key > after_key):
                    take(key, id_from_key(key), None)
            return out
        if state is State.PENDING:
            prefixes = queue_prefixes(cursor)
            if queue is not None:  # its own range, and its limited jobs' groups (turns.py)
                prefixes = [queue_prefix(queue.encode())] + [
                    prefix for prefix in prefixes if prefix.startswith(group_head(queue + GROUP_SEP))
                ]
        else:
            prefixes = [b""]
        merged: list[Listed] = []
        for prefix in prefixes:
            out = []
            found = _position(cursor, prefix, after_key, newest_first)
            step = cursor.prev if newest_first else cursor.next
            while found and len(out) < limit:
                key = cursor.key()
                if not key.startswith(prefix):
                    break
                take(key[len(prefix) :], id_from_key(key[-8:]), bytes(key))
                found = step()
            merged.extend(out)
        merged.sort(key=lambda item: item.sort_key, reverse=newest_first)
        return merged[:limit]

    listed = shard.env.read(txn_fn)
    if unreadable and quarantine_unreadable(shard, now, list(unreadable)):
        listed = shard.env.read(txn_fn)  # once: what it quarantined decodes now
    return listed


def counts(shard: ShardDbs) -> dict[str, int]:
    """State counts and total puts, O(1): LMDB keeps exact entry counts per database."""

    def txn_fn(txn: Any) -> dict[str, int]:
        out = {state.value: entry_count(txn, db) for state, db in shard.indexes.items()}
        raw = txn.get(COUNTERS_KEY, db=shard.jobs)
        out["total"] = COUNTERS.unpack_from(raw)[1] if raw is not None else 0
        out["cancelled"] = cancel_counts(shard, txn)[0]
        return out

    return shard.env.read(txn_fn)


def queue_counts(shard: ShardDbs, *, now: float) -> dict[str, dict[str, int]]:
    """queue -> {"pending", "scheduled", "running"} counts in this shard, in one read: pending and
    scheduled from the counters kept with the states (``QUEUE_COUNTS_KEY``), O(queues); running from
    the running jobs' records, O(running jobs), few by nature. When the counters are not known to be
    exact (a store older than them, a quarantined record), they are rebuilt first
    (``rebuild_queue_counts``). A running job whose record does not decode is not counted, and is
    quarantined once the read is done (``quarantine_unreadable``)."""
    unreadable: list[Unreadable] = []

    def txn_fn(txn: Any) -> dict[str, dict[str, int]] | None:
        unreadable.clear()
        if txn.get(QUEUE_COUNTS_KEY, db=shard.jobs) is None:  # the marker: the counts are exact
            return None
        out: dict[str, dict[str, int]] = {}
        for queue, (pending, scheduled, _total) in queue_count_rows(shard, txn):
            if pending or scheduled:  # a queue with none waiting keeps its key for its total of puts
                out[queue.decode()] = {"pending": pending, "scheduled": scheduled, "running": 0}
        for key in txn.cursor(db=shard.lease).iternext(keys=True, values=False):
            job_id = time_key_parts(key)[1]
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted:
                unreadable.append((job_id, shard.lease, bytes(key)))
                continue
            if record is not None:
                counts = out.get(record[F_QUEUE])
                if counts is None:
                    counts = out[record[F_QUEUE]] = {"pending": 0, "scheduled": 0, "running": 0}
                counts["running"] += 1
        return out

    counts = shard.env.read(txn_fn)
    if counts is None:
        rebuild_queue_counts(shard, now)
        counts = shard.env.read(txn_fn)
    if unreadable:
        quarantine_unreadable(shard, now, list(unreadable))
    return counts or {}


def queue_name(head: bytes) -> str:
    """The queue of a ready key's head: a queue's name, or a limited group's (turns.py)."""
    if head[:1] == LIMITED:
        return queue_of(head[1:].decode())
    return head.decode()


def oldest_ready(shard: ShardDbs) -> dict[str, int]:
    """queue -> the ready time (µs) of its longest-waiting pending job in this shard, in one read. The
    ready index sorts each queue by (priority, ready time), so each priority's first key is its oldest
    job: one seek per queue and priority in use, whatever the number of jobs."""

    def txn_fn(txn: Any) -> dict[str, int]:
        cursor = txn.cursor(db=shard.ready)
        out: dict[str, int] = {}
        for prefix in queue_prefixes(cursor):
            queue = prefix[:-1]
            found = cursor.set_range(prefix)
            while found:
                key = cursor.key()
                if not key.startswith(prefix):
                    break
                _q, priority, ready_us, _id = ready_key_parts(key)
                name = queue_name(queue)
                out[name] = min(out.get(name, ready_us), ready_us)
                # the next priority down (none below the lowest a key can hold: a damaged one)
                found = priority > PRIORITY_KEY_MIN and seek(cursor, ready_prefix(queue, priority - 1))
        return out

    return shard.env.read(txn_fn)


def rebuild_queue_counts(shard: ShardDbs, now: float) -> None:
    """Count each queue's pending and scheduled jobs from the indexes (ready keys hold their queue;
    scheduled jobs' records are read) and store the counts, marked exact, in one write transaction:
    O(those jobs), once. A scheduled record met that does not decode is quarantined in it."""
    now_us = micros(now)
    found: list[CorruptedJobQuarantined] = []
    tail = _READY_TAIL.size + 3  # NUL, 2-byte priority, (ready time, id)

    def txn_fn(txn: Any) -> None:
        found.clear()
        counts: dict[bytes, list[int]] = {}
        for key in txn.cursor(db=shard.ready).iternext(keys=True, values=False):
            counts.setdefault(queue_name(bytes(key[:-tail])).encode(), [0, 0])[0] += 1
        unreadable: list[tuple[int, bytes, str]] = []
        for key in txn.cursor(db=shard.sched).iternext(keys=True, values=False):
            job_id = time_key_parts(key)[1]
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted as exc:
                unreadable.append((job_id, bytes(key), str(exc)))
                continue
            if record is not None:
                counts.setdefault(record[F_QUEUE].encode(), [0, 0])[1] += 1
        for job_id, key, reason in unreadable:
            found.append(quarantine_met(shard, txn, job_id, shard.sched, key, now_us, reason))
        # the queues' totals of puts: the rebuild keeps them
        totals = {queue: values[2] for queue, values in queue_count_rows(shard, txn)}
        for queue in totals:
            txn.delete(QUEUE_COUNTS_KEY + queue, db=shard.jobs)
        for queue in counts.keys() | totals.keys():
            pending, scheduled = counts.get(queue, (0, 0))
            if pending or scheduled or totals.get(queue):
                value = QUEUE_COUNTS_TOTAL.pack(pending, scheduled, totals.get(queue, 0))
                txn.put(QUEUE_COUNTS_KEY + queue, value, db=shard.jobs)
        txn.put(QUEUE_COUNTS_KEY, QUEUE_COUNTS_EXACT, db=shard.jobs)

    shard.env.write(txn_fn)
    report(shard, found)


def verify(shard: ShardDbs) -> list[str]:
    """Every inconsistency between records, indexes and counters of this shard, and in its workflows
    (``workflow_checks``): empty if none."""
    tag = f"shard {shard.index}"

    def txn_fn(txn: Any) -> list[str]:
        problems: list[str] = []
        expected: dict[State, set[bytes]] = {state: set() for state in shard.indexes}
        external = set()
        max_sequence = 0
        jobs = 0
        by_queue: dict[bytes, list[int]] = {}  # what the queue counters should say
        stored_counts: dict[bytes, list[int]] = {}
        exact = undecodable = False
        for key, raw in txn.cursor(db=shard.jobs):
            if key[:8] == COUNTERS_KEY:  # the shard's counters, then the queue counters
                if key == QUEUE_COUNTS_KEY:
                    exact = True
                elif key.startswith(QUEUE_COUNTS_KEY):
                    stored_counts[bytes(key[len(QUEUE_COUNTS_KEY) :])] = list(queue_counts_of(raw)[:2])
                continue
            if len(key) != 8:
                problems.append(f"{tag}: a record under {bytes(key).hex()}, which is no job id")
                continue
            jobs += 1
            job_id = id_from_key(key)
            max_sequence = max(max_sequence, job_id >> 8)
            if job_id & 0xFF != shard.index:
                problems.append(f"{tag}: job {job_id} belongs to shard {job_id & 0xFF}")
            try:
                record = layout.unpack_record(raw, job_id)
                state = STATES[record[F_STATE]]
            except (QueueCorrupted, IndexError, TypeError) as exc:
                problems.append(f"{tag}: job {job_id}: undecodable record ({exc})")
                undecodable = True  # its queue and state cannot be told: the counts cannot be checked
                continue
            payload = record[F_PAYLOAD]
            if payload is None:
                external.add(key)
                payload = txn.get(key, db=shard.payloads)
                if payload is None:
                    problems.append(f"{tag}: job {job_id} ({state.value}) has no payload")
            for what, data in (("payload", payload), ("result", record[F_RESULT])):
                try:
                    if data is not None:
                        codec.unpack_stored(data, job_id, what)
                except QueueCorrupted as exc:
                    problems.append(f"{tag}: {exc} ({state.value})")
            if state is State.RUNNING and (record[F_TOKEN] is None or record[F_LEASE_UNTIL] is None):
                problems.append(f"{tag}: running job {job_id} has no claim token or lease")
            else:
                expected[state].add(index_key_of(shard, job_id, record)[1])  # type: ignore[arg-type]
            if record[F_RETRIES] < 0 or record[F_RETRIES] > record[F_MAX_RETRIES] + 1:
                problems.append(f"{tag}: job {job_id} has retries={record[F_RETRIES]} out of range")
            if state is State.FAILED and record[F_ERROR] is None:
                problems.append(f"{tag}: failed job {job_id} has no error")
            place = COUNTED.get(record[F_STATE])
            if place is not None:
                by_queue.setdefault(record[F_QUEUE].encode(), [0, 0])[place] += 1
        for key in txn.cursor(db=shard.payloads).iternext(values=False):
            if key not in external:
                problems.append(f"{tag}: a stored payload no job refers to ({_named(key)})")
        for name, db in (("jobs", shard.jobs), ("payloads", shard.payloads)):
            problems.extend(_out_of_order(tag, name, txn.cursor(db=db).iternext(values=False)))
        for state, db in shard.indexes.items():
            walked = list(txn.cursor(db=db).iternext(values=False))
            problems.extend(_out_of_order(tag, f"{state.value} index", walked))
            actual = set(walked)
            for extra in sorted(actual - expected[state]):
                problems.append(f"{tag}: the {state.value} index has a stray entry for {_named(extra)}")
            for missing in sorted(expected[state] - actual):
                job_id = id_from_key(missing[-8:])
                problems.append(f"{tag}: the {state.value} index lacks job {job_id}")
        raw = txn.get(COUNTERS_KEY, db=shard.jobs)
        sequence, total = COUNTERS.unpack_from(raw) if raw is not None else (0, 0)
        if max_sequence > sequence:
            problems.append(f"{tag}: a job id is past the stored sequence {sequence}")
        if jobs > total:
            problems.append(f"{tag}: {jobs} jobs stored but only {total} ever put")
        if exact and not undecodable:  # inexact counters are rebuilt before they are read
            for queue in sorted(by_queue.keys() | stored_counts.keys()):
                want, have = by_queue.get(queue, [0, 0]), stored_counts.get(queue, [0, 0])
                if want != have:
                    problems.append(
                        f"{tag}: the counts of queue {queue.decode(errors='replace')!r} say (pending, "
                        f"scheduled) = {tuple(have)}, its jobs are {tuple(want)}"
                    )
        problems.extend(verify_workflows(shard, txn, tag))
        return problems

    return shard.env.read(txn_fn)


def _named(key: bytes) -> str:
    """What an index entry's key names, for a problem: every index key ends with a job id."""
    return f"job {id_from_key(key[-8:])}" if len(key) >= 8 else f"no job (key {bytes(key).hex()})"


def _out_of_order(tag: str, what: str, keys: Iterable[bytes]) -> list[str]:
    """A problem if a walk of a database met its keys out of order: a damaged page (LMDB keeps no
    checksums), where a lookup misses the key a cursor meets (``access.seek``)."""
    previous = None
    for key in keys:
        if previous is not None and key <= previous:
            found = f"{bytes(key).hex()} after {bytes(previous).hex()}"
            return [f"{tag}: the {what} holds keys out of order, {found} (a damaged page)"]
        previous = key
    return []


def _position(cursor: Any, prefix: bytes, after_key: bytes | None, backwards: bool) -> bool:
    """Put the cursor on the first entry of ``prefix``'s range strictly past ``after_key`` (walking
    forwards), or strictly before it (backwards). -> whether there is such an entry (the caller still
    checks the prefix)."""
    if not backwards:
        if after_key is None:
            return bool(cursor.set_range(prefix))
        start = prefix + after_key
        found = cursor.set_range(start)
        if found and cursor.key() == start:
            found = cursor.next()
        return bool(found)
    if after_key is not None:
        bound: bytes | None = prefix + after_key
    elif prefix:
        bound = next_queue_prefix(prefix[:-1])
    else:
        bound = None
    if bound is not None and cursor.set_range(bound):
        return bool(cursor.prev())
    return bool(cursor.last())
