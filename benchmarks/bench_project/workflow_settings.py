"""Settings of the workflow benchmark (benchmarks/workflow_bench.py): the worker benchmark's project, its
store given by the environment (``QUEUE_MAX_BENCH_URL``: the PostgreSQL store there; else LMDB in
``$BENCH_DIR/store``)."""

from __future__ import annotations

import os

from benchmarks.bench_project.settings import *  # noqa: F403
from benchmarks.bench_project.settings import BENCH_DIR

QUEUE_MAX = (  # type: ignore[no-redef]
    {"STORE": "postgresql", "URL": os.environ["QUEUE_MAX_BENCH_URL"]}
    if os.environ.get("QUEUE_MAX_BENCH_URL")
    else {"DATA_DIR": BENCH_DIR / "store"}
)
