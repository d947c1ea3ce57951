"""An in-memory store's reads: a job, listings, counts, ages and totals, the throughput samples, and
``verify``. Plain functions of a ``Space``, each called with its lock held (one consistent snapshot)."""

from __future__ import annotations

from ... import codec
from ...concurrency import queue_of
from ...errors import InvalidJob, QueueCorrupted
from ...job import CORRUPTED, Job, State
from ...metadata import unpack_metadata
from ..types import Sample
from .space import Row, Space, is_cancel, ready_key


def as_job(row: Row) -> Job:
    """The ``Job`` snapshot of a row (``codec.job_from_stored``: bytes that do not decode are kept raw, and
    ``damage`` says why)."""
    return codec.job_from_stored(
        row.job_id, row.state, queue=row.queue, name=row.name, priority=row.priority, payload=row.payload,
        result=row.result, retries=row.retries, max_retries=row.max_retries, error=row.error,
        error_type=row.error_type, traceback=row.traceback, enqueued_us=row.enqueued_us,
        started_us=row.started_us, finished_us=row.finished_us, ready_us=row.ready_us, lease_us=row.lease_us,
        attempts=row.attempts, timeout=row.timeout, partition_key=row.partition_key,
        worker_ids=row.worker_ids, errors=tuple(row.errors), metadata=row.metadata,
    )  # fmt: skip


def sort_key(state: State, row: Row | None, job_id: int) -> tuple[int, ...] | None:
    """Where a job sorts in the listing of ``state``, from its row in whatever state it is now: pending in
    claim order, scheduled by ETA, done by finish time, running and failed by id. None when that cannot be
    known (the row is gone, or has no finish time)."""
    if state in (State.RUNNING, State.FAILED):
        return (job_id,)
    if row is None:
        return None
    if state is State.PENDING:
        return ready_key(row)
    if state is State.SCHEDULED:
        return (row.ready_us, job_id)
    return None if row.finished_us is None else (row.finished_us, job_id)


def list_jobs(
    space: Space, state: State, *, queue: str | None, name: str | None, after: int | None, limit: int,
    newest_first: bool,
) -> list[Job]:  # fmt: skip
    """Up to ``limit`` jobs in ``state`` in the order of its listing (reversed: ``newest_first``), from
    after job ``after`` (``InvalidJob`` when where it sorts cannot be known)."""
    start = None
    if after is not None:
        start = sort_key(state, space.rows.get(after), after)
        if start is None:
            raise InvalidJob(
                f"after={after}: that job no longer exists, so the listing cannot go on from it; list again "
                f"from the start"
            )
    found: list[tuple[tuple[int, ...], Row]] = []
    for row in space.rows.values():
        if row.state is not state or (queue is not None and row.queue != queue):
            continue
        if name is not None and row.name != name:
            continue
        key = sort_key(state, row, row.job_id)
        assert key is not None
        if start is not None and (key <= start if not newest_first else key >= start):
            continue
        found.append((key, row))
    found.sort(key=lambda item: item[0], reverse=newest_first)
    return [as_job(row) for _key, row in found[:limit]]


def counts(space: Space) -> dict[str, int]:
    out = {state.value: 0 for state in State}
    for (_queue, state), count in space.counts.items():
        out[state.value] += count
    out["total"] = sum(space.enqueued.values())
    out["cancelled"] = space.cancelled  # within failed
    return out


def queue_counts(space: Space) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (queue, state), count in space.counts.items():
        if state in (State.PENDING, State.SCHEDULED, State.RUNNING) and count:
            out.setdefault(queue, {"pending": 0, "scheduled": 0, "running": 0})[state.value] = count
    return dict(sorted(out.items()))


def oldest_pending(space: Space) -> dict[str, float]:
    """Per queue with pending jobs: the earliest ready time among them (unix seconds)."""
    oldest: dict[str, int] = {}
    waiting = [(queue_of(group), entries) for group, entries in space.turns.waiting.items()]
    for queue, entries in [*space.ready.items(), *waiting]:
        first = min(ready_us for _priority, ready_us, _id in entries)
        oldest[queue] = min(oldest.get(queue, first), first)
    return {queue: ready_us / 1_000_000 for queue, ready_us in sorted(oldest.items())}


def finished_totals(space: Space) -> tuple[int, int]:
    now = counts(space)
    return now["done"] + space.left[State.DONE], now["failed"] + space.left[State.FAILED]


def save_sample(space: Space, sample: Sample, keep: int) -> bool:
    if sample.minute in space.samples:
        return False
    space.samples[sample.minute] = sample
    for minute in [minute for minute in space.samples if minute < sample.minute - keep]:
        del space.samples[minute]
    return True


def samples(space: Space, since: int) -> list[Sample]:
    return [space.samples[minute] for minute in sorted(space.samples) if minute >= since]


def verify(space: Space) -> list[str]:
    """The indexes and counts against the rows, and every payload, result and metadata that does not
    decode (a dead letter quarantined for its bytes keeps them on purpose: not a problem)."""
    problems = []
    indexed: dict[State, list[int]] = {
        State.PENDING: [
            job_id
            for entries in [*space.ready.values(), *space.turns.waiting.values()]
            for *_, job_id in entries
        ],
        State.SCHEDULED: [job_id for _at, job_id in space.scheduled],
        State.RUNNING: [job_id for _at, job_id in space.leases],
        State.DONE: [job_id for _at, job_id in space.done],
    }
    for state, ids in indexed.items():
        rows = {row.job_id for row in space.rows.values() if row.state is state}
        if sorted(ids) != sorted(rows):
            problems.append(
                f"the {state.value} index holds {sorted(ids)}, the {state.value} jobs are {sorted(rows)}"
            )
    actual: dict[tuple[str, State], int] = {}
    for row in space.rows.values():
        actual[row.queue, row.state] = actual.get((row.queue, row.state), 0) + 1
    if actual != dict(space.counts):
        problems.append(f"the counts {dict(space.counts)} are not the jobs' {actual}")
    cancelled = sum(map(is_cancel, space.rows.values()))
    if cancelled != space.cancelled:
        problems.append(f"{space.cancelled} dead letters are counted as cancels, {cancelled} are")
    for row in space.rows.values():
        if row.error_type == CORRUPTED and row.state is State.FAILED:
            continue
        problems.extend(_undecodable(row))
    return problems


def _undecodable(row: Row) -> list[str]:
    problems = []
    for what, raw in (("payload", row.payload), ("result", row.result)):
        if raw is not None:
            try:
                codec.unpack_stored(raw, row.job_id, what)
            except QueueCorrupted as exc:
                problems.append(str(exc))
    try:
        unpack_metadata(row.metadata)
    except ValueError as exc:
        problems.append(f"job {row.job_id}: the stored metadata does not decode ({exc})")
    return problems
