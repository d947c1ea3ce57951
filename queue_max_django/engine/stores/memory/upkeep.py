"""An in-memory store's upkeep and management writes: promote due jobs, recover expired leases, vacuum old
results and unique keys, purge a state, requeue a dead letter, delete or cancel a job, and quarantine a job
whose bytes do not decode. Plain functions of a ``Space``, each called with its lock held."""

from __future__ import annotations

from ...cancels import CancelOutcome
from ...job import CORRUPTED, State
from ...metadata import with_cancel_note
from ...retry import decide
from ..types import UNIQUE_KEY_MIN_TTL, Recovered
from . import uniqueness
from .space import CLAIM_ALONE_NEXT, CLAIM_BATCH, Row, Space, micros

LEASE_EXPIRED = "LeaseExpired"
_LEASE_ERROR = "lease expired: the worker holding the job died or stalled"


def promote(space: Space, now_us: int, most: int | None = None) -> int:
    """Scheduled jobs whose ETA is at or before ``now_us`` become pending, FIFO by the time they became due
    (their ready time is their ETA). -> how many."""
    moved = 0
    while space.scheduled and space.scheduled[0][0] <= now_us and (most is None or moved < most):
        row = space.rows[space.scheduled[0][1]]
        space.unindex(row)
        row.state = State.PENDING
        space.index(row)
        moved += 1
    if moved:
        space.hint()
    return moved


def quarantine(space: Space, row: Row, now_us: int, reason: str) -> None:
    """A live job whose bytes do not decode becomes a dead letter that says why (error type ``Corrupted``),
    whatever its state: nothing is left to run. Its bytes are kept as they are (reads name the damage)."""
    space.unindex(row)
    row.state, row.finished_us = State.FAILED, now_us
    row.token = row.lease_us = None
    row.remember_error(f"corrupted: {reason}", CORRUPTED, None)
    space.index(row)


def recover_expired(space: Space, now: float) -> list[Recovered]:
    """Running jobs whose lease expired at or before ``now`` count a failed attempt and go back to pending
    at once, or to the dead letters once out of retries; a job claimed in a batch goes back uncharged, at
    its place. Every one is claimed alone next time."""
    now_us = micros(now)
    recovered: list[Recovered] = []
    while space.leases and space.leases[0][0] <= now_us:
        row = space.rows[space.leases[0][1]]
        held = (row.retries + 1, row.max_retries + 1, row.worker_ids[-1] if row.worker_ids else None)
        batched = row.claim == CLAIM_BATCH
        space.unindex(row)
        row.token = row.lease_us = None
        row.claim = CLAIM_ALONE_NEXT
        if batched:
            row.state, row.started_us = State.PENDING, None
            recovered.append(Recovered(row.job_id, row.queue, row.name, State.PENDING, False, *held))
        else:
            row.retries += 1
            row.remember_error(_LEASE_ERROR, LEASE_EXPIRED, None)
            if decide(row.retries, row.max_retries, now) is None:
                row.state, row.finished_us = State.FAILED, now_us
            else:
                row.state, row.ready_us = State.PENDING, now_us
            recovered.append(Recovered(row.job_id, row.queue, row.name, row.state, True, *held))
        space.index(row)
    if recovered:
        space.hint()
    return recovered


def vacuum(space: Space, now: float, cutoff: float, unique_ttl: float) -> int:
    """Delete done jobs finished at or before ``cutoff`` (their cancel marks with them); forget unique keys
    used at or before ``now - max(unique_ttl, UNIQUE_KEY_MIN_TTL)``. -> how many jobs."""
    uniqueness.forget(space, now, micros(now - max(unique_ttl, UNIQUE_KEY_MIN_TTL)))
    cutoff_us = micros(cutoff)
    removed = 0
    while space.done and space.done[0][0] <= cutoff_us:
        space.remove(space.rows[space.done[0][1]])
        removed += 1
    return removed


def purge(space: Space, state: State, cutoff: float | None) -> int:
    """Delete the jobs in ``state`` (only those at or before ``cutoff`` if given: by finish time for done
    and failed, by enqueue time otherwise). -> how many."""
    cutoff_us = None if cutoff is None else micros(cutoff)
    finished = state in (State.DONE, State.FAILED)
    doomed = [
        row
        for row in space.rows.values()
        if row.state is state
        and (cutoff_us is None or ((row.finished_us if finished else None) or row.enqueued_us) <= cutoff_us)
    ]
    for row in doomed:
        space.remove(row)
    return len(doomed)


def requeue(space: Space, now: float, job_id: int, *, node: bool = True) -> bool:
    """A dead letter back to pending, retries reset, at the back of its queue, its cancel mark dropped.
    False if it is not a dead letter (or gone), or is one quarantined as corrupted. A workflow's node
    (unless ``node`` is false: the workflow's own retry) is queued again with it, and the nodes cancelled
    because of it wait on it again (``workflows.requeued``)."""
    row = space.rows.get(job_id)
    if row is None or row.state is not State.FAILED or row.error_type == CORRUPTED:
        return False
    space.unindex(row)
    row.state, row.retries, row.ready_us = State.PENDING, 0, micros(now)
    row.started_us = row.finished_us = None
    row.error = row.error_type = row.traceback = None
    space.index(row)
    space.cancels.pop(job_id, None)
    if node and row.metadata is not None and space.node_requeued is not None:
        space.node_requeued(space, row)
    space.hint()
    return True


def delete(space: Space, job_id: int, states: tuple[State, ...] | None) -> bool:
    """Delete the job if it is in one of ``states`` (None: any but running). False otherwise (or gone)."""
    allowed = states or (State.PENDING, State.SCHEDULED, State.DONE, State.FAILED)
    assert State.RUNNING not in allowed
    row = space.rows.get(job_id)
    if row is None or row.state not in allowed:
        return False
    space.remove(row)
    return True


def cancel(space: Space, now: float, job_id: int, by: str | None) -> CancelOutcome:
    """Remove the job if it is pending or scheduled; mark it if it is running, and note ``by`` and when in
    its metadata (``job.CANCEL_KEY``); else change nothing."""
    row = space.rows.get(job_id)
    if row is None:
        return CancelOutcome.MISSING
    if row.state in (State.PENDING, State.SCHEDULED):
        space.remove(row)
        return CancelOutcome.REMOVED
    if row.state is State.RUNNING:
        now_us = micros(now)
        space.cancels[job_id] = now_us
        row.metadata = with_cancel_note(row.metadata, {"by": by, "at": now_us / 1_000_000})
        return CancelOutcome.REQUESTED
    return CancelOutcome.FINISHED
