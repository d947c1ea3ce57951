"""Group commit for the durable mode: concurrent ``put`` calls share one transaction and one fsync.

Leader/follower, no extra thread: the first caller to find no commit in progress becomes the leader, takes
every request waiting at that moment (bounded), writes them in one transaction, syncs, releases its followers,
and hands leadership to the first request that arrived meanwhile. Nobody returns before the commit that holds
its job is on disk. If a batch fails, its requests are replayed one by one so each caller gets its own error.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

MAX_BATCH = 512


class _Request(Generic[Item, Out]):
    __slots__ = ("_signal", "error", "ids", "items", "lead")

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = items
        # A one-shot signal: a lock taken now, released once by ``wake``. Cheaper than threading.Event
        # (no Condition, no waiter lock per wait), which matters with many producer threads on one GIL.
        self._signal = threading.Lock()
        self._signal.acquire()
        self.lead = False
        self.ids: list[Out] | None = None
        self.error: BaseException | None = None

    def wait(self) -> None:
        self._signal.acquire()

    def wake(self) -> None:
        self._signal.release()


class GroupCommitter(Generic[Item, Out]):
    def __init__(self, commit: Callable[[Sequence[Item]], list[Out]], max_batch: int = MAX_BATCH) -> None:
        self._commit = commit  # writes items in ONE durable transaction, returns one result per item
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: deque[_Request[Item, Out]] = deque()
        self._busy = False

    @property
    def forming(self) -> bool:
        """Is a commit under way here? Then a new request joins the next batch, which is forming now."""
        return self._busy

    def submit(self, items: Sequence[Item]) -> list[Out]:
        request: _Request[Item, Out] = _Request(items)
        with self._lock:
            self._waiting.append(request)
            if not self._busy:
                self._busy = True
                request.lead = True
        if not request.lead:
            request.wait()
        if request.lead:
            self._lead()
        if request.error is not None:
            raise request.error
        assert request.ids is not None
        return request.ids

    def _lead(self) -> None:
        with self._lock:
            batch: list[_Request[Item, Out]] = []
            size = 0
            while self._waiting and (not batch or size + len(self._waiting[0].items) <= self._max_batch):
                request = self._waiting.popleft()
                batch.append(request)
                size += len(request.items)
        try:
            self._write(batch)
        finally:
            with self._lock:
                if self._waiting:
                    successor = self._waiting[0]
                    successor.lead = True
                    successor.wake()
                else:
                    self._busy = False
            for request in batch:
                if request.lead:  # the leader itself: it is not waiting
                    request.lead = False
                else:
                    request.wake()

    def _write(self, batch: list[_Request[Item, Out]]) -> None:
        if len(batch) > 1:
            try:
                ids = self._commit([item for request in batch for item in request.items])
            except Exception:
                pass  # replay one by one below, so each caller gets its own outcome
            else:
                start = 0
                for request in batch:
                    request.ids = ids[start : start + len(request.items)]
                    start += len(request.items)
                return
        for request in batch:
            try:
                request.ids = self._commit(request.items)
            except BaseException as exc:
                request.error = exc
