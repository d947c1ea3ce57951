"""The ``QUEUE_MAX`` defaults and how the raw setting is read and merged over them, before any checking.

A leaf of the Django layer: checks.py judges the merged values and conf.py builds its config from them, both
through this module, so that conf.py can import checks.py and not the other way round.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from django.conf import settings

DATA_DIR_NAME = "queue_max_data"  # the default DATA_DIR is BASE_DIR / DATA_DIR_NAME
# The shortest LEASE_TIME: the worker renews the leases of running jobs on its 0.1 s tick, at least three
# times per lease time (worker/options.py: heartbeat_every); 0.5 s gives it five.
MIN_LEASE_TIME = 0.5

CIRCUIT_BREAKER_DEFAULTS: Mapping[str, Any] = MappingProxyType({"THRESHOLD": 5, "TIMEOUT": 60.0})
WORKER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "PROCESSES": None,
        "THREADS": 1,
        "QUEUES": None,
        "SHUTDOWN_TIMEOUT": 30.0,
        "MAX_JOBS": None,
        "MAX_MEMORY_MB": None,
        "BURST_WAIT": 0.0,
        "CANCEL_GRACE": 10.0,
    }
)
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "STORE": "lmdb",
        "DATA_DIR": None,  # None: BASE_DIR / "queue_max_data"
        "SHARDS": None,  # None: the count on disk, or 6 for a new store
        "LEASE_TIME": 30.0,
        "MAX_RETRIES": 3,
        "RETRY_BACKOFF": 1.0,
        "RETRY_BACKOFF_MAX": 3600.0,
        "RESULT_TTL": 86400.0,
        "MAX_PAYLOAD_BYTES": 2**20,
        "SYNC": False,
        "DATABASE": None,  # None: the "default" alias, unless URL is given
        "URL": None,
        "LISTEN": None,  # None: on, unless the store's connections go through a transaction-mode pooler
        "NOTIFY": True,
        "POLL_INTERVAL": 1.0,
        "TRANSACTION_POOLING": None,  # None: from the alias (database.alias_pools_transactions); URL: False
        "QUEUES": None,
        "RATE_LIMIT": None,
        "QUEUE_RATE_LIMITS": MappingProxyType({}),
        "QUEUE_CONCURRENCY": MappingProxyType(
            {}
        ),  # queue -> most jobs of it running at once (concurrency.py)
        "CIRCUIT_BREAKER": CIRCUIT_BREAKER_DEFAULTS,
        "ALERT_THRESHOLD": None,
        "TIMEOUT": None,
        "IMMEDIATE": False,
        "ENQUEUE_ON_COMMIT": True,  # inside a transaction, a job is stored at its commit (commits.py)
        "UNKNOWN_TASK_GRACE": 3600.0,  # seconds a job of a task the worker lacks waits for one that has it
        "METRICS_TOKEN": None,  # a bearer token that may read the metrics view (observability/views.py)
        "ENCRYPT": False,  # every task's jobs encrypted at rest (encryption/; a task's encrypt= overrides)
        "ENCRYPTION_KEYS": None,  # key id -> base64 key, or a list of keys: the first seals, all open
        "WORKER": WORKER_DEFAULTS,
    }
)
NESTED_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {"CIRCUIT_BREAKER": CIRCUIT_BREAKER_DEFAULTS, "WORKER": WORKER_DEFAULTS}
)


def read_settings() -> tuple[Any, Any]:
    """The ``QUEUE_MAX`` and ``BASE_DIR`` settings, as they are (``{}`` and None when unset)."""
    return getattr(settings, "QUEUE_MAX", {}), getattr(settings, "BASE_DIR", None)


def merge_defaults(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` over ``DEFAULTS``; ``CIRCUIT_BREAKER`` and ``WORKER`` are merged key by key when dicts."""
    result = {**DEFAULTS, **raw}
    for key, defaults in NESTED_DEFAULTS.items():
        if isinstance(result[key], Mapping):
            result[key] = {**defaults, **result[key]}
    return result


def resolve_data_dir(value: Any, base_dir: Any) -> Path | None:
    """DATA_DIR as a Path (BASE_DIR / "queue_max_data" when unset), or None when it cannot be had."""
    if value is None:
        return Path(base_dir) / DATA_DIR_NAME if isinstance(base_dir, (str, os.PathLike)) else None
    return Path(value) if isinstance(value, (str, os.PathLike)) and os.fspath(value) else None
