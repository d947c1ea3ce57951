"""Django settings of the worker benchmark (benchmarks/worker_bench.py): every queue under test in one
project, each with its own store or database file under $BENCH_DIR."""

from __future__ import annotations

import os
from pathlib import Path

BENCH_DIR = Path(os.environ.get("BENCH_DIR", "/tmp/queue-max-bench"))
BASE_DIR = BENCH_DIR
SECRET_KEY = "benchmark-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "queue_max_django",
    "django_tasks_db",
    "django_q",
    "benchmarks.bench_project.bench_app",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BENCH_DIR / "db.sqlite3",
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL",
        },
    }
}
QUEUE_MAX = {"DATA_DIR": BENCH_DIR / "store"}
if os.environ.get("BENCH_PG_URL"):  # benchmarks/limits_bench.py --pg
    QUEUE_MAX = {"STORE": "postgresql", "URL": os.environ["BENCH_PG_URL"]}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": 2,
    "timeout": 60,
    "retry": 120,
    "save_limit": -1,  # keep no successes: the same as the others, which keep no result of a no-op
    "poll": 0.01,
    "catch_up": False,
    "log_level": "WARNING",
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
