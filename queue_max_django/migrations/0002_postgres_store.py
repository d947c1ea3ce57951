"""The PostgreSQL store's tables (``engine/stores/postgres/schema.py``), made by ``manage.py migrate``.

With ``QUEUE_MAX["STORE"] = "postgresql"``, migrating the store's database creates its tables
(``schema.create``, which also upgrades an older schema) and ``migrate queue_max_django zero`` drops them
with every job in them (``schema.drop``). The store's database is the ``DATABASE`` alias; with ``URL``, the
database that URL names, created when the ``default`` alias is migrated (Django records the migration
there). For any other alias, and for the LMDB store, this migration does nothing: it is recorded, and it
imports no psycopg.

The tables are made through Django's own connection when the store lives in the alias being migrated (in
the migration's transaction: a failed migration leaves no half-made schema), else on a connection of their
own to ``URL`` (``conf/storekinds/postgresql/tables.py``, which also keeps them at this code's schema version
after every later ``migrate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def _run(step_name: str) -> Callable[[StateApps, BaseDatabaseSchemaEditor], None]:
    def operation(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        from queue_max_django.conf import store_connection
        from queue_max_django.conf.storekinds.postgresql import tables

        step: Callable[[Any], None] = getattr(tables, step_name)
        with store_connection(schema_editor.connection.alias) as conn:
            if conn is not None:
                step(conn)

    return operation


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0001_initial")]

    operations = [migrations.RunPython(_run("create_tables"), _run("drop_tables"), elidable=False)]
