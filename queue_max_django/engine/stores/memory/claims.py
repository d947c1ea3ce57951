"""An in-memory store's claims, and what its holder does with a claimed job: renew its lease, complete
it, fail it, release it, save its metadata. Plain functions of a ``Space``, each called with its lock held
(``MemoryStore`` takes it): one call, one atomic step.

A claim decodes each job's payload (and metadata) as it takes it. A job whose bytes do not decode is
quarantined (``upkeep.quarantine``): the jobs claimed before it stay claimed, and if it came first the
claim raises ``CorruptedJobQuarantined`` for the caller to claim again. A claim of two or more jobs marks
them ``CLAIM_BATCH``: if their lease expires, recovery sends them back uncharged and marks them
``CLAIM_ALONE_NEXT``, and a claim takes such a job alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import codec
from ...concurrency import full_key
from ...errors import QueueCorrupted
from ...job import State
from ...metadata import keeping_cancel_note, unpack_metadata
from ..types import Claimed, ClaimOutcome, CorruptedJobQuarantined
from .space import CLAIM_ALONE_NEXT, CLAIM_BATCH, Row, Space, micros
from .upkeep import promote, quarantine

PROMOTE_BATCH = 1000  # due jobs a claim promotes first, at most (the rest: the next claim)


def decoded(row: Row) -> tuple[Any, dict[str, Any]]:
    """The row's payload and metadata as a claim hands them over; ``QueueCorrupted`` when either does not
    decode (the job cannot be run as it was put)."""
    value = codec.unpack_stored(row.payload, row.job_id, "payload")
    try:
        return value, unpack_metadata(row.metadata)
    except ValueError as exc:
        raise QueueCorrupted(f"job {row.job_id}: the stored metadata does not decode ({exc})") from None


def as_claimed(row: Row, value: Any, metadata: dict[str, Any], alone: bool) -> Claimed:
    """The ``Claimed`` of a row a claim just made running."""
    job = Claimed(
        row.job_id, row.token or b"", value, row.retries, row.max_retries, row.attempts,
        row.enqueued_us / 1_000_000, row.priority, row.queue, row.name, row.timeout,
        (row.lease_us or 0) / 1_000_000, tuple(row.worker_ids), alone,
    )  # fmt: skip
    job.metadata = metadata
    return job


def run(space: Space, row: Row, now_us: int, lease_us: int, token: bytes, worker: str | None) -> None:
    """pending (or scheduled) -> running under ``token`` until ``lease_us``: one more attempt."""
    space.unindex(row)
    row.state = State.RUNNING
    row.started_us, row.lease_us, row.token = now_us, lease_us, token
    row.attempts += 1
    row.claim = None
    if worker is not None:
        row.remember_worker(worker)
    space.index(row)


def claim(
    space: Space,
    now: float,
    queues: tuple[str, ...] | None,
    lease_time: float,
    token: bytes,
    min_priority: int | None,
    worker: str | None,
    limit: int,
) -> ClaimOutcome:
    """Up to ``limit`` next jobs in claim order (due scheduled jobs promoted first), none below
    ``min_priority``. -> the jobs, the priority of the next claimable job after them, the earliest ETA."""
    now_us, lease_us = micros(now), micros(now + lease_time)
    promote(space, now_us, PROMOTE_BATCH)
    taken: list[Claimed] = []
    first: list[Row] = []
    while len(taken) < limit:
        key = space.best_ready(queues)
        if key is None:
            break
        if min_priority is not None and -key[0] < min_priority:
            break  # outranked: another shard may hold better (the head priority says so)
        row = space.rows[key[2]]
        alone = row.claim == CLAIM_ALONE_NEXT
        if alone and taken:
            break  # claimed alone, by the next claim
        try:
            value, metadata = decoded(row)  # before anything changes
        except QueueCorrupted as exc:
            quarantine(space, row, now_us, str(exc))
            if not taken:
                raise CorruptedJobQuarantined(row.job_id, str(exc)) from None
            break
        run(space, row, now_us, lease_us, token, worker)
        if taken:
            row.claim = CLAIM_BATCH
            first[0].claim = CLAIM_BATCH
        else:
            first.append(row)
        taken.append(as_claimed(row, value, metadata, alone))
        if alone:
            break
    head = space.best_ready(queues)
    limited = bool(space.turns.turn)  # limited jobs wait (turns.py)
    return ClaimOutcome(taken, None if head is None else -head[0], space.next_eta(), False, limited)


def claim_job(
    space: Space, now: float, job_id: int, lease_time: float, token: bytes, worker: str | None,
    scheduled_too: bool,
) -> Claimed | None:  # fmt: skip
    """Exactly this job, if it is pending (or scheduled, with ``scheduled_too``: it starts before its
    ETA). None otherwise, or when its payload does not decode (then it is quarantined)."""
    row = space.rows.get(job_id)
    if row is None or not (row.state is State.PENDING or (scheduled_too and row.state is State.SCHEDULED)):
        return None
    if row.limits is not None and full_key(row.limits, space.turns.running) is not None:
        return None  # its limit is full: a limit holds against every claim
    now_us = micros(now)
    try:
        value, metadata = decoded(row)
    except QueueCorrupted as exc:
        quarantine(space, row, now_us, str(exc))
        return None
    run(space, row, now_us, micros(now + lease_time), token, worker)
    return as_claimed(row, value, metadata, False)


def held(space: Space, job_id: int, token: bytes) -> Row:
    """The running row ``token`` holds, or ``QueueCorrupted`` saying why not (nothing changes)."""
    row = space.rows.get(job_id)
    if row is None:
        raise QueueCorrupted(f"job {job_id} no longer exists (vacuumed, purged or cancelled)")
    if row.state is not State.RUNNING:
        raise QueueCorrupted(
            f"job {job_id} is {row.state.value}, not running: it was already completed or released, "
            f"or its lease expired and recovery moved it"
        )
    if row.token != token:
        raise QueueCorrupted(
            f"job {job_id} is held by another claim: this record's lease expired and the job was claimed "
            f"again"
        )
    return row


def heartbeat(space: Space, now: float, job_id: int, token: bytes, lease_time: float) -> tuple[float, bool]:
    row = held(space, job_id, token)
    space.unindex(row)
    row.lease_us = micros(now + lease_time)
    space.index(row)
    return row.lease_us / 1_000_000, job_id in space.cancels


def complete_many(
    space: Space, now: float, items: Sequence[tuple[int, bytes, bytes | None]]
) -> dict[int, str]:
    """Each (job id, token, result) done; a job its token no longer holds is skipped. -> {id: why}."""
    skipped: dict[int, str] = {}
    for job_id, token, result in items:
        try:
            row = held(space, job_id, token)
        except QueueCorrupted as exc:
            skipped[job_id] = str(exc)
            continue
        space.unindex(row)
        row.state, row.finished_us, row.result = State.DONE, micros(now), result
        row.token = row.lease_us = None
        space.index(row)
    return skipped


def fail(
    space: Space, now: float, job_id: int, token: bytes, error: tuple[str | None, str | None, str | None],
    retry_at: float | None,
) -> State:  # fmt: skip
    """A failed attempt, counted: pending again at ``retry_at`` (scheduled until then if it is later than
    ``now``), or a dead letter (None)."""
    row = held(space, job_id, token)
    now_us = micros(now)
    space.unindex(row)
    row.retries += 1
    row.remember_error(*error)
    row.token = row.lease_us = None
    if retry_at is None:
        row.state, row.finished_us = State.FAILED, now_us
    elif retry_at > now:
        row.state, row.ready_us = State.SCHEDULED, micros(retry_at)
    else:
        row.state, row.ready_us = State.PENDING, now_us
    space.index(row)
    if row.state is not State.FAILED:
        space.hint()
    return row.state


def release(space: Space, now: float, job_id: int, token: bytes, retry_at: float | None) -> None:
    """Back to pending at its old place, the attempt not counted; scheduled until ``retry_at`` if that is
    later than ``now``."""
    row = held(space, job_id, token)
    space.unindex(row)
    row.token = row.lease_us = row.started_us = None
    row.attempts = max(row.attempts - 1, 0)
    if retry_at is not None and retry_at > now:
        row.state, row.ready_us = State.SCHEDULED, micros(retry_at)
    else:
        row.state = State.PENDING
    space.index(row)
    space.hint()


def save_metadata(space: Space, job_id: int, token: bytes, metadata: bytes | None) -> None:
    """The holder's metadata replaces the job's, keeping the cancel note ``cancel`` wrote there, if any."""
    row = held(space, job_id, token)
    row.metadata = keeping_cancel_note(row.metadata, metadata)
