"""``Consumer``: a Queue's consumption of jobs, from the claim to the end of each job. It claims the next
job(s) under the flow controls (``flow.py``) or across the shards (``claiming.Claimer``), waits for the
store's hints while there is none, and is the ``RecordOwner`` of the records it hands out: each ack, nack
(with the retry decision, ``retry.decide``), release and touch is one store operation checked against the
record's token, followed by the breakers' bookkeeping and the events. It reads its Queue's settings, store,
flow and claimer at each call (``ConsumeOwner``), so that they stay the Queue's own (a forked child makes
new ones).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from . import codec
from .cancels import is_cancel
from .codec import Packed
from .errors import InvalidJob, QueueEmpty, UnknownQueue
from .events import JOB_CANCELLED, JOB_FAILED, JOB_RETRIED, JOB_STARTED, JOB_SUCCEEDED, Events
from .job import State
from .metadata import pack_metadata, unpack_metadata
from .pauses import Held, Pauses, claim_held, limited_filter
from .record import Record
from .retry import decide
from .stores.base import Store
from .stores.types import Claimed
from .validate import MAX_SECONDS, check_number, describe_error, validate_queue_name

if TYPE_CHECKING:
    from .claiming import Claimer
    from .flow import Flow

MAX_IDLE_WAIT = 1.0  # an idle get() re-checks the store at least this often, hint or not
_PLAIN_NUMBERS = (int, float)  # exactly these types (not bool): the checks that need no function call


class ConsumeOwner(Protocol):
    """What a ``Consumer`` reads of its Queue, at each call: the store behind the closed and fork checks,
    the clock, the per-process flow state and claimer, the events, and the settings of claims and retries."""

    events: Events
    queues: frozenset[str] | None
    lease_time: float
    worker_id: str | None
    sync: bool
    max_payload_bytes: int
    retry_backoff: float
    retry_backoff_max: float
    _rng: random.Random
    _clock: Callable[[], float]
    _store: Store
    _flow: Flow
    _pauses: Pauses
    _claimer: Claimer

    def _live(self) -> Store: ...


class Consumer:
    """Claims, waits and completions for one Queue (its ``ConsumeOwner``)."""

    def __init__(self, owner: ConsumeOwner) -> None:
        self._owner = owner

    # ------------------------------------------------------------------ claiming and waiting

    def queue_filter(self, queues: Iterable[str] | None) -> tuple[str, ...] | None:
        """A claim's queue filter: ``queues`` checked against the Queue's, sorted (None: every queue)."""
        served = self._owner.queues
        if queues is None:
            if served is None:
                return None
            return tuple(sorted(served))
        if isinstance(queues, str):
            queues = [queues]
        names = []
        for name in queues:
            validate_queue_name(name)
            if served is not None and name not in served:
                raise UnknownQueue(f"unknown queue {name!r}: this Queue serves {sorted(served)}")
            names.append(name)
        return tuple(sorted(set(names)))

    def try_claim(self, allowed: tuple[str, ...] | None, limit: int = 1) -> tuple[list[Record], float | None]:
        """Claim the highest-priority job(s) across shards (``Claimer.best``). -> (records, possibly none;
        the earliest future ETA, or when a token or breaker trial that holds jobs back is due). More than
        one (``limit``) only when no rate limit or breaker of these queues is set: those admit job by job.
        A job that a pause committed after this claim read the pauses holds back (put after that pause,
        perhaps) is given back at once, uncharged, never run (``Pauses.taken_while_paused``)."""
        records, next_eta = self._try_claim(allowed, limit)
        if records:
            stale = self._owner._pauses.taken_while_paused(
                [(record.queue, record.name) for record in records]
            )
            if stale:
                for index in stale:
                    records[index].release()
                records = [record for index, record in enumerate(records) if index not in stale]
                next_eta = 0.0 if not records else next_eta  # look again at once, past the new pause
        return records, next_eta

    def _try_claim(
        self, allowed: tuple[str, ...] | None, limit: int = 1
    ) -> tuple[list[Record], float | None]:
        owner = self._owner
        store = owner._live()
        paused = owner._pauses.held(allowed)  # one version read when nothing is paused (pauses.py)
        if paused is not None:
            if not paused.narrow:
                return self._claim_paused(store, allowed, paused)
            if not paused.allowed:
                return [], paused.wake_at
            allowed = paused.allowed
        flow = owner._flow
        state = flow.served(allowed)
        if state is not None:
            held = flow.fast_admission(state)
            if held is None:
                # Asked before the look, as Claimer.best asks: what get() then waits for is a hint after
                # this look (without it, a waiting thread had nothing to compare and did not wait at all).
                # The hints it consumes are the claimer's too: its view of the shards is dropped.
                limited = owner._claimer.limited_only(allowed, owner.lease_time, owner.worker_id)
                if limited:
                    return [Record(self, limited[0])], None
                store.hints.changed()
                owner._claimer.forget_mine()
                claimed, next_eta = flow.claim(store, allowed, state, owner.lease_time, owner.worker_id)
                return ([] if claimed is None else [Record(self, claimed)]), next_eta
            jobs: list[Claimed] = []
            try:
                jobs, next_eta = owner._claimer.best(allowed, 1, owner.lease_time, owner.worker_id)
            finally:
                flow.settle(held, (jobs[0].queue, jobs[0].name) if jobs else None)
            return [Record(self, job) for job in jobs], next_eta
        jobs, next_eta = owner._claimer.best(allowed, limit, owner.lease_time, owner.worker_id)
        return [Record(self, job) for job in jobs], next_eta

    def _claim_paused(
        self, store: Store, allowed: tuple[str, ...] | None, paused: Held
    ) -> tuple[list[Record], float | None]:
        """``try_claim`` past paused tasks, or paused queues of a claim of every queue: one job at a time,
        looked for past what the pauses (and the limits and breakers) hold back. A limited job
        (``concurrency.py``) of a queue that is not paused goes first, as under rate limits, past the paused
        tasks of its queue (``limited_filter``)."""
        owner = self._owner
        queues, skip = limited_filter(store, allowed, paused, owner._clock())
        if queues:
            limited = owner._claimer.limited_only(queues, owner.lease_time, owner.worker_id, skip)
            if limited:
                return [Record(self, limited[0])], None
        store.hints.changed()  # as the flow's claim asks it: what get() then waits for comes after the look
        owner._claimer.forget_mine()
        state = owner._flow.served(allowed)
        if state is not None:
            claimed, next_eta = owner._flow.claim(store, allowed, state, owner.lease_time, owner.worker_id,
                                                  paused)  # fmt: skip
        else:
            claimed, next_eta = claim_held(store, allowed, paused, owner._clock, owner.lease_time,
                                           owner.worker_id)  # fmt: skip
        if claimed is None:
            wake = paused.wake_at
            return [], wake if next_eta is None or (wake is not None and wake < next_eta) else next_eta
        return [Record(self, claimed)], None

    def get(self, limit: int, timeout: float | None, queues: Iterable[str] | None) -> list[Record]:
        """``Queue.get``/``get_many``: claim up to ``limit`` jobs, waiting up to ``timeout`` (None: for
        ever) for the store's hints or the next ETA; ``QueueEmpty`` when none came in time."""
        if timeout is not None and not (type(timeout) in _PLAIN_NUMBERS and 0 <= timeout <= MAX_SECONDS):
            check_number("timeout", timeout, minimum=0, error=InvalidJob)  # raises, or accepts an odd type
        owner = self._owner
        allowed = None if queues is None and owner.queues is None else self.queue_filter(queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        hints = owner._store.hints
        while True:
            records, next_eta = self.try_claim(allowed, limit)
            if records:
                hints.reset_poll()
                events = owner.events
                if events.listening(JOB_STARTED):
                    for record in records:
                        events.emit(JOB_STARTED, job_id=record.job_id, queue=record.queue, name=record.name,
                                    attempt=record.attempts)  # fmt: skip
                return records
            wait = MAX_IDLE_WAIT
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueEmpty(f"no job within {timeout} s")
                wait = min(wait, remaining)
            if next_eta is not None:
                wait = min(wait, max(next_eta - owner._clock(), 0.0005))
            hints.wait(wait)
            owner._claimer.forget_mine()  # whatever woke us, look at the store afresh

    # ------------------------------------------------------------------ completing (the records' owner)

    def ack_many(self, done: Sequence[tuple[Record, Any]]) -> dict[int, str]:
        """``Queue.ack_many``: one transaction per shard; the records that no longer hold their job are
        skipped. -> {job id: why} for the skipped ones."""
        items: list[tuple[int, bytes, bytes | None]] = []
        skipped: dict[int, str] = {}
        if len({record.job_id for record, _result in done}) != len(done):
            raise InvalidJob("ack_many() was given the same job twice: each job can be acked once")
        for record, result in done:
            if record.finished:
                skipped[record.job_id] = "this record was already acked, nacked or released"
                continue
            items.append((record.job_id, record._token, self._packed(result)))
        owner = self._owner
        if items:
            skipped.update(owner._live().complete_many(owner._clock(), items, owner.sync))
        flow = owner._flow.state()  # read once for the batch: breakers only matter when there are some
        breakers = flow is not None and bool(flow.breakers)
        for record, result in done:
            if record.job_id not in skipped and not record.finished:
                self._succeeded(record, result.value if type(result) is Packed else result, breakers)
        return skipped

    def _ack(self, record: Record, result: Any) -> None:
        owner = self._owner
        packed = None if result is None else self._packed(result)
        owner._live().complete(owner._clock(), record.job_id, record._token, packed, owner.sync)
        self._succeeded(record, result.value if type(result) is Packed else result, True)

    def _packed(self, result: Any) -> bytes | None:
        """What is stored of ``result``: a ``Packed`` one's bytes as they are (packed once), else packed."""
        if type(result) is Packed:
            return result.data
        return None if result is None else self._pack_result(result)

    def _succeeded(self, record: Record, result: Any, count_outcome: bool) -> None:
        record.finished = True
        owner = self._owner
        if count_outcome:
            owner._flow.record_outcome(record.queue, record.name, True)
        if owner.events.listening(JOB_SUCCEEDED):
            owner.events.emit(JOB_SUCCEEDED, job_id=record.job_id, queue=record.queue, name=record.name,
                              result=result)  # fmt: skip

    def _pack_result(self, result: Any) -> bytes:
        return codec.pack_value(result, what="result", limit=self._owner.max_payload_bytes)

    def _nack(
        self, record: Record, error: BaseException | str | None, delay: float | None, permanent: bool
    ) -> State:
        if delay is not None:
            check_number("delay", delay, minimum=0, error=InvalidJob)
        owner = self._owner
        store = owner._live()
        job_id = record.job_id
        described = describe_error(error)
        now = owner._clock()
        retry_at = decide(record.retries + 1, record._max_retries, now, delay=delay, permanent=permanent,
                          base=owner.retry_backoff, cap=owner.retry_backoff_max, rng=owner._rng)  # fmt: skip
        state = store.fail(now, job_id, record._token, described, retry_at, owner.sync)
        record.finished = True
        if is_cancel(error):  # asked for, not a failure: no circuit breaker counts it, no job_failed event
            if owner.events.listening(JOB_CANCELLED):
                owner.events.emit(JOB_CANCELLED, job_id=job_id, queue=record.queue, name=record.name,
                                  error=described[0], state=state)  # fmt: skip
            return state
        owner._flow.record_outcome(record.queue, record.name, False)
        self.emit_failure(job_id, record.queue, record.name, state, described[0])
        return state

    def _release(self, record: Record, delay: float | None = None) -> None:
        if delay is not None:
            check_number("delay", delay, minimum=0, error=InvalidJob)
        owner = self._owner
        now = owner._clock()
        retry_at = None if not delay else now + delay
        owner._live().release(now, record.job_id, record._token, retry_at)
        record.finished = True

    def _touch(self, record: Record) -> tuple[float, bool]:
        owner = self._owner
        return owner._live().heartbeat(owner._clock(), record.job_id, record._token, owner.lease_time)

    def _save_metadata(self, record: Record, metadata: dict[str, Any]) -> None:
        packed = pack_metadata(metadata)
        owner = self._owner
        owner._live().save_metadata(owner._clock(), record.job_id, record._token, packed)
        record.metadata = unpack_metadata(packed)

    def emit_failure(self, job_id: int, queue: str, name: str | None, state: State, error: str) -> None:
        """The event of a failed attempt: ``job_failed`` for a dead letter, ``job_retried`` otherwise."""
        event = JOB_FAILED if state is State.FAILED else JOB_RETRIED
        events = self._owner.events
        if events.listening(event):
            events.emit(event, job_id=job_id, queue=queue, name=name, error=error, state=state)
