"""``AsyncQueue``: the same operations as coroutines. Nothing here blocks the event loop.

Store calls run in worker threads (``asyncio.to_thread``); an idle ``get()``/``get_many()`` waits for the
store's wake hint on the event loop itself (``loop.add_reader`` on the descriptor the store's hints hand out:
inotify for LMDB, the LISTEN thread's pipe for PostgreSQL) instead of parking a thread, and ``acquire()``
waits for a token with ``asyncio.sleep``. A store without such a descriptor (PostgreSQL in poll-only mode)
is polled with a backoff from 5 ms to ``MAX_IDLE_WAIT``.

What is left on ``q.queue`` only is the worker's own machinery (``end_thread``, ``reader_check``,
``put_many_to_shard``): none of it is for application code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from .cancels import CancelOutcome
from .errors import InvalidJob, QueueEmpty
from .flow import check_wait
from .job import Job, State
from .pausestate import Pause
from .queue import MAX_IDLE_WAIT, Queue
from .ratelimit import Rate
from .record import Record
from .schedulestate import Edit, StoredSchedule
from .stores.types import LockHolder, WorkerInfo
from .validate import check_number

POLL_START = 0.005  # seconds: the first wait of a store polled without a wake descriptor, doubled after


class AsyncRecord:
    """A claimed job; ``await record.ack()`` / ``nack()`` / ``release()`` / ``touch()``."""

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._record, name)

    def __repr__(self) -> str:
        return f"<AsyncRecord {self._record!r}>"

    async def ack(self, result: Any = None) -> None:
        await asyncio.to_thread(self._record.ack, result)

    async def nack(
        self, error: BaseException | str | None = None, *, delay: float | None = None, permanent: bool = False
    ) -> State:
        return await asyncio.to_thread(self._record.nack, error, delay=delay, permanent=permanent)

    async def release(self, *, delay: float | None = None) -> None:
        await asyncio.to_thread(self._record.release, delay=delay)

    async def touch(self) -> float:
        return await asyncio.to_thread(self._record.touch)

    async def save_metadata(self, metadata: dict[str, Any]) -> None:
        await asyncio.to_thread(self._record.save_metadata, metadata)


class AsyncQueue:
    """``AsyncQueue(path, **same options as Queue)``; use ``async with`` or ``await q.close()``."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        self.queue = Queue(path, **options)
        self._watch_fd: int | None = None

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._watch_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._watch_fd)
            self._watch_fd = None
        await asyncio.to_thread(self.queue.close)

    async def put(self, payload: Any, **options: Any) -> int:
        return await asyncio.to_thread(lambda: self.queue.put(payload, **options))

    async def put_many(self, payloads: Iterable[Any], **options: Any) -> list[int]:
        items = list(payloads)
        return await asyncio.to_thread(lambda: self.queue.put_many(items, **options))

    async def put_parts(self, payloads: Iterable[Any], **options: Any) -> list[int]:
        items = list(payloads)
        return await asyncio.to_thread(lambda: self.queue.put_parts(items, **options))

    async def get(self, timeout: float | None = None, *, queues: Iterable[str] | None = None) -> AsyncRecord:
        names = None if queues is None else list(queues)
        records = await self._claim(lambda: [self.queue.get(0, queues=names)], timeout)
        return records[0]

    async def get_many(
        self, limit: int, timeout: float | None = None, *, queues: Iterable[str] | None = None
    ) -> list[AsyncRecord]:
        names = None if queues is None else list(queues)
        return await self._claim(lambda: self.queue.get_many(limit, 0, queues=names), timeout)

    async def _claim(self, claim: Any, timeout: float | None) -> list[AsyncRecord]:
        """``claim()`` (a get that does not wait) in a thread until it takes something; between tries, wait
        on the loop for a hint, at most until ``timeout``. ``QueueEmpty`` when the time is up."""
        if timeout is not None:
            check_number("timeout", timeout, minimum=0)
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = POLL_START
        while True:
            try:
                records: list[Record] = await asyncio.to_thread(claim)
                return [AsyncRecord(record) for record in records]
            except QueueEmpty:
                pass
            wait = MAX_IDLE_WAIT
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueEmpty(f"no job within {timeout} s") from None
                wait = min(wait, remaining)
            if await self._wait_hint(wait, poll):
                poll = min(poll * 2, MAX_IDLE_WAIT)

    async def ack_many(self, done: Sequence[tuple[AsyncRecord | Record, Any]]) -> dict[int, str]:
        pairs = [(_unwrapped(record), result) for record, result in done]
        return await asyncio.to_thread(self.queue.ack_many, pairs)

    async def claim(self, job_id: int) -> AsyncRecord | None:
        record = await asyncio.to_thread(self.queue.claim, job_id)
        return None if record is None else AsyncRecord(record)

    async def _wait_hint(self, timeout: float, poll: float) -> bool:
        """Wait on the loop for the store's hint, at most ``timeout``; a store without a descriptor to wait
        on is polled: sleep ``poll`` (at most ``timeout``). -> whether it polled."""
        fd = self._hint_fd()
        if fd is None:
            await asyncio.sleep(min(timeout, poll))
            return True
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def on_readable() -> None:
            with contextlib.suppress(OSError):
                while os.read(fd, 4096):
                    pass
            if not woken.done():
                woken.set_result(None)

        loop.add_reader(fd, on_readable)
        try:
            await asyncio.wait_for(woken, timeout)
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(fd)
        return False

    def _hint_fd(self) -> int | None:
        if self._watch_fd is None:
            self._watch_fd = self.queue._hint_watch()
        return self._watch_fd

    @contextlib.asynccontextmanager
    async def processing(
        self, timeout: float | None = 5.0, *, queues: Iterable[str] | None = None
    ) -> AsyncIterator[AsyncRecord]:
        record = await self.get(timeout, queues=queues)
        try:
            yield record
        except Exception as exc:
            if not record.finished:
                await record.nack(exc)
            raise
        except BaseException:
            if not record.finished:
                await record.release()
            raise
        else:
            if not record.finished:
                await record.ack()

    async def stats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.queue.stats)

    async def job(self, job_id: int) -> Job | None:
        return await asyncio.to_thread(self.queue.job, job_id)

    async def jobs(self, state: State | str, **options: Any) -> list[Job]:
        return await asyncio.to_thread(lambda: self.queue.jobs(state, **options))

    async def dead_letters(self, **options: Any) -> list[Job]:
        return await asyncio.to_thread(lambda: self.queue.dead_letters(**options))

    async def requeue(self, job_id: int) -> bool:
        return await asyncio.to_thread(self.queue.requeue, job_id)

    async def cancel(self, job_id: int) -> bool:
        return await asyncio.to_thread(self.queue.cancel, job_id)

    async def request_cancel(self, job_id: int, *, by: str | None = None) -> CancelOutcome:
        return await asyncio.to_thread(self.queue.request_cancel, job_id, by=by)

    async def purge(self, state: State | str, *, older_than: float | None = None) -> int:
        return await asyncio.to_thread(lambda: self.queue.purge(state, older_than=older_than))

    async def recover(self) -> int:
        return await asyncio.to_thread(self.queue.recover)

    async def vacuum(self, older_than: float | None = None) -> int:
        return await asyncio.to_thread(self.queue.vacuum, older_than)

    async def verify(self) -> list[str]:
        return await asyncio.to_thread(self.queue.verify)

    async def wait_until_empty(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if await asyncio.to_thread(self.queue.wait_until_empty, 0):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------------ jobs

    async def delete(self, job_id: int, *, state: State | str | None = None) -> bool:
        return await asyncio.to_thread(lambda: self.queue.delete(job_id, state=state))

    async def promote(self) -> int:
        return await asyncio.to_thread(self.queue.promote)

    async def cancel_requested(self, job_id: int) -> bool:
        return await asyncio.to_thread(self.queue.cancel_requested, job_id)

    # ------------------------------------------------------------------ reads

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return await asyncio.to_thread(self.queue.queue_counts)

    async def pending_ages(self) -> dict[str, float]:
        return await asyncio.to_thread(self.queue.pending_ages)

    async def shard_stats(self) -> list[dict[str, int]]:
        return await asyncio.to_thread(self.queue.shard_stats)

    async def now(self) -> float:
        return await asyncio.to_thread(self.queue.now)

    @property
    def closed(self) -> bool:
        return self.queue.closed

    # ------------------------------------------------------------------ rate limits

    async def set_rate_limit(self, key: str, rate: Any, *, burst: int | None = None) -> Rate:
        return await asyncio.to_thread(lambda: self.queue.set_rate_limit(key, rate, burst=burst))

    async def remove_rate_limit(self, key: str) -> bool:
        return await asyncio.to_thread(self.queue.remove_rate_limit, key)

    async def reset_rate_limit(self, key: str) -> bool:
        return await asyncio.to_thread(self.queue.reset_rate_limit, key)

    async def rate_limits(self) -> dict[str, Rate]:
        return await asyncio.to_thread(self.queue.rate_limits)

    async def try_acquire(self, key: str) -> bool:
        return await asyncio.to_thread(self.queue.try_acquire, key)

    async def acquire(self, key: str, timeout: float | None = None) -> None:
        """Take one token from ``key``, waiting on the loop (``asyncio.sleep``) until there is one;
        ``RateLimited`` if that would take over ``timeout`` s."""
        if timeout is not None:
            check_number("timeout", timeout, minimum=0, error=InvalidJob)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            granted, wait = await asyncio.to_thread(self.queue._take_token, key)
            if granted:
                return
            check_wait(key, wait, deadline, timeout)
            await asyncio.sleep(wait)

    async def remaining(self, key: str) -> float | None:
        return await asyncio.to_thread(self.queue.remaining, key)

    async def retry_after(self, key: str) -> float:
        return await asyncio.to_thread(self.queue.retry_after, key)

    # ------------------------------------------------------------------ circuit breakers

    async def set_circuit_breaker(
        self, key: str, *, threshold: int = 5, recovery_timeout: float = 60.0
    ) -> None:
        await asyncio.to_thread(
            lambda: self.queue.set_circuit_breaker(
                key, threshold=threshold, recovery_timeout=recovery_timeout
            )
        )

    async def remove_circuit_breaker(self, key: str) -> bool:
        return await asyncio.to_thread(self.queue.remove_circuit_breaker, key)

    async def reset_circuit_breaker(self, key: str) -> bool:
        return await asyncio.to_thread(self.queue.reset_circuit_breaker, key)

    async def circuit_breakers(self) -> dict[str, dict[str, Any]]:
        return await asyncio.to_thread(self.queue.circuit_breakers)

    async def flow_damage(self) -> dict[str, dict[str, str]]:
        return await asyncio.to_thread(self.queue.flow_damage)

    # ------------------------------------------------------------------ pauses

    async def pause(self, queues: str | Iterable[str], **options: Any) -> list[Pause]:
        return await asyncio.to_thread(lambda: self.queue.pause(queues, **options))

    async def resume(self, queues: str | Iterable[str], *, task: str | None = None) -> list[Pause]:
        return await asyncio.to_thread(lambda: self.queue.resume(queues, task=task))

    async def pauses(self) -> list[Pause]:
        return await asyncio.to_thread(self.queue.pauses)

    # ------------------------------------------------------------------ kept schedules

    async def schedules(self) -> list[StoredSchedule]:
        return await asyncio.to_thread(self.queue.schedules)

    async def schedule(self, name: str) -> StoredSchedule | None:
        return await asyncio.to_thread(self.queue.schedule, name)

    async def change_schedule(self, name: str, edit: Edit) -> StoredSchedule | None:
        return await asyncio.to_thread(self.queue.change_schedule, name, edit)

    # ------------------------------------------------------------------ locks and workers

    async def acquire_lock(self, name: str, owner: str, ttl: float) -> bool:
        return await asyncio.to_thread(self.queue.acquire_lock, name, owner, ttl)

    async def release_lock(self, name: str, owner: str) -> bool:
        return await asyncio.to_thread(self.queue.release_lock, name, owner)

    async def lock_holder(self, name: str) -> LockHolder | None:
        return await asyncio.to_thread(self.queue.lock_holder, name)

    async def last_lock_holder(self, name: str) -> LockHolder | None:
        return await asyncio.to_thread(self.queue.last_lock_holder, name)

    async def report_worker(self, worker_id: str, *, stale_after: float, **fields: Any) -> None:
        await asyncio.to_thread(
            lambda: self.queue.report_worker(worker_id, stale_after=stale_after, **fields)
        )

    async def remove_worker(self, worker_id: str) -> bool:
        return await asyncio.to_thread(self.queue.remove_worker, worker_id)

    async def workers(self, *, include_dead: bool = False) -> list[WorkerInfo]:
        return await asyncio.to_thread(lambda: self.queue.workers(include_dead=include_dead))

    async def prune_workers(self) -> int:
        return await asyncio.to_thread(self.queue.prune_workers)


def _unwrapped(record: AsyncRecord | Record) -> Record:
    return record._record if isinstance(record, AsyncRecord) else record
