"""``Record``: one claimed job. Completion goes through the record only, never through a bare job id: the
record carries the claim token that the store checks inside each completing transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import codec
from .errors import InvalidJob
from .events import JOB_SUCCEEDED
from .job import State
from .keys import shard_of
from .shard import Claimed
from .validate import check_number, describe_error

if TYPE_CHECKING:
    from .queue import Queue


class Record:
    """One claimed job. Completion goes through the record only: ``ack``, ``nack``, ``release``."""

    __slots__ = (
        "_queue",
        "_token",
        "attempts",
        "enqueued_at",
        "finished",
        "job_id",
        "lease_until",
        "name",
        "payload",
        "priority",
        "queue",
        "retries",
        "timeout",
        "worker_ids",
    )

    def __init__(self, owner: Queue, claimed: Claimed) -> None:
        record = claimed.record
        self._queue = owner
        self._token: bytes = record[codec.F_TOKEN]
        self.job_id: int = claimed.job_id
        self.payload: Any = claimed.payload  # decoded inside the claim transaction
        self.retries: int = record[codec.F_RETRIES]
        self.attempts: int = record[codec.F_ATTEMPTS]
        self.enqueued_at: float = record[codec.F_ENQUEUED_AT] / 1_000_000
        self.priority: int = record[codec.F_PRIORITY]
        self.queue: str = record[codec.F_QUEUE]
        self.name: str | None = record[codec.F_NAME]
        self.timeout: float | None = record[codec.F_TIMEOUT]
        self.lease_until: float = record[codec.F_LEASE_UNTIL] / 1_000_000
        self.worker_ids: tuple[str, ...] = tuple(record[codec.F_WORKERS] or ())  # per attempt, last 10
        self.finished = False  # set once ack/nack/release succeeded through this object

    def __repr__(self) -> str:
        return f"<Record job_id={self.job_id} queue={self.queue!r} name={self.name!r} retries={self.retries}>"

    def ack(self, result: Any = None) -> None:
        """Done. ``result`` (msgpack data) is kept with the job until vacuum (``result_ttl``)."""
        q = self._queue
        shard = q._shard(self.job_id)
        shard.complete(q._clock(), self.job_id, self._token, self.pack_result(result), q.sync)
        self._succeeded(result)

    def pack_result(self, result: Any) -> bytes | None:
        """``result`` as it will be stored; raises ``PayloadNotSerializable``/``PayloadTooLarge``."""
        if result is None:
            return None
        return codec.pack_value(result, what="result", limit=self._queue.max_payload_bytes)

    def _succeeded(self, result: Any, *, count_outcome: bool = True) -> None:
        q = self._queue
        self.finished = True
        if count_outcome:
            q._record_outcome(self.queue, self.name, True)
        if q.events.listening(JOB_SUCCEEDED):
            q.events.emit(JOB_SUCCEEDED, job_id=self.job_id, queue=self.queue, name=self.name, result=result)

    def nack(
        self, error: BaseException | str | None = None, *, delay: float | None = None, permanent: bool = False
    ) -> State:
        """A failed attempt. Retries later (after the backoff, or ``delay`` seconds), or fails for good when
        out of retries or ``permanent``. -> the job's new state."""
        if delay is not None:
            check_number("delay", delay, minimum=0, error=InvalidJob)
        q = self._queue
        shard = q._shard(self.job_id)
        described = describe_error(error)
        state = shard.fail(
            q._clock(),
            self.job_id,
            self._token,
            described,
            delay=delay,
            permanent=permanent,
            backoff=q._backoff,
            durable=q.sync,
        )
        self.finished = True
        q._waker.notify(shard_of(self.job_id))
        q._record_outcome(self.queue, self.name, False)
        q._emit_failure(self.job_id, self.queue, self.name, state, described[0])
        return state

    def release(self) -> None:
        """Give the job back unfinished (shutdown): pending again, not counted as an attempt."""
        q = self._queue
        q._shard(self.job_id).release(q._clock(), self.job_id, self._token)
        self.finished = True
        q._waker.notify(shard_of(self.job_id))

    def touch(self) -> float:
        """Extend the lease by ``lease_time`` from now. -> the new expiry (unix seconds)."""
        q = self._queue
        self.lease_until = q._shard(self.job_id).touch(q._clock(), self.job_id, self._token, q.lease_time)
        return self.lease_until
