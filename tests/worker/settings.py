"""Settings of the ``queue_worker`` subprocesses that the worker tests start.

The store (an LMDB ``DATA_DIR``, or with ``QUEUE_MAX_TEST_PG_URL`` the PostgreSQL store at that URL), the
lease time and where the tasks write their marks come from the environment, which each test sets for its
own subprocesses (``tests/worker/conftest.py``); so do, when set, ``UNKNOWN_TASK_GRACE``
(``$QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE``), ``RATE_LIMIT`` and ``QUEUE_RATE_LIMITS``
(``$QUEUE_MAX_TEST_RATE_LIMIT``, ``$QUEUE_MAX_TEST_QUEUE_RATE_LIMITS``: JSON) and a ``TASKS`` setting
that runs ``django.tasks`` tasks on this store (``$QUEUE_MAX_TEST_DJANGO_TASKS``, Django >= 6.0;
``outcomes``: those of workapp/outcome_django_tasks.py too, with ``MAX_RETRIES`` 1).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.worker.workapp"]

PG_URL = os.environ.get("QUEUE_MAX_TEST_PG_URL")
STORE: dict[str, Any] = (
    {"STORE": "postgresql", "URL": PG_URL}
    if PG_URL
    else {"DATA_DIR": os.environ.get("QUEUE_MAX_TEST_DATA_DIR", "/nonexistent/set-QUEUE_MAX_TEST_DATA_DIR")}
)
QUEUE_MAX: dict[str, Any] = {  # type: ignore[no-redef]
    **STORE,
    "LEASE_TIME": float(os.environ.get("QUEUE_MAX_TEST_LEASE_TIME", "30")),
    "RETRY_BACKOFF": 0.0,
}
if "QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE" in os.environ:
    QUEUE_MAX["UNKNOWN_TASK_GRACE"] = float(os.environ["QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE"])
if "QUEUE_MAX_TEST_RATE_LIMIT" in os.environ:
    QUEUE_MAX["RATE_LIMIT"] = os.environ["QUEUE_MAX_TEST_RATE_LIMIT"]
if "QUEUE_MAX_TEST_QUEUE_RATE_LIMITS" in os.environ:
    QUEUE_MAX["QUEUE_RATE_LIMITS"] = json.loads(os.environ["QUEUE_MAX_TEST_QUEUE_RATE_LIMITS"])
DJANGO_TASKS = os.environ.get("QUEUE_MAX_TEST_DJANGO_TASKS")
if DJANGO_TASKS:
    OPTIONS: dict[str, Any] = {"MODULES": ["tests.worker.workapp.django_tasks"]}
    if DJANGO_TASKS == "outcomes":
        OPTIONS["MODULES"].append("tests.worker.workapp.outcome_django_tasks")
        OPTIONS["MAX_RETRIES"] = 1
    TASKS = {"default": {"BACKEND": "queue_max_django.backend.QueueMaxBackend", "OPTIONS": OPTIONS}}
