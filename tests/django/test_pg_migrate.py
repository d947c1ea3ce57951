"""``manage.py migrate`` makes the PostgreSQL store's tables in its database, ``migrate queue_max_django
zero`` drops them, and the migration does nothing anywhere else (other aliases, the LMDB store), without
psycopg."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import override_settings

from queue_max_django.engine.stores.postgres import schema
from tests.pgserver import connect, drop_database, fresh_database

from .pgdjango import ALIAS, ROOT, Configure, alias_settings, database_alias, sql
from .pgdjango import pg_alias as pg_alias
from .pgdjango import pg_store as pg_store

MIGRATION = importlib.import_module("queue_max_django.migrations.0002_postgres_store")


def tables(url: str) -> set[str]:
    """The store's tables in the database at ``url``."""
    rows = sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'qm\\_%'")
    return {row[0] for row in rows}


def version(url: str) -> int | None:
    with contextlib.closing(connect(url)) as conn:
        return schema.version(conn)


def migrate(*args: str, database: str = ALIAS) -> str:
    out = io.StringIO()
    call_command("migrate", *args, database=database, verbosity=1, stdout=out)
    return out.getvalue()


def empty(url: str) -> None:
    with contextlib.closing(connect(url)) as conn:
        schema.drop(conn)
    assert tables(url) == set()


def test_migrate_creates_the_tables_and_zero_drops_them(pg_store: Configure, pg_url: str) -> None:
    empty(pg_url)
    with pg_store():
        out = migrate()
        assert "Applying queue_max_django.0002_postgres_store... OK" in out
        assert tables(pg_url) == set(schema.TABLES)
        assert version(pg_url) == schema.SCHEMA_VERSION
        # 0001 (the model), 0002 (the PostgreSQL store's tables), 0003 (the cancel_job permission), 0004
        # (the pause_queue permission), 0005 (the Schedule model's permissions), 0006 (view_job_payload)
        assert sql(pg_url, "SELECT count(*) FROM django_migrations WHERE app = 'queue_max_django'") == [(6,)]
        assert "No migrations to apply." in migrate()  # and again: nothing to do

        out = migrate("queue_max_django", "zero")

        assert "Unapplying queue_max_django.0002_postgres_store... OK" in out
        assert tables(pg_url) == set() and version(pg_url) is None
        migrate("queue_max_django")  # and back: a store a queue can open
        assert version(pg_url) == schema.SCHEMA_VERSION


def test_a_later_migrate_brings_an_older_or_missing_schema_up_to_this_version(
    pg_store: Configure, pg_url: str
) -> None:
    """Django records 0002 once; the store's own schema version is what ``migrate`` keeps current after it
    (an upgraded release: the version in ``qm_meta`` is older; or the tables were dropped by hand)."""
    empty(pg_url)
    with pg_store():
        migrate()
        sql(pg_url, "UPDATE qm_meta SET value = '0' WHERE key = 'schema_version'")
        assert version(pg_url) == 0
        problems = [message.id for message in run_checks(databases=[ALIAS]) if message.is_serious()]
        assert problems == ["queue_max_django.E023"]

        assert "No migrations to apply." in migrate()  # nothing for Django, the schema for the store

        assert version(pg_url) == schema.SCHEMA_VERSION
        assert [message for message in run_checks(databases=[ALIAS]) if message.is_serious()] == []
        empty(pg_url)
        migrate()
        assert tables(pg_url) == set(schema.TABLES) and version(pg_url) == schema.SCHEMA_VERSION


def test_migrate_of_another_alias_or_the_lmdb_store_makes_no_table(
    pg_alias: str, pg_url: str, tmp_path: Path, django_db_blocker: Any
) -> None:
    empty(pg_url)
    other = fresh_database()
    empty(other)
    try:
        with django_db_blocker.unblock(), database_alias("other", alias_settings(other)):
            with override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": pg_alias}):
                assert "Applying queue_max_django.0002_postgres_store... OK" in migrate(database="other")
            assert tables(other) == set() and tables(pg_url) == set()
            with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "store"}):
                assert "Applying queue_max_django.0002_postgres_store... OK" in migrate(database=pg_alias)
                assert tables(pg_url) == set()
                out = migrate("queue_max_django", "zero", database=pg_alias)
                assert "Unapplying queue_max_django.0002_postgres_store... OK" in out
            assert tables(pg_url) == set() and not (tmp_path / "store").exists()
    finally:
        drop_database(other)


def _editor(alias: str) -> Any:
    return SimpleNamespace(connection=SimpleNamespace(alias=alias))


def test_with_url_the_tables_are_made_when_default_is_migrated(pg_url: str) -> None:
    empty(pg_url)
    create, drop = MIGRATION.Migration.operations[0].code, MIGRATION.Migration.operations[0].reverse_code
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url}):
        create(None, _editor("reports"))  # another alias: nothing
        assert tables(pg_url) == set()
        create(None, _editor("default"))
        assert tables(pg_url) == set(schema.TABLES) and version(pg_url) == schema.SCHEMA_VERSION
        drop(None, _editor("default"))
        assert tables(pg_url) == set()


def test_the_migration_needs_no_psycopg_for_the_lmdb_store(tmp_path: Path) -> None:
    create, drop = MIGRATION.Migration.operations[0].code, MIGRATION.Migration.operations[0].reverse_code
    with pytest.MonkeyPatch.context() as patch, override_settings(QUEUE_MAX={"DATA_DIR": tmp_path}):
        patch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
        for module in [name for name in sys.modules if name.startswith("queue_max_django.migrations")]:
            patch.delitem(sys.modules, module)
        fresh = importlib.import_module("queue_max_django.migrations.0002_postgres_store")
        fresh.Migration.operations[0].code(None, _editor("default"))
        fresh.Migration.operations[0].reverse_code(None, _editor("default"))
        create(None, _editor("default"))
        drop(None, _editor("default"))


def test_the_lmdb_store_never_imports_psycopg(tmp_path: Path) -> None:
    """An LMDB project runs its checks, migrations, enqueues and commands without psycopg installed."""
    code = f"""
import sys
sys.modules["psycopg"] = None  # `import psycopg` raises ImportError
import django
from django.conf import settings
django.setup()
settings.QUEUE_MAX = {{"DATA_DIR": {str(tmp_path / "store")!r}}}
from django.core.checks import run_checks
from django.core.management import call_command
from queue_max_django.conf.checks import check_settings
assert check_settings() == [], check_settings()
call_command("migrate", verbosity=0)
from tests.testapp.tasks import add
add.delay(1, 2)
call_command("queue_check", verbosity=0)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
