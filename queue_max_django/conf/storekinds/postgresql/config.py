"""The PostgreSQL store's settings (``STORE = "postgresql"``): ``PostgresConfig``, made from ``QUEUE_MAX``,
and the URL of the database they name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS

from ....engine.stores.postgres.connection import PREPARE_THRESHOLD  # (psycopg is not imported by it)
from . import database


@dataclass(frozen=True)
class PostgresConfig:
    """The PostgreSQL store's keys of ``QUEUE_MAX`` (``STORE = "postgresql"``)."""

    database: str | None  # the DATABASES alias (DATABASE, or "default"); None when URL names the database
    url: str | None
    listen: bool
    notify: bool
    poll_interval: float
    transaction_pooling: bool = False  # TRANSACTION_POOLING, or what the alias says (database.py)
    prepare_threshold: int | None = PREPARE_THRESHOLD  # of the store's connections (None: never prepare)


def postgres_config(values: Mapping[str, Any]) -> PostgresConfig:
    """The ``PostgresConfig`` of ``values`` (``QUEUE_MAX`` merged over the defaults, with no error)."""
    url = values["URL"]
    alias = None if url is not None else (values["DATABASE"] or DEFAULT_DB_ALIAS)
    pooling = database.transaction_pooling(values["TRANSACTION_POOLING"], alias)
    if pooling:
        prepare_threshold = None  # a statement prepared in one transaction is gone in the next
    elif alias is not None:
        prepare_threshold = database.alias_prepare_threshold(alias, PREPARE_THRESHOLD)
    else:
        prepare_threshold = PREPARE_THRESHOLD
    return PostgresConfig(
        database=alias,
        url=url,
        listen=(not pooling) if values["LISTEN"] is None else values["LISTEN"],
        notify=values["NOTIFY"],
        poll_interval=float(values["POLL_INTERVAL"]),
        transaction_pooling=pooling,
        prepare_threshold=prepare_threshold,
    )


def store_url(postgres: PostgresConfig) -> str:
    """The connection URL of the PostgreSQL store: ``URL``, or the one of the ``DATABASE`` alias."""
    if postgres.url is not None:
        return postgres.url
    assert postgres.database is not None
    return database.alias_url(postgres.database)
