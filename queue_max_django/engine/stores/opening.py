"""``open_store``: the store a ``Queue(path_or_store, ...)`` works on.

A ``Queue`` is given a directory (the embedded LMDB store, opened or created there), a ``postgresql://``
URL (the PostgreSQL store in that database, whose tables ``manage.py migrate`` made; psycopg is imported
only then), a ``memory://name`` URL (the in-memory reference store ``name`` of this process, shared by
every Queue of that name; ``memory://``: one of its own), or a store object it uses as it is. The LMDB-only
options (``shards``, ``map_size``, ``map_size_max``, ``writemap``) are refused with the last three: they
describe how to open an LMDB store.
A string that names a database some other way (another URL scheme, a libpq ``key=value`` connection string)
is refused before anything is made, never taken for the name of a directory to create.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from .base import Store
from .lmdb.store import DEFAULT_MAP_SIZE, LmdbStore

__all__ = ["DEFAULT_MAP_SIZE", "LMDB_ONLY", "open_store"]

URL_SCHEMES = ("postgresql://", "postgres://")
"""How a ``Queue`` path names a PostgreSQL database instead of a directory."""
MEMORY_SCHEME = "memory://"
"""How a ``Queue`` path names an in-memory store of this process (``stores/memory``)."""

_OTHER_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_CONNINFO = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|connect_timeout|options)\s*=",
    re.IGNORECASE,
)

LMDB_ONLY = ("shards", "map_size", "map_size_max", "writemap")
"""The Queue options that only say how to open an LMDB store."""


def open_store(
    where: Any,
    *,
    shards: int | None,
    map_size: int,
    map_size_max: int | None,
    sync: bool,
    writemap: bool,
    clock: Callable[[], float] | None,
    rotation: int,
    default_clock: Callable[[], float],
) -> Store:
    """The store at ``where``: a directory (str or path-like) or a store object (``stores/base.Store``).
    ``clock`` is the Queue's, None when it was not given (the store's own, or ``default_clock``)."""
    if isinstance(where, str) and where.startswith(URL_SCHEMES):
        _refuse_lmdb_options(f"the PostgreSQL store at {where.split('@')[-1]!r}", shards, map_size,
                             map_size_max, writemap)  # fmt: skip
        from .postgres.store import PostgresStore  # psycopg only for this store

        return PostgresStore.open(where, clock=clock)
    if isinstance(where, str) and where.startswith(MEMORY_SCHEME):
        _refuse_lmdb_options(f"the memory store {where!r}", shards, map_size, map_size_max, writemap)
        from .memory.store import MemoryStore

        return MemoryStore.open(where.removeprefix(MEMORY_SCHEME), clock=clock or default_clock)
    if isinstance(where, str):
        _refuse_other_databases(where)
    if isinstance(where, (str, os.PathLike)) or not _is_store(where):
        return LmdbStore.open(where, shards=shards, map_size=map_size, map_size_max=map_size_max, sync=sync,
                              writemap=writemap, clock=clock or default_clock, rotation=rotation)  # fmt: skip
    _refuse_lmdb_options(f"the store {where.kind!r} given to Queue() is already open", shards, map_size,
                         map_size_max, writemap)  # fmt: skip
    if clock is not None and clock is not where.clock:
        raise ConfigurationError(
            "the store given to Queue() has its own clock: give clock= to the store, not to the Queue"
        )
    return where  # type: ignore[no-any-return]


def _refuse_other_databases(where: str) -> None:
    """A URL of another scheme, or a libpq connection string: a mistake, not a directory's name."""
    other = _OTHER_URL.match(where)
    if other:
        raise ConfigurationError(
            "Queue() opens a directory (the LMDB store), a postgresql:// URL or a memory:// URL, "
            f"not a {other.group(1)}:// URL"
        )
    if _CONNINFO.match(where):  # its password is not repeated in the message
        raise ConfigurationError(
            "Queue() was given a libpq key=value connection string: give the PostgreSQL store a URL, "
            "postgresql://user:password@host:port/dbname (or a directory for the LMDB store)"
        )


def _refuse_lmdb_options(
    what: str, shards: int | None, map_size: int, map_size_max: int | None, writemap: bool
) -> None:
    given = {"shards": shards is not None, "map_size": map_size != DEFAULT_MAP_SIZE,
             "map_size_max": map_size_max is not None, "writemap": bool(writemap)}  # fmt: skip
    refused = [name for name in LMDB_ONLY if given[name]]
    if refused:
        raise ConfigurationError(
            f"{', '.join(refused)} only say how to open an LMDB store in a directory; {what}: leave them out"
        )


def _is_store(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("kind", "clock", "enqueue", "claim", "hints"))
