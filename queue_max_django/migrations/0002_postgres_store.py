"""The PostgreSQL store's tables (``engine/stores/postgres/schema.py``), made by ``manage.py migrate``.

With ``QUEUE_MAX["STORE"] = "postgresql"``, migrating the store's database creates its tables
(``schema.create``, which also upgrades an older schema) and ``migrate queue_max_django zero`` drops them
with every job in them (``schema.drop``). The store's database is the ``DATABASE`` alias; with ``URL``, the
database that URL names, created when the ``default`` alias is migrated (Django records the migration
there). For any other alias, and for the LMDB store, this migration does nothing: it is recorded, and it
imports no psycopg.

The tables are made through Django's own connection when the store lives in the alias being migrated (in
the migration's transaction: a failed migration leaves no half-made schema), else on a connection of their
own to ``URL``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.db import DEFAULT_DB_ALIAS, migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


@contextlib.contextmanager
def _store_connection(alias: str) -> Iterator[Any]:
    """A psycopg connection to the store's database when migrating ``alias`` creates or drops its tables;
    None otherwise (the LMDB store, another alias)."""
    from queue_max_django.defaults import read_settings

    raw, _base_dir = read_settings()
    if not isinstance(raw, Mapping) or raw.get("STORE") != "postgresql":
        yield None  # the LMDB store (or settings that name none: the checks report those)
        return
    from queue_max_django import database
    from queue_max_django.conf import get_config

    postgres = get_config().postgres  # ImproperlyConfigured, naming the check ids, on wrong settings
    assert postgres is not None
    if alias != (postgres.database or DEFAULT_DB_ALIAS):
        yield None
        return
    import psycopg

    from queue_max_django.conf import store_url

    if postgres.database is not None:
        own = database.psycopg_connection(alias)
        if own is not None:
            if not own.autocommit and own.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                # Django's atomic block has sent nothing yet: begin its transaction now, or psycopg's
                # transaction() in schema.create would begin and commit one of its own
                own.execute("SELECT 1")
            yield own  # Django's: in the migration's transaction
            return
    with contextlib.closing(psycopg.connect(store_url(get_config()))) as conn:
        yield conn
        conn.commit()


def _run(step: Callable[[Any], None]) -> Callable[[StateApps, BaseDatabaseSchemaEditor], None]:
    def operation(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        with _store_connection(schema_editor.connection.alias) as conn:
            if conn is not None:
                step(conn)

    return operation


def create_tables(conn: Any) -> None:
    from queue_max_django.engine.stores.postgres import schema

    schema.create(conn)


def drop_tables(conn: Any) -> None:
    from queue_max_django.engine.stores.postgres import schema

    schema.drop(conn)


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0001_initial")]

    operations = [migrations.RunPython(_run(create_tables), _run(drop_tables), elidable=False)]
