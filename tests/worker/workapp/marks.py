"""Where the worker tests' tasks leave their marks: files under ``$QUEUE_MAX_TEST_MARKS``, one line per mark
(the value and the process id), so that a test sees on disk what ran, where and how often."""

from __future__ import annotations

import os
from pathlib import Path


def mark(kind: str, value: object) -> None:
    folder = Path(os.environ["QUEUE_MAX_TEST_MARKS"])
    with open(folder / kind, "a", encoding="utf-8") as marks:
        marks.write(f"{value} {os.getpid()}\n")
