"""Settings of the ``queue_worker`` processes of the chaos runs (benchmarks/chaos.py, tests/chaos/).

Where the store and the execution logs live, and the lease time, come from the environment that the chaos
driver sets for its subprocesses: the LMDB store in ``$QUEUE_MAX_CHAOS_DIR/store``, or the PostgreSQL store
at ``$QUEUE_MAX_CHAOS_URL`` when that is set (benchmarks/runstore.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.chaos.chaosapp"]

CHAOS_DIR = Path(os.environ.get("QUEUE_MAX_CHAOS_DIR", "/nonexistent/set-QUEUE_MAX_CHAOS_DIR"))
CHAOS_URL = os.environ.get("QUEUE_MAX_CHAOS_URL")
STORE: dict[str, Any] = (
    {"STORE": "postgresql", "URL": CHAOS_URL} if CHAOS_URL else {"DATA_DIR": CHAOS_DIR / "store"}
)
QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    **STORE,
    "LEASE_TIME": float(os.environ.get("QUEUE_MAX_CHAOS_LEASE_TIME", "3")),
    "RETRY_BACKOFF": 0.0,
    "MAX_RETRIES": 10,
}
