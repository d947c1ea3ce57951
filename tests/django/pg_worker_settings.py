"""Settings of the ``queue_worker`` subprocesses of the PostgreSQL tests (``tests/django/pgdjango.py``): the
tests' settings with the PostgreSQL store at the URL the test gives in the environment."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from tests.settings import *  # noqa: F403

QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    "STORE": "postgresql",
    "URL": os.environ.get("QUEUE_MAX_TEST_PG_URL", "postgresql://set-QUEUE_MAX_TEST_PG_URL/"),
    "LEASE_TIME": float(os.environ.get("QUEUE_MAX_TEST_LEASE_TIME", "30")),
    "RETRY_BACKOFF": 0.0,
    "LISTEN": os.environ.get("QUEUE_MAX_TEST_PG_LISTEN", "1") == "1",
}

if importlib.util.find_spec("django.tasks") is not None:  # Django >= 6.0
    TASKS = {
        "default": {
            "BACKEND": "queue_max_django.backend.QueueMaxBackend",
            "OPTIONS": {"MODULES": ["tests.testapp.django_tasks"]},
        }
    }
