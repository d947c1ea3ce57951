"""Settings of the subprocesses that the fault tests start: the worker tests' settings, plus ``SHARDS`` from
``$QUEUE_MAX_TEST_SHARDS`` when it is set (to open a store with the wrong shard count)."""

from __future__ import annotations

import os

from tests.worker.settings import *  # noqa: F403
from tests.worker.settings import QUEUE_MAX

if "QUEUE_MAX_TEST_SHARDS" in os.environ:
    QUEUE_MAX = {**QUEUE_MAX, "SHARDS": int(os.environ["QUEUE_MAX_TEST_SHARDS"])}
