"""``Record``: one claimed job, a small handle. Completion goes through the record only, never through a bare
job id: the record carries the claim token, and its owner (the ``Consumer`` of the ``Queue`` that claimed
it, consuming.py) has the store check that token inside each completing transaction. The record knows
nothing of shards, wake hints or events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .job import State
    from .stores.types import Claimed


class RecordOwner(Protocol):
    """What a ``Record`` asks of the queue that claimed it: one method per way a job can end or go on, each
    one store transaction checked against the record's token (``QueueCorrupted`` when it no longer holds the
    job), plus the result check. Each completing method sets ``record.finished``."""

    def _ack(self, record: Record, result: Any) -> None: ...

    def _nack(
        self, record: Record, error: BaseException | str | None, delay: float | None, permanent: bool
    ) -> State: ...

    def _release(self, record: Record, delay: float | None = None) -> None: ...

    def _touch(self, record: Record) -> tuple[float, bool]: ...

    def _save_metadata(self, record: Record, metadata: dict[str, Any]) -> None: ...

    def _pack_result(self, result: Any) -> bytes: ...


class Record:
    """One claimed job. Completion goes through the record only: ``ack``, ``nack``, ``release``."""

    __slots__ = (
        "_max_retries",
        "_owner",
        "_token",
        "attempts",
        "cancel_requested",
        "enqueued_at",
        "finished",
        "job_id",
        "lease_until",
        "metadata",
        "name",
        "payload",
        "priority",
        "queue",
        "retries",
        "timeout",
        "worker_ids",
    )

    def __init__(self, owner: RecordOwner, claimed: Claimed) -> None:
        self._owner = owner
        self._token: bytes = claimed.token
        self._max_retries: int = claimed.max_retries  # for the owner's retry decision
        self.job_id: int = claimed.job_id
        self.payload: Any = claimed.payload  # decoded inside the claim transaction
        self.retries: int = claimed.retries
        self.attempts: int = claimed.attempts
        self.enqueued_at: float = claimed.enqueued_at
        self.priority: int = claimed.priority
        self.queue: str = claimed.queue
        self.name: str | None = claimed.name
        self.timeout: float | None = claimed.timeout
        self.lease_until: float = claimed.lease_until
        self.worker_ids: tuple[str, ...] = claimed.worker_ids  # per attempt, the last ten
        self.metadata: dict[str, Any] = claimed.metadata  # as stored when claimed, then as last saved
        self.finished = False  # set once ack/nack/release succeeded through this object
        self.cancel_requested = False  # the job is marked "cancel requested" (as of the last touch)

    def __repr__(self) -> str:
        return f"<Record job_id={self.job_id} queue={self.queue!r} name={self.name!r} retries={self.retries}>"

    def ack(self, result: Any = None) -> None:
        """Done. ``result`` (msgpack data) is kept with the job until vacuum (``result_ttl``); a
        ``codec.Packed`` one (``pack_result``'s bytes with the value) is stored as it was packed."""
        self._owner._ack(self, result)

    def pack_result(self, result: Any) -> bytes | None:
        """``result`` as it will be stored; raises ``PayloadNotSerializable``/``PayloadTooLarge``."""
        return None if result is None else self._owner._pack_result(result)

    def nack(
        self, error: BaseException | str | None = None, *, delay: float | None = None, permanent: bool = False
    ) -> State:
        """A failed attempt. Retries later (after the backoff, or ``delay`` seconds), or fails for good when
        out of retries or ``permanent``. -> the job's new state."""
        return self._owner._nack(self, error, delay, permanent)

    def release(self, *, delay: float | None = None) -> None:
        """Give the job back unfinished (shutdown): pending again, not counted as an attempt. ``delay``:
        scheduled for that many seconds first (a job this process cannot run yet), still not counted."""
        self._owner._release(self, delay)

    def save_metadata(self, metadata: dict[str, Any]) -> None:
        """Store ``metadata`` (a small JSON dict, replacing the job's) now, while this record holds the job:
        ``InvalidMetadata`` before anything is written, ``QueueCorrupted`` (nothing written) once it no
        longer holds it. The job stays running; ``self.metadata`` becomes what was stored."""
        self._owner._save_metadata(self, metadata)

    def touch(self) -> float:
        """Extend the lease by ``lease_time`` from now. -> the new expiry (unix seconds). Sets
        ``cancel_requested`` when the job was marked "cancel requested" (``Queue.request_cancel``)."""
        self.lease_until, requested = self._owner._touch(self)
        self.cancel_requested = self.cancel_requested or requested
        return self.lease_until
