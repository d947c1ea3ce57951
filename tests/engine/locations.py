"""Where a test's store is, as a value another process can be handed: ``StoreLocation``.

The contract tests that start child processes (tests/engine/procs.py) give each child the parent's
``StoreLocation``; the child opens its own ``Queue`` on the same store with ``location.open_queue()``. A
location is a small frozen value (store kind, path or URL, options) that pickles and crosses the children's
JSON argument line (``encode``/``decode``), so the same tests run on every store kind.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from typing import Any

from queue_max_django.engine import AsyncQueue, Queue
from tests import pgserver

JSON_TAG = "$store_location"
"""How a ``StoreLocation`` is spelled in a child's JSON arguments."""


def _open_lmdb(where: str, options: dict[str, Any]) -> Queue:
    return Queue(where, **options)


def _open_lmdb_async(where: str, options: dict[str, Any]) -> AsyncQueue:
    return AsyncQueue(where, **options)


# The options that shape an LMDB store (how many shards, its map, its write mode): a contract test gives them
# for the LMDB store, and the PostgreSQL store, which has one shard and no map, is opened without them (a
# Queue refuses them with a URL, as it should a user's mistake).
_LMDB_SHAPE = ("shards", "map_size", "map_size_max", "writemap")


def _open_pg(where: str, options: dict[str, Any]) -> Queue:
    return Queue(where, **{name: value for name, value in options.items() if name not in _LMDB_SHAPE})


def _open_pg_async(where: str, options: dict[str, Any]) -> AsyncQueue:
    return AsyncQueue(where, **{name: value for name, value in options.items() if name not in _LMDB_SHAPE})


OPENERS: dict[str, Callable[[str, dict[str, Any]], Queue]] = {"lmdb": _open_lmdb, "postgres": _open_pg}
"""How each store kind opens a Queue on its location: (path or URL, Queue options) -> Queue."""
ASYNC_OPENERS: dict[str, Callable[[str, dict[str, Any]], AsyncQueue]] = {
    "lmdb": _open_lmdb_async,
    "postgres": _open_pg_async,
}
"""How each store kind opens an AsyncQueue on its location: (path or URL, Queue options) -> AsyncQueue."""

# What of a PostgreSQL store holds anything written (the tables themselves are there before any Queue).
_PG_WRITTEN = ("qm_jobs", "qm_finished", "qm_unique", "qm_limits", "qm_breakers", "qm_locks", "qm_workers")


def _pg_exists(where: str) -> bool:
    with pgserver.connect(where) as conn:
        return any(
            conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0] for table in _PG_WRITTEN
        )


EXISTS: dict[str, Callable[[str], bool]] = {"lmdb": os.path.lexists, "postgres": _pg_exists}
"""Whether anything of a store of each kind was created at its location (the LMDB store: its directory;
the PostgreSQL store: any row of its jobs, keys, limits, locks or workers)."""


def _lmdb_sibling(where: str, name: str) -> str:
    return os.path.join(os.path.dirname(where), name)


def _pg_sibling(where: str, name: str) -> str:
    return pgserver.fresh_database()  # a database of its own, from the template: dropped with the session


SIBLINGS: dict[str, Callable[[str, str], str]] = {"lmdb": _lmdb_sibling, "postgres": _pg_sibling}
"""Where another store of each kind goes, named ``name``, next to one at a location (the LMDB store: a
directory beside its directory; the PostgreSQL store: a new database)."""


def _remove_lmdb(where: str) -> None:
    shutil.rmtree(where, ignore_errors=True)


def _remove_pg(where: str) -> None:
    """Every row of the store (its tables stay: they are the empty store a new Queue opens)."""
    with pgserver.connect(where) as conn:
        conn.execute("DELETE FROM " + "; DELETE FROM ".join((*_PG_WRITTEN, "qm_counts")))


REMOVERS: dict[str, Callable[[str], None]] = {"lmdb": _remove_lmdb, "postgres": _remove_pg}
"""How each store kind's store is removed, everything of it, once no queue has it open."""


@dataclasses.dataclass(frozen=True)
class StoreLocation:
    """One store, as every process finds it: ``kind`` (a ``store_kind``), ``where`` (the LMDB store's
    directory; a PostgreSQL URL later) and ``options`` (Queue options every opener of it passes, as
    (name, value) pairs of JSON values)."""

    kind: str
    where: str
    options: tuple[tuple[str, Any], ...] = ()

    def open_queue(self, **overrides: Any) -> Queue:
        """A Queue on this store with no background recovery or vacuum (the test decides when those run);
        the location's options, then ``overrides``, on top of that."""
        opener = OPENERS.get(self.kind)
        assert opener is not None, f"no store of kind {self.kind!r}"
        return opener(self.where, self._options(overrides))

    def open_async(self, **overrides: Any) -> AsyncQueue:
        """An AsyncQueue on this store, with the same options as ``open_queue``."""
        opener = ASYNC_OPENERS.get(self.kind)
        assert opener is not None, f"no async opener for a store of kind {self.kind!r}"
        return opener(self.where, self._options(overrides))

    def _options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        options: dict[str, Any] = {"do_recover": False, "do_vacuum": False}
        options |= dict(self.options)
        options |= overrides
        return options

    def exists(self) -> bool:
        """Whether anything of the store was created at this location (a refused Queue(...) creates
        nothing)."""
        return EXISTS[self.kind](self.where)

    def sibling(self, name: str) -> StoreLocation:
        """Another store of the same kind and options, its own (new until opened), named ``name``: for a
        test that needs a fresh store per example or round."""
        return dataclasses.replace(self, where=SIBLINGS[self.kind](self.where, name))

    def remove(self) -> None:
        """Remove the store and everything in it (its queues closed first); nothing if there is none."""
        REMOVERS[self.kind](self.where)

    def with_options(self, **options: Any) -> StoreLocation:
        """The same store, its openers passing ``options`` too."""
        return dataclasses.replace(self, options=tuple((dict(self.options) | options).items()))

    def to_json(self) -> dict[str, Any]:
        return {JSON_TAG: [self.kind, self.where, [list(pair) for pair in self.options]]}


def lmdb_location(path: str | os.PathLike[str]) -> StoreLocation:
    """The location of the LMDB store at ``path`` (for the tests that only make sense on LMDB)."""
    return StoreLocation("lmdb", os.fspath(path))


def as_location(where: StoreLocation | str | os.PathLike[str]) -> StoreLocation:
    """A child's store argument: a ``StoreLocation``, or the path of an LMDB store (the ``lmdb`` tests)."""
    return where if isinstance(where, StoreLocation) else lmdb_location(where)


def encode(value: Any) -> Any:
    """``json.dumps(default=encode)``: a ``StoreLocation`` in a child's arguments."""
    if isinstance(value, StoreLocation):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decode(obj: dict[str, Any]) -> Any:
    """``json.loads(object_hook=decode)``: the ``StoreLocation`` back, in the child."""
    if set(obj) == {JSON_TAG}:
        kind, where, options = obj[JSON_TAG]
        return StoreLocation(kind, where, tuple((name, value) for name, value in options))
    return obj
