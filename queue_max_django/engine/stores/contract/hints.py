"""Waking consumers that wait for work: ``Store.hints()``."""

from __future__ import annotations

from typing import Any, Protocol


class Hints(Protocol):
    """How a store wakes consumers that wait for work (LMDB: the wake file, ``lmdb/wake.py``; PostgreSQL:
    LISTEN/NOTIFY, ``postgres/hints.py``). A store with no way to reach other processes still hints its
    own (``notify``), and its consumers poll: every wait is bounded."""

    def changed(self) -> bool:
        """Did a hint arrive since this thread last waited or asked? Consumes them; True when unknown (the
        first time a thread asks, or when the store cannot tell)."""

    def mark(self) -> Any:
        """An opaque reading of the hints, to compare with a later one (``changed_since``)."""

    def changed_since(self, old: Any, new: Any) -> list[int] | None:
        """The shards hinted between two marks, or None when any shard may have been. [sc_hints_marks] A
        hinting operation committed between the two marks: never ``[]``, and, if a list, it names the
        shard of the job it made claimable."""

    def wait(self, timeout: float) -> None:
        """Return when a hint arrives or ``timeout`` seconds pass, whichever is first (at once for a
        timeout of 0 or less, and after ``close``)."""

    def reset_poll(self) -> None:
        """Work was found: a polling fallback starts short again."""

    def watch(self) -> int | None:
        """A new non-blocking file descriptor that becomes readable when a hint arrives, for an event loop
        (``AsyncQueue``), or None when the store has none (then the caller polls). The caller drains it
        with ``os.read`` after each wake-up and closes it."""

    def notify(self, shard: int | None = None) -> None:
        """Hint that a job of ``shard`` (None: of any shard) may have become claimable."""

    def close(self) -> None:
        """Wake every waiter; later waits return at once. [sc_hints_close]"""
