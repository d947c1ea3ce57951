"""The store kinds the Django, worker and browser tests run on: a pytest plugin (``tests/conftest.py`` loads
it) with the ``store_kind`` fixture, the same that the engine's contract suite has (tests/engine/conftest.py).

A test that takes ``store_kind`` (most take it through a fixture: the Django tests' ``queue_max``, the worker
tests' ``site``, the browser tests' ``store_settings``) runs once per kind, the kind in its id (``[lmdb]``,
``[postgres]``); the PostgreSQL variant gets a database of its own (tests/pgserver.py) and skips (or, under
CI, fails) where no server can be had. Two markers leave the other kinds out, each for its own reason:

- ``lmdb``: the test only makes sense on the LMDB store (its data directory, shards, files, map size);
- ``store_neutral``: what the test exercises does not depend on the store (settings, system checks, option
  parsing, the worker's own process handling), or its store part is proven on every kind by another test
  that its reason names, so running it again on PostgreSQL would prove nothing new (and cost a CI budget
  that multi-process tests spend fast); the tests of the same code that do reach the store run on every
  kind.
"""

from __future__ import annotations

import pytest

STORE_KINDS = ["lmdb", "postgres"]
"""The kinds of store (``store_kind``), the default one first."""

ONE_STORE_MARKERS = ("lmdb", "store_neutral")
"""A test marked with one of these runs on the LMDB store only."""


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """The kind of store this test runs on; each kind shows in the test's id (``[lmdb]``)."""
    return str(request.param)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``lmdb`` or ``store_neutral`` keeps its LMDB variant only (wherever ``store_kind``
    comes from: this plugin, or the engine's conftest); a PostgreSQL variant is marked ``postgres``."""
    for item in list(items):
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("store_kind") if callspec is not None else None
        if kind not in (None, "lmdb") and any(item.get_closest_marker(name) for name in ONE_STORE_MARKERS):
            items.remove(item)
        elif kind == "postgres":
            item.add_marker(pytest.mark.postgres)  # it needs a server: ``-m "not postgres"`` leaves it out
