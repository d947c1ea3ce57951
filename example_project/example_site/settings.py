"""Settings of the example project: SQLite and the queue's store under this folder, no other service.

``EXAMPLE_STATE_DIR`` (an environment variable) moves both the database and the store elsewhere, so that
tests (and several checkouts) can run the project without touching each other's files.

``EXAMPLE_POSTGRES_URL`` (``postgresql://user:password@host:port/dbname``) runs the same project on
PostgreSQL instead: that database becomes the project's ``default`` database, and the queue's store its
tables in it (``QUEUE_MAX["STORE"] = "postgresql"``), so that a job enqueued inside
``transaction.atomic()`` commits or rolls back with the rest. It needs psycopg (the ``postgres`` extra; a
checkout's ``uv sync`` has it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("EXAMPLE_STATE_DIR") or BASE_DIR)

# An example, never a deployment: the key is public and DEBUG is on (runserver serves the admin's files).
SECRET_KEY = "example-project-only-never-use-this-key-in-production"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "queue_max_django",  # the queue: @task, the worker, the commands and its pages in the admin
    "example_app",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_site.urls"
WSGI_APPLICATION = "example_site.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
POSTGRES_URL = os.environ.get("EXAMPLE_POSTGRES_URL", "")


def postgres_database(url: str) -> dict[str, Any]:
    """The ``DATABASES`` entry of a ``postgresql://`` URL (``?host=/run/postgresql`` for a Unix socket)."""
    parts = urlsplit(url)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    if parts.scheme not in ("postgres", "postgresql") or not parts.path.strip("/"):
        raise ImproperlyConfigured(
            f"EXAMPLE_POSTGRES_URL must be postgresql://[user[:password]@]host[:port]/dbname: {url!r}"
        )
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.strip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": query.get("host", parts.hostname or ""),
        "PORT": query.get("port", str(parts.port or "")),
    }


if POSTGRES_URL:
    DATABASES = {"default": postgres_database(POSTGRES_URL)}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": STATE_DIR / "db.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
LOGIN_URL = "admin:login"

QUEUE_MAX: dict[str, Any] = {
    # The store: a folder of this project (LMDB), or with EXAMPLE_POSTGRES_URL tables in its database.
    **(
        {"STORE": "postgresql", "DATABASE": "default"}
        if POSTGRES_URL
        else {"DATA_DIR": STATE_DIR / "queue_max_data"}
    ),
    "LEASE_TIME": 10.0,  # a worker killed mid-job gives its job back within 10 s
    "MAX_RETRIES": 3,
    "RETRY_BACKOFF": 0.2,  # short, so that the demo's retries happen while you watch: 0.2 s, 0.4 s, 0.8 s
    "QUEUE_RATE_LIMITS": {"partners": "20/s"},  # every worker process shares this budget
    "WORKER": {"THREADS": 4},
}

# Django's own Tasks framework (Django >= 6.0) runs on the same store, through our backend. On Django 5.2
# there is no django.tasks: the project runs without it (example_app/django_tasks.py is then not used).
HAS_DJANGO_TASKS = django.VERSION >= (6, 0)
if HAS_DJANGO_TASKS:
    TASKS = {
        "default": {
            "BACKEND": "queue_max_django.backend.QueueMaxBackend",
            "OPTIONS": {"MODULES": ["example_app.django_tasks"]},
        }
    }
