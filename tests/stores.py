"""The store kinds every test runs on: one registry (``KINDS``), and a pytest plugin (``tests/conftest.py``
loads it) with the one ``store_kind`` fixture of the whole suite.

A test that takes ``store_kind`` (most take it through a fixture: the engine tests' ``queue``/``make_queue``,
the store contract suite's ``store``, the Django tests' ``queue_max``, the worker tests' ``site``, the
browser tests' ``store_settings``) runs once per kind, the kind in its id (``[lmdb]``, ``[postgres]``); the
PostgreSQL variant gets a database of its own (tests/pgserver.py) and skips (or, under CI, fails) where no
server can be had. Two markers leave the other kinds out, each for its own reason:

- ``lmdb``: the test only makes sense on the LMDB store (its data directory, shards, files, map size);
- ``store_neutral``: what the test exercises does not depend on the store (settings, system checks, option
  parsing, the worker's own process handling), or its store part is proven on every kind by another test
  that its reason names, so running it again on PostgreSQL would prove nothing new (and cost a CI budget
  that multi-process tests spend fast); the tests of the same code that do reach the store run on every
  kind.

A new kind of store is one entry of ``KINDS``: its name, how to open a ``Store`` of it for one test, the
markers its tests carry (``postgres``: needs a server), and the suites it runs in (the in-memory reference
store: the engine's and the store contract's only). The store contract suite (``tests/store_contract``) then
runs on it; the Queue-level suites also need it in ``tests/engine/locations.py`` (``OPENERS``: a Queue
another process can open) and a ``StoreProbe`` (``tests/engine/probes.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from queue_max_django.engine.stores.base import Store

Clock = Callable[[], float]

TESTS = Path(__file__).resolve().parent

CONTRACT_SHARDS = 2
"""Shards of an LMDB store of the contract suite: more than one, so that ids, listings and counts cross
shards."""


@dataclass(frozen=True, slots=True)
class StoreKind:
    """One kind of store the tests run on."""

    name: str
    open_store: Callable[[pytest.FixtureRequest, Clock], Store]
    """A new, empty store of this kind for the asking test (``request``), on ``clock``; the caller closes
    it."""
    marks: tuple[str, ...] = ()
    """Markers every test of this kind carries (``postgres``: it needs a server, ``-m "not postgres"``)."""
    suites: tuple[str, ...] | None = None
    """The test folders (under ``tests/``) whose tests run on this kind; None: every one."""


def _open_lmdb(request: pytest.FixtureRequest, clock: Clock) -> Store:
    from queue_max_django.engine.stores.lmdb.store import DEFAULT_MAP_SIZE, LmdbStore

    path = request.getfixturevalue("tmp_path") / "store"
    return LmdbStore.open(path, shards=CONTRACT_SHARDS, map_size=DEFAULT_MAP_SIZE, map_size_max=None,
                          sync=False, writemap=False, clock=clock, rotation=0)  # fmt: skip


def _open_postgres(request: pytest.FixtureRequest, clock: Clock) -> Store:
    from queue_max_django.engine.stores.postgres.store import PostgresStore  # psycopg only for this kind

    return PostgresStore.open(request.getfixturevalue("pg_url"), clock=clock)


def _open_memory(request: pytest.FixtureRequest, clock: Clock) -> Store:
    from queue_max_django.engine.stores.memory.store import MemoryStore

    return MemoryStore(clock=clock)  # a store of its own, in this process only


KINDS: dict[str, StoreKind] = {
    kind.name: kind
    for kind in (
        StoreKind("lmdb", _open_lmdb),
        StoreKind("postgres", _open_postgres, marks=("postgres",)),
        # The in-memory reference store proves the contract is enough: the engine's suites run on it, the
        # Django, worker and browser tests (processes, a settings-built store) do not.
        StoreKind("memory", _open_memory, suites=("engine", "store_contract")),
    )
}
"""Every kind of store, the default one first: adding a kind is one entry here."""

STORE_KINDS = list(KINDS)
"""The names of the kinds (``store_kind``'s values), the default one first."""

ONE_STORE_MARKERS = ("lmdb", "store_neutral")
"""A test marked with one of these runs on the default (LMDB) store only."""


def store_kind_param(request: pytest.FixtureRequest) -> str:
    """The body of ``store_kind`` (a module that needs the kind for a wider scope makes its fixture from
    it, with the same ``STORE_KINDS``: tests/engine/test_bad_input.py)."""
    return str(request.param)


store_kind = pytest.fixture(params=STORE_KINDS, name="store_kind")(store_kind_param)
"""The kind of store this test runs on; each kind shows in the test's id (``[lmdb]``)."""


PROCESS_SUITES = frozenset({"engine", "worker", "faults", "chaos"})
"""The folders whose tests are marked ``stores_and_processes`` (pyproject.toml says what for)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``lmdb`` or ``store_neutral`` keeps its default-kind variant only; every variant gets its
    kind's markers (``KINDS``); a test of ``PROCESS_SUITES`` gets ``stores_and_processes``."""
    for item in list(items):
        if _suite_of(item) in PROCESS_SUITES:
            item.add_marker(pytest.mark.stores_and_processes)
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("store_kind") if callspec is not None else None
        if kind is None:
            continue
        if kind != STORE_KINDS[0] and any(item.get_closest_marker(name) for name in ONE_STORE_MARKERS):
            items.remove(item)
            continue
        suites = KINDS[kind].suites
        if suites is not None and _suite_of(item) not in suites:
            items.remove(item)
            continue
        for mark in KINDS[kind].marks:
            item.add_marker(getattr(pytest.mark, mark))


def _suite_of(item: pytest.Item) -> str:
    """The folder under ``tests/`` that holds ``item``'s file (``""`` for a file directly in it)."""
    parts = item.path.relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 else ""
