from __future__ import annotations

import pytest

from tests.contracts import CONTRACTS

pytest_plugins = ["tests.pgserver", "tests.stores"]


def pytest_configure(config: pytest.Config) -> None:
    for marker, description in CONTRACTS.items():
        config.addinivalue_line("markers", f"{marker}: {description}")
