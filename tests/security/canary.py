"""A module nothing imports on purpose. If a worker ever imports it because a job named it, importing it
leaves a file at ``$QUEUE_MAX_CANARY``, and calling ``run`` leaves ``$QUEUE_MAX_CANARY.called``: the tests
of tests/security/test_no_code.py assert that neither ever appears."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CANARY = Path(os.environ.get("QUEUE_MAX_CANARY", "/tmp/queue-max-canary-imported"))
CANARY.write_text("imported\n", encoding="utf-8")


def run(*args: Any, **kwargs: Any) -> str:
    Path(f"{CANARY}.called").write_text("called\n", encoding="utf-8")
    return "ran"
