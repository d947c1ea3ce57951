"""Django settings of the PostgreSQL side by side (benchmarks/peers_postgres.py): the database of
$BENCH_PG_URL holds this project's store (``DATABASE`` alias ``default``, so a ``.delay()`` inside
``transaction.atomic()`` joins the caller's transaction) or django-tasks-db's table, one system a database."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from benchmarks.bench_project.settings import BENCH_DIR, DEFAULT_AUTO_FIELD, LOGGING, SECRET_KEY, USE_TZ

__all__ = ["BENCH_DIR", "DEFAULT_AUTO_FIELD", "LOGGING", "SECRET_KEY", "USE_TZ"]

_url = urlsplit(os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
DEBUG = False
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "queue_max_django",
    "django_tasks_db",
    "benchmarks.bench_project.bench_app",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": _url.port or "",
    }
}
QUEUE_MAX = {"STORE": "postgresql", "DATABASE": "default"}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
