"""Fixtures of the Django tests: each test's store lives in its own ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf


@pytest.fixture(autouse=True)
def _fresh_conf() -> Iterator[None]:
    """No config or queue cached across tests (a queue left open would outlive its ``tmp_path``)."""
    conf.reset()
    yield
    conf.reset()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def queue_max(data_dir: Path) -> Callable[..., override_settings]:
    """``queue_max(KEY=value, ...)``: an ``override_settings`` of ``QUEUE_MAX`` with those keys and
    ``DATA_DIR`` in this test's ``tmp_path`` (unless given)."""

    def configure(**keys: Any) -> override_settings:
        return override_settings(QUEUE_MAX={"DATA_DIR": data_dir, **keys})

    return configure
