"""Settings of the ``queue_worker`` processes of the chaos runs (benchmarks/chaos.py, tests/chaos/).

Where the store and the execution logs live, and the lease time, come from the environment that the chaos
driver sets for its subprocesses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.chaos.chaosapp"]

CHAOS_DIR = Path(os.environ.get("QUEUE_MAX_CHAOS_DIR", "/nonexistent/set-QUEUE_MAX_CHAOS_DIR"))
QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    "DATA_DIR": CHAOS_DIR / "store",
    "LEASE_TIME": float(os.environ.get("QUEUE_MAX_CHAOS_LEASE_TIME", "3")),
    "RETRY_BACKOFF": 0.0,
    "MAX_RETRIES": 10,
}
