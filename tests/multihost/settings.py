"""Settings of the ``queue_worker`` and ``queue_check`` commands of the multi-host run
(benchmarks/multihost.py, tests/multihost/): the PostgreSQL store at the URL of the server as this host
reaches it, the lease time, this host's name and where the task logs its runs, all from the environment that
the run sets."""

from __future__ import annotations

import os
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.multihost.hostapp"]

QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    "STORE": "postgresql",
    "URL": os.environ.get("QUEUE_MAX_MULTIHOST_URL", "postgresql://set-QUEUE_MAX_MULTIHOST_URL/"),
    "LEASE_TIME": float(os.environ.get("QUEUE_MAX_MULTIHOST_LEASE_TIME", "2")),
    "RETRY_BACKOFF": 0.0,
}
