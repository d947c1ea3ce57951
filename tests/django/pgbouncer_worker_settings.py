"""Settings of a ``queue_worker`` subprocess behind PgBouncer in transaction mode
(``tests/django/test_pg_pgbouncer.py``): the PostgreSQL worker settings with ``TRANSACTION_POOLING`` and no
``LISTEN`` key (it follows: off)."""

from __future__ import annotations

from typing import Any

from tests.django.pg_worker_settings import *  # noqa: F403
from tests.django.pg_worker_settings import QUEUE_MAX as _PG

QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    **{key: value for key, value in _PG.items() if key != "LISTEN"},
    "TRANSACTION_POOLING": True,
    "POLL_INTERVAL": 0.1,
}
