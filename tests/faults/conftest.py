"""Fixtures of the fault tests: the engine tests' fake clock, child processes and store fixtures (its
location, ``make_queue`` and the probe; the store kind is the whole suite's, tests/stores.py: the faults
that make sense on any store run on each kind), the worker tests' real ``queue_worker`` site (a store in
``tmp_path`` and subprocesses that serve it)."""

from __future__ import annotations

from tests.engine.conftest import children, clock, location, make_queue, probe, store_path
from tests.worker.conftest import site

__all__ = ["children", "clock", "location", "make_queue", "probe", "site", "store_path"]
