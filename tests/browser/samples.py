"""An hour of throughput samples worth drawing, for the browser tests and the docs' screenshots: a busy
morning with a dip, a few dead letters, a lag that builds up and drains, and five minutes without a worker
(a gap in the chart)."""

from __future__ import annotations

import math

from queue_max_django.engine import Queue
from queue_max_django.engine.stores.types import Sample
from queue_max_django.engine.throughput import KEEP, minute_of

GAP = range(38, 43)  # minutes (counted from the first) when no worker ran


def fill_samples(store: Queue) -> int:
    """Write the samples of the last hour (the current minute last). -> the current minute."""
    end = minute_of(store.now())
    done = failed = 0
    live = store._live()
    for index in range(61):
        done += int(420 + 260 * math.sin(index / 7) + (index % 5) * 17)
        failed += (index % 9 == 4) + 3 * (index == 23)
        lag = max(0.0, 90 * math.sin((index - 10) / 9)) if 10 <= index <= 38 else 0.4
        if index not in GAP:
            live.save_sample(Sample(end - 60 + index, done, failed, lag), KEEP)
    return end
