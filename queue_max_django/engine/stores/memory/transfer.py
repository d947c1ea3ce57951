"""``Store.transfer`` of an in-memory store (``stores/contract/transfer.py``): its jobs as ``MovedJob``
values and back, and the ids it took in a move (``Space.moved``)."""

from __future__ import annotations

from collections.abc import Sequence

from ...concurrency import group_of
from ...errors import InvalidJob
from ...job import SHARD_BITS, State
from ..contract.transfer import MovedJob, SealedFields, TransferConflict, UniqueEntry, pack_key, unpack_key
from .space import CLAIM_ALONE_NEXT, Row, Space


class MemoryTransfer:
    def __init__(self, space: Space) -> None:
        self._space = space

    def export(self, shard: int, after: int | None, limit: int) -> list[MovedJob]:
        space = self._space
        with space.lock:
            if shard != 0:
                return []
            ids = sorted(job_id for job_id, row in space.rows.items()
                         if row.state is not State.RUNNING and (after is None or job_id > after))  # fmt: skip
            return [_moved(space.rows[job_id], space.cancels.get(job_id)) for job_id in ids[:limit]]

    def unique_entries(self, shard: int) -> list[tuple[int, UniqueEntry]]:
        with self._space.lock:
            if shard != 0:
                return []
            return [(job_id, UniqueEntry(key, used_us, hold, until_us))
                    for key, (job_id, used_us, hold, until_us) in self._space.unique.items()]  # fmt: skip

    def insert(self, jobs: Sequence[MovedJob]) -> list[int]:
        space = self._space
        with space.lock:
            moved = space.moved
            fresh = [job for job in jobs if job.job_id not in moved]
            for job in fresh:
                if job.state is State.RUNNING:
                    raise InvalidJob(f"job {job.job_id}: a running job cannot be moved")
                if job.job_id in space.rows:
                    raise TransferConflict(f"job {job.job_id} is in the target store already, not by a move")
            for job in fresh:
                row = _row(job)
                space.add(row)
                space.enqueued[row.queue] += 1
                if job.cancel_us is not None:
                    space.cancels[row.job_id] = job.cancel_us
                if job.unique is not None and job.unique.key not in space.unique:
                    unique = job.unique
                    space.unique[unique.key] = (job.job_id, unique.used_us, unique.hold, unique.until_us)
                moved.add(row.job_id)
                space.sequence = max(space.sequence, row.job_id >> SHARD_BITS)
            if fresh:
                space.hint()
            return [job.job_id for job in fresh]

    def remove(self, shard: int, ids: Sequence[int]) -> int:
        space = self._space
        gone = 0
        with space.lock:
            for job_id in ids:
                row = space.rows.get(job_id)
                if row is not None and row.state is not State.RUNNING:
                    space.remove(row)
                    gone += 1
        return gone

    def forget_marks(self) -> int:
        with self._space.lock:
            count = len(self._space.moved)
            self._space.moved.clear()
            return count

    def marks(self) -> int:
        with self._space.lock:
            return len(self._space.moved)

    def rewrite(self, shard: int, changes: Sequence[tuple[int, SealedFields, SealedFields]]) -> list[int]:
        space = self._space
        done: list[int] = []
        with space.lock:
            if shard != 0:
                return done
            for job_id, old, new in changes:
                row = space.rows.get(job_id)
                if row is None or row.state is State.RUNNING or _sealed(row) != old:
                    continue
                row.payload, row.result = new.payload, new.result
                row.error, row.traceback = new.error, new.traceback
                row.errors, row.metadata = list(new.errors), new.metadata
                done.append(job_id)
        return done


def _sealed(row: Row) -> SealedFields:
    return SealedFields(row.payload, row.result, row.error, row.traceback, tuple(row.errors), row.metadata)


def _moved(row: Row, cancel_us: int | None) -> MovedJob:
    return MovedJob(
        row.job_id, row.state, row.queue, row.name, row.priority, row.retries, row.max_retries, row.attempts,
        row.enqueued_us, row.ready_us if row.state in (State.PENDING, State.SCHEDULED) else 0,
        row.started_us, row.finished_us, row.timeout, pack_key(row.partition_key), row.payload, row.result,
        row.error, row.error_type, row.traceback, tuple(row.worker_ids), tuple(row.errors), row.metadata,
        row.limits, row.claim == CLAIM_ALONE_NEXT, cancel_us,
    )  # fmt: skip


def _row(job: MovedJob) -> Row:
    waits = job.state in (State.PENDING, State.SCHEDULED)
    row = Row(
        job.job_id, job.state, job.queue, job.name, job.priority, job.ready_us if waits else 0,
        job.max_retries, job.enqueued_us, job.timeout, unpack_key(job.partition_key), job.payload,
        job.metadata,
        retries=job.retries, attempts=job.attempts, started_us=job.started_us, finished_us=job.finished_us,
        claim=CLAIM_ALONE_NEXT if job.alone_next else None, result=job.result, error=job.error,
        error_type=job.error_type, traceback=job.traceback, worker_ids=list(job.worker_ids),
        errors=list(job.errors),
    )  # fmt: skip
    if job.limits is not None:
        row.limits, row.group = job.limits, group_of(job.queue, job.limits)
    return row
