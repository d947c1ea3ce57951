"""huey's side of the worker benchmark: a SqliteHuey with the same no-op task."""

from __future__ import annotations

import os
from pathlib import Path

from huey import SqliteHuey

huey = SqliteHuey(
    "bench", filename=str(Path(os.environ.get("BENCH_DIR", "/tmp/queue-max-bench")) / "huey.db")
)


@huey.task()
def noop() -> None:
    return None
