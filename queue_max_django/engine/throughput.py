"""The throughput history: jobs done and dead-lettered per minute, and the lag (the age of the oldest waiting
job), over the last hour, for the admin's chart.

The store keeps a small ring of per-minute samples of its own store-wide counters (``Store.save_sample``):
the jobs ever done, ever dead-lettered (``Store.finished_totals``: both only grow) and the lag at that
minute. A worker's supervisor takes them (``Sampler``, at most once a minute); several supervisors, on one
machine or many, write one sample per minute between them (the first wins), and since a sample holds totals,
not the jobs of its own minute, nothing is counted twice. Reading the history is one read of at most
``WINDOW + 1`` samples; the jobs per minute are the differences between consecutive samples
(``per_minute``): a minute without a sample, or without one the minute before (no worker ran), is a gap,
and so is a total that fell (a store that was emptied or replaced), never a negative count.

Nothing here is on the hot path: a put or an ack writes nothing for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import QueueError
from .stores.types import Sample

if TYPE_CHECKING:
    from .queue import Queue

WINDOW = 60  # minutes the history covers
KEEP = 2 * WINDOW  # minutes of samples the store keeps (older ones are dropped as new ones come)
MINUTE = 60.0

logger = logging.getLogger("queue_max_django.engine")


@dataclass(frozen=True, slots=True)
class Point:
    """One minute of the history. ``done`` and ``failed``: jobs that finished (or became dead letters)
    between the sample of the minute before and this minute's; ``lag``: seconds the oldest waiting job had
    waited at this minute's sample. None where it is not known (no sample: a gap in the chart)."""

    minute: int  # unix minutes: the time is minute * 60
    done: int | None
    failed: int | None
    lag: float | None


def minute_of(now: float) -> int:
    return int(now // MINUTE)


def take_sample(queue: Queue) -> bool:
    """Sample the store's counters for the current minute, unless that minute has a sample already.
    -> whether this call wrote it."""
    store = queue._live()
    now = queue._clock()
    done, failed = store.finished_totals()
    oldest = store.oldest_pending(now)
    lag = max(0.0, now - min(oldest.values())) if oldest else 0.0
    return store.save_sample(Sample(minute_of(now), done, failed, lag), KEEP)


def finished_totals(queue: Queue) -> tuple[int, int]:
    """(jobs ever done, jobs ever dead-lettered) in the whole store: they only grow
    (``Store.finished_totals``), so they are counters (the Prometheus view exports them)."""
    return queue._live().finished_totals()


def cancel_counts(queue: Queue) -> tuple[int, int]:
    """(dead letters that are cancels now, jobs ever cancelled while they ran): the second is a counter,
    counted within ``finished_totals``' dead letters (``Store.cancel_counts``)."""
    return queue._live().cancel_counts()


def enqueued_totals(queue: Queue) -> dict[str, int]:
    """Per queue, sorted by name: jobs ever put into it (``Store.enqueued_totals``; a counter too)."""
    return queue._live().enqueued_totals()


def history(queue: Queue, minutes: int = WINDOW) -> list[Point]:
    """The last ``minutes`` minutes, the current one last: ``minutes`` points, gaps included."""
    end = minute_of(queue._clock())
    return per_minute(queue._live().samples(end - minutes), end, minutes)


def per_minute(samples: Sequence[Sample], end: int, minutes: int = WINDOW) -> list[Point]:
    """The points of the ``minutes`` minutes up to ``end`` (included), from ``samples`` (any order; the
    minute before the first point's is used for its differences)."""
    by_minute = {sample.minute: sample for sample in samples}
    points = []
    for minute in range(end - minutes + 1, end + 1):
        this, before = by_minute.get(minute), by_minute.get(minute - 1)
        if this is None:
            points.append(Point(minute, None, None, None))
            continue
        done = failed = None
        if before is not None:
            done = _difference(this.done, before.done)
            failed = _difference(this.failed, before.failed)
        points.append(Point(minute, done, failed, this.lag))
    return points


def _difference(now: int, before: int) -> int | None:
    return now - before if now >= before else None  # a total that fell: the store was emptied or replaced


class Sampler:
    """What a worker's supervisor calls from its loop (``tick()``, as often as it likes): a sample at most
    once a minute of the store's clock. A store error is logged, never raised (the chart is not worth a
    worker): a warning when sampling starts to fail (a PostgreSQL database not migrated yet, say), not again
    every minute while it goes on failing; the next minute tries again."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._last: int | None = None
        self._failing = False

    def tick(self) -> bool:
        """Sample if this minute was not sampled by this sampler yet. -> whether it sampled (or tried)."""
        try:
            minute = minute_of(self.queue.now())  # (the PostgreSQL store's clock may ask the server)
            if minute == self._last:
                return False
            self._last = minute
            take_sample(self.queue)
        except QueueError:
            if not self._failing:
                logger.warning("the throughput sample of this minute could not be saved (the admin's chart "
                               "will have gaps until one can)", exc_info=True)  # fmt: skip
            self._failing = True
        else:
            self._failing = False
        return True
