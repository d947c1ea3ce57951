"""Settings of the ``queue_worker`` subprocesses of tests/django/test_encryption_at_rest.py: the tests'
settings with the ``QUEUE_MAX`` the test gives (JSON in ``QUEUE_MAX_TEST_ENCRYPTION``) and the app that
registers the encrypted tasks."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "tests.security.encrypted_app"]
QUEUE_MAX: dict[str, Any] = json.loads(os.environ.get("QUEUE_MAX_TEST_ENCRYPTION", "{}"))
