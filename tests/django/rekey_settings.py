"""Settings of the ``queue_rekey`` subprocesses of tests/django/test_rekey.py: the tests' settings with the
``QUEUE_MAX`` the test gives, as JSON in ``QUEUE_MAX_TEST_REKEY``."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.settings import *  # noqa: F403

QUEUE_MAX: dict[str, Any] = json.loads(os.environ.get("QUEUE_MAX_TEST_REKEY", "{}"))
