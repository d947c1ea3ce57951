"""Settings of the ``queue_transfer`` subprocesses of the kill test (``transfer_kill.py``): the tests'
settings with the stores the test names, as JSON in ``QUEUE_MAX_TEST_TRANSFER``."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.settings import *  # noqa: F403

QUEUE_MAX_TRANSFER: dict[str, Any] = json.loads(os.environ.get("QUEUE_MAX_TEST_TRANSFER", "{}"))
