from __future__ import annotations

import pytest

from tests.contracts import CONTRACTS

pytest_plugins = ["tests.pgserver"]


def pytest_configure(config: pytest.Config) -> None:
    for marker, description in CONTRACTS.items():
        config.addinivalue_line("markers", f"{marker}: {description}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``lmdb`` runs on the LMDB store only: its other ``store_kind`` variants are left out
    (here, not in tests/engine/conftest.py, so that it holds wherever a test takes ``store_kind``: the
    fault tests too, run on their own)."""
    for item in list(items):
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("store_kind") if callspec is not None else None
        if kind not in (None, "lmdb") and item.get_closest_marker("lmdb"):
            items.remove(item)
