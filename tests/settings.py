"""Django settings of the test suite (pytest-django: ``DJANGO_SETTINGS_MODULE = "tests.settings"``).

Nothing is created here: BASE_DIR is a per-run path under the temporary directory, and tests that open a
store point ``QUEUE_MAX["DATA_DIR"]`` at their own ``tmp_path`` with ``override_settings``.
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
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "queue_max_django",
    "tests.testapp",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

QUEUE_MAX = {
    "DATA_DIR": BASE_DIR / "queue_max_data",
}
