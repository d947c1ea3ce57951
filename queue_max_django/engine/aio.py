"""``AsyncQueue``: the same operations as coroutines. Nothing here blocks the event loop.

LMDB calls run in worker threads (``asyncio.to_thread``); an idle ``get()`` waits for the store's wake hint
on the event loop itself (``loop.add_reader`` on an inotify descriptor) instead of parking a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from .cancels import CancelOutcome
from .errors import QueueEmpty
from .job import Job, State
from .queue import MAX_IDLE_WAIT, Queue
from .record import Record
from .validate import check_number


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

    async def get(self, timeout: float | None = None, *, queues: Iterable[str] | None = None) -> AsyncRecord:
        if timeout is not None:
            check_number("timeout", timeout, minimum=0)
        names = None if queues is None else list(queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                record = await asyncio.to_thread(self.queue.get, 0, queues=names)
                return AsyncRecord(record)
            except QueueEmpty:
                pass
            wait = MAX_IDLE_WAIT
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise QueueEmpty(f"no job within {timeout} s") from None
                wait = min(wait, remaining)
            await self._wait_hint(wait)

    async def _wait_hint(self, timeout: float) -> None:
        fd = self._hint_fd()
        if fd is None:
            await asyncio.sleep(min(timeout, 0.005))
            return
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

    async def request_cancel(self, job_id: int) -> CancelOutcome:
        return await asyncio.to_thread(self.queue.request_cancel, job_id)

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
