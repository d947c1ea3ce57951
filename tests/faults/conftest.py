"""Fixtures of the fault tests: the engine tests' fake clock and child processes, the worker tests' real
``queue_worker`` site (a store in ``tmp_path`` and subprocesses that serve it)."""

from __future__ import annotations

from tests.engine.conftest import children, clock
from tests.worker.conftest import site

__all__ = ["children", "clock", "site"]
