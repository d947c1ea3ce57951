"""``StoreKind``: what the Django layer asks of one kind of store (the registry is ``__init__.py``'s)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..problems import Problem

if TYPE_CHECKING:
    from ...engine import Queue
    from ...engine.stores.base import Store
    from .postgresql.config import PostgresConfig


class QueueMaxConfig(Protocol):
    """What the kinds read of ``conf.QueueMaxConfig`` (which imports this module, so the kinds cannot import
    it): the fields every kind's ``config`` makes, and the immediate mode."""

    @property
    def data_dir(self) -> Path | None: ...
    @property
    def shards(self) -> int | None: ...
    @property
    def sync(self) -> bool: ...
    @property
    def immediate(self) -> bool: ...
    @property
    def postgres(self) -> PostgresConfig | None: ...


@dataclass(frozen=True)
class StoreKind:
    """What the Django layer asks of one kind of store. ``values`` is ``QUEUE_MAX`` merged over the
    defaults; ``base_dir`` is the ``BASE_DIR`` setting."""

    name: str
    """The value of ``QUEUE_MAX["STORE"]`` that names it."""
    summary: str
    """It in a few words, for the check of ``STORE`` (E016): ``'lmdb' (the embedded store in ...)``."""
    keys: tuple[str, ...]
    """The ``QUEUE_MAX`` keys that only this kind reads (an error where another kind is chosen)."""
    value_problems: Callable[[Mapping[str, Any], Any, list[Problem]], list[Problem]]
    """``(values, base_dir, found)``: ``found`` (the other kinds' keys that are set) and what is wrong with
    the values of its keys, the values alone (a kind may skip its deeper checks when ``found`` is not
    empty)."""
    foreign_key: Callable[[str, str], Problem]
    """``(key, kind)``: the problem of one of its ``keys`` set while ``STORE`` is ``kind``."""
    store_problems: Callable[[Mapping[str, Any], Any], list[Problem]]
    """``(values, base_dir)``, once the values have no error: what stands between them and a store the
    engine can open (its directory, its database); creates nothing."""
    config: Callable[[Mapping[str, Any], Any], dict[str, Any]]
    """``(values, base_dir)``: its fields of ``QueueMaxConfig``."""
    store_class: Callable[[], type[Store]]
    """The engine's class of it: its capability attributes say what it can do."""
    open: Callable[[QueueMaxConfig, dict[str, Any], Callable[[], None]], tuple[Queue, Any | None]]
    """``(config, options, close)``: a ``Queue`` on the store with the ``Queue`` options, and the caller's
    connection it was opened on (or None); ``close`` forgets and closes it (``conf.reset``)."""
    missing: Callable[[QueueMaxConfig], str | None]
    """Why nothing may be read there: the store the settings name does not exist, and opening it would make
    a new, empty one (``NoStore``'s message); None when it exists or opening makes nothing."""
    caller_connection: Callable[[QueueMaxConfig], Any | None]
    """The caller's connection a job put now joins (its transaction), or None."""
    callers_alias: Callable[[QueueMaxConfig], str | None]
    """The ``DATABASES`` alias whose transactions a put may join, or None."""
    connection: Callable[[QueueMaxConfig, str], contextlib.AbstractContextManager[Any | None]] | None = None
    """``(config, alias)``: a connection to the store where it lives in the database of ``alias`` (the
    migration that makes its tables runs on it), or None there; None: the kind has no tables."""
    after_migrate: Callable[[Any, str], None] | None = None
    """``(connection, alias)``: after every ``migrate`` of ``alias`` (``post_migrate``), on ``connection``."""
