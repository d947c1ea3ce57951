"""Django settings of the test suite (pytest-django: ``DJANGO_SETTINGS_MODULE = "tests.settings"``).

Nothing is created here: BASE_DIR is a per-run path under the temporary directory, and tests that open a
store point ``QUEUE_MAX["DATA_DIR"]`` at their own ``tmp_path`` with ``override_settings``. The admin (with
the sessions, messages and static files it needs) serves the queue's pages at ``/admin/`` (tests/urls.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

BASE_DIR = Path(tempfile.gettempdir()) / f"queue-max-tests-{os.getpid()}"

SECRET_KEY = "queue-max-django-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "queue_max_django",
    "tests.testapp",
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
ROOT_URLCONF = "tests.urls"
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
STATIC_URL = "static/"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

QUEUE_MAX = {
    "DATA_DIR": BASE_DIR / "queue_max_data",
}
