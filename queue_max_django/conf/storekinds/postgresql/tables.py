"""The PostgreSQL store's tables from Django: made by the migration ``0002_postgres_store``, dropped by
``migrate queue_max_django zero``, and brought up to this code's schema version after every ``migrate``.

Django runs a migration once per database and records it. The store's schema has a version of its own
(``engine/stores/postgres/schema.py``'s ``SCHEMA_VERSION``, kept in ``qm_meta``): a release whose tables
differ raises it, and ``schema.create`` brings an older schema up. So that ``manage.py migrate`` is always
what E023 says it is, the command that creates or upgrades the tables, ``upgrade_after_migrate`` (Django's
``post_migrate`` signal, through ``conf.upgrade_after_migrate``) runs ``schema.create`` on the store's
database whenever its schema there is missing or older while the migration is recorded as applied; never
after ``migrate queue_max_django zero``, which unapplied it. For the LMDB store, and for any alias but the
store's, nothing happens and psycopg is not imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.recorder import MigrationRecorder

from . import database
from .config import PostgresConfig, store_url

MIGRATION = ("queue_max_django", "0002_postgres_store")
"""The migration that makes the tables: the store's schema is kept up to date where it is applied."""


@contextlib.contextmanager
def store_connection(postgres: PostgresConfig, alias: str) -> Iterator[Any]:
    """A psycopg connection to the store's database when the store lives in (or, with ``URL``, is made with)
    the database of ``alias``; None otherwise (another alias). Django's own connection of the alias when the
    store is there, in its transaction if one is open; else one of its own, committed. (``conf`` reads
    ``postgres``, the settings, only when they name this store: ``conf.store_connection``.)"""
    if alias != (postgres.database or DEFAULT_DB_ALIAS):
        yield None
        return
    import psycopg

    if postgres.database is not None:
        own = database.psycopg_connection(alias)
        if own is not None:
            if not own.autocommit and own.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                # Django's atomic block has sent nothing yet: begin its transaction now, or psycopg's
                # transaction() in schema.create would begin and commit one of its own
                own.execute("SELECT 1")
            yield own
            return
    with contextlib.closing(psycopg.connect(store_url(postgres))) as conn:
        yield conn
        conn.commit()


def create_tables(conn: Any) -> None:
    from ....engine.stores.postgres import schema

    schema.create(conn)


def drop_tables(conn: Any) -> None:
    from ....engine.stores.postgres import schema

    schema.drop(conn)


def upgrade_after_migrate(conn: Any, using: str) -> None:
    """After a ``migrate`` of ``using`` (``post_migrate``, through ``conf.upgrade_after_migrate``), on
    ``conn``, the store's connection there: the store's schema made current (see above)."""
    if MIGRATION not in MigrationRecorder(connections[using]).applied_migrations():
        return  # not migrated there, or just unapplied (``migrate queue_max_django zero``)
    from ....engine.stores.postgres import schema

    found = schema.version(conn)
    if found is None or found < schema.SCHEMA_VERSION:
        schema.create(conn)
