"""Fixtures of the Django tests: each test's store is its own, of the kind ``store_kind`` (tests/stores.py):
the LMDB store in the test's ``tmp_path``, or the PostgreSQL store in a database of its own, reached
through a ``DATABASES`` alias (``pgdjango.pg_alias``), as a project names it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.tasks import registry
from tests.engine.locations import StoreLocation

from .pgdjango import pg_alias as pg_alias

LMDB_SHAPE = ("SHARDS", "SYNC")
"""The ``QUEUE_MAX`` keys that shape the LMDB store only (a system check error with the PostgreSQL store)."""


@pytest.fixture(autouse=True)
def _fresh_conf() -> Iterator[None]:
    """No config or queue cached across tests (a queue left open would outlive its ``tmp_path``)."""
    conf.reset()
    yield
    conf.reset()


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task registry's tasks and conflicts as copies, put back after the test: a task it registers, or a
    name it registers twice (a conflict, which the system check E013 reports), leaves with it."""
    monkeypatch.setattr(registry, "_tasks", dict(registry._tasks))
    monkeypatch.setattr(registry, "_conflicts", list(registry._conflicts))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The LMDB store's ``DATA_DIR`` (for the tests of the LMDB store only: ``location`` is any kind's)."""
    return tmp_path / "store"


@pytest.fixture
def location(store_kind: str, data_dir: Path, request: pytest.FixtureRequest) -> StoreLocation:
    """This test's store as a value (``tests/engine/locations.py``): ``location.open_queue()`` opens it as
    another process would, ``location.exists()`` says whether anything of it was written. LMDB: ``data_dir``;
    PostgreSQL: the test's database (``pg_url``)."""
    if store_kind == "postgres":
        return StoreLocation(store_kind, str(request.getfixturevalue("pg_url")))
    return StoreLocation(store_kind, str(data_dir))


@pytest.fixture
def store_settings(location: StoreLocation, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``QUEUE_MAX`` keys that name this test's store: ``DATA_DIR``, or ``STORE`` and ``DATABASE``."""
    if location.kind == "postgres":
        return {"STORE": "postgresql", "DATABASE": request.getfixturevalue("pg_alias")}
    return {"DATA_DIR": Path(location.where)}


@pytest.fixture
def queue_max(store_settings: dict[str, Any]) -> Iterator[Callable[..., override_settings]]:
    """``queue_max(KEY=value, ...)``: an ``override_settings`` of ``QUEUE_MAX`` with those keys and this
    test's store (``store_settings``, unless a key of it is given). ``SHARDS`` and ``SYNC`` shape the LMDB
    store: a test gives them for it, and the PostgreSQL store, which has one shard and the server's
    durability, is configured without them (as tests/engine/locations.py opens it without the LMDB store's
    shaping options); a test that depends on several shards says so and is marked ``lmdb``."""

    def configure(**keys: Any) -> override_settings:
        if "STORE" in store_settings:
            keys = {name: value for name, value in keys.items() if name not in LMDB_SHAPE}
        return override_settings(QUEUE_MAX={**store_settings, **keys})

    yield configure
    conf.reset()  # the queue closes before the test's database is emptied for the next test
