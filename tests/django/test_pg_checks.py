"""The system checks of the PostgreSQL store (E016-E024, W003; docs/reference/checks.md), each against its
exact output, each firing for its mistake and not otherwise; and the config they let through."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from queue_max_django.conf import get_config
from queue_max_django.conf.checks import check_settings
from queue_max_django.conf.storekinds.postgresql.config import PostgresConfig
from queue_max_django.engine.stores.postgres import schema

from .pgdjango import ALIAS, Configure, alias_settings, database_alias, sql
from .pgdjango import pg_alias as pg_alias
from .pgdjango import pg_store as pg_store

ID = "queue_max_django."


def run(**queue_max: Any) -> list[Any]:
    with override_settings(QUEUE_MAX=queue_max):
        return check_settings()


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


# ------------------------------------------------------------------------------------- settings alone


def test_valid_postgres_settings_give_no_message(pg_store: Configure, pg_url: str) -> None:
    every = {
        "LISTEN": False,
        "NOTIFY": False,
        "POLL_INTERVAL": 0.25,
        "LEASE_TIME": 10,
        "ENQUEUE_ON_COMMIT": True,
    }
    with pg_store(**every):
        assert check_settings() == []
        assert get_config().postgres == PostgresConfig(ALIAS, None, False, False, 0.25)
        assert (get_config().store, get_config().data_dir) == ("postgresql", None)
    assert run(STORE="postgresql", URL=pg_url) == []


def test_the_default_store_is_lmdb_and_unchanged(tmp_path: Path) -> None:
    assert run(DATA_DIR=tmp_path, STORE="lmdb") == []
    with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path}):
        config = get_config()
    assert (config.store, config.postgres, config.data_dir) == ("lmdb", None, tmp_path)


@pytest.mark.parametrize("value", ["redis", "LMDB", "", 5, None])
def test_e016_unknown_store(value: Any) -> None:
    assert run(STORE=value) == [
        Error(
            f"QUEUE_MAX['STORE'] must be 'lmdb' or 'postgresql', not {value!r}.",
            hint="Set STORE to 'lmdb' (the embedded store in DATA_DIR, the default) or 'postgresql' "
            "(tables in a PostgreSQL database: DATABASE or URL), or remove it.",
            id=ID + "E016",
        )
    ]


@pytest.mark.parametrize(("key", "value"), [("DATA_DIR", "/srv/jobs"), ("SHARDS", 4), ("SYNC", False)])
def test_e017_lmdb_keys_with_postgresql(pg_url: str, key: str, value: Any) -> None:
    assert run(STORE="postgresql", URL=pg_url, **{key: value}) == [
        Error(
            f"QUEUE_MAX[{key!r}] is for the LMDB store, but QUEUE_MAX['STORE'] is 'postgresql'.",
            hint=f"Remove {key}: the PostgreSQL store keeps its jobs in the database that DATABASE or URL "
            f"names, and DATA_DIR, SHARDS and SYNC do not apply to it (its durability is PostgreSQL's "
            f"synchronous_commit).",
            id=ID + "E017",
        )
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("DATABASE", "default"),
        ("URL", "postgresql:///x"),
        ("LISTEN", True),
        ("NOTIFY", False),
        ("POLL_INTERVAL", 1),
    ],
)
def test_e018_postgresql_keys_with_lmdb(tmp_path: Path, key: str, value: Any) -> None:
    assert run(DATA_DIR=tmp_path, **{key: value}) == [
        Error(
            f"QUEUE_MAX[{key!r}] is for the PostgreSQL store, but QUEUE_MAX['STORE'] is 'lmdb' "
            f"(the default).",
            hint=f"Set QUEUE_MAX['STORE'] to 'postgresql' to keep the jobs in PostgreSQL, or remove {key}.",
            id=ID + "E018",
        )
    ]
    assert ids(run(DATA_DIR=tmp_path, STORE="lmdb", **{key: value})) == [ID + "E018"]


def test_e019_database_and_url(pg_url: str) -> None:
    assert run(STORE="postgresql", DATABASE="default", URL=pg_url) == [
        Error(
            "QUEUE_MAX has both DATABASE ('default') and URL: the PostgreSQL store lives in one database.",
            hint="Keep DATABASE to use a DATABASES alias (jobs can then join that alias's transactions), or "
            "URL for a database Django does not use; remove the other.",
            id=ID + "E019",
        )
    ]


def test_e020_psycopg_missing(pg_store: Configure, pg_url: str) -> None:
    expected = Error(
        "QUEUE_MAX['STORE'] is 'postgresql', but psycopg 3 is not installed.",
        hint="Install the PostgreSQL extra: "
        "pip install '<checkout or wheel>[postgres]' (or psycopg[binary]>=3.2).",
        id=ID + "E020",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "psycopg", None)  # `import psycopg` raises ImportError
        with pg_store():
            assert check_settings() == [expected]
            with pytest.raises(ImproperlyConfigured, match="E020: QUEUE_MAX"):
                get_config()
        assert run(STORE="postgresql", URL=pg_url) == [expected]


def test_e021_alias_not_in_databases() -> None:
    assert run(STORE="postgresql", DATABASE="jobs") == [
        Error(
            "QUEUE_MAX['DATABASE'] ('jobs') is not an alias of DATABASES (it has 'default').",
            hint="Set QUEUE_MAX['DATABASE'] to the alias of the PostgreSQL database that holds the store, "
            "add that alias to DATABASES, or give QUEUE_MAX['URL'] instead.",
            id=ID + "E021",
        )
    ]


def test_e022_alias_not_postgresql() -> None:
    """The tests' default database is SQLite: DATABASE defaults to 'default'."""
    assert run(STORE="postgresql") == [
        Error(
            "QUEUE_MAX['DATABASE'] ('default') is not a PostgreSQL database: its ENGINE is "
            "'django.db.backends.sqlite3'.",
            hint="Point DATABASE at an alias whose ENGINE is 'django.db.backends.postgresql', or give "
            "QUEUE_MAX['URL'] (a postgresql:// URL), or set QUEUE_MAX['STORE'] back to 'lmdb'.",
            id=ID + "E022",
        )
    ]


def test_e022_options_libpq_refuses(pg_url: str, django_db_blocker: Any) -> None:
    entry = {**alias_settings(pg_url), "OPTIONS": {"sslmode": "disable", "no_such_option": "1"}}
    with django_db_blocker.unblock(), database_alias("odd", entry):
        assert run(STORE="postgresql", DATABASE="odd") == [
            Error(
                "QUEUE_MAX['DATABASE'] ('odd') cannot be used by the PostgreSQL store: its connection "
                'parameters are refused (invalid connection option "no_such_option").',
                hint="Remove or correct that key of DATABASES['odd']['OPTIONS']: the store passes NAME, "
                "USER, PASSWORD, HOST, PORT and the OPTIONS libpq knows to its own connections.",
                id=ID + "E022",
            )
        ]
        # What Django's backend or psycopg.connect() read themselves is left out, not refused
        entry["OPTIONS"] = {
            "isolation_level": 1,
            "pool": False,
            "prepare_threshold": None,
            "sslmode": "disable",
        }
        assert run(STORE="postgresql", DATABASE="odd") == []


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"DATABASE": 5},
            "QUEUE_MAX['DATABASE'] must be a DATABASES alias (a non-empty str), or None, not 5 (int).",
        ),
        (
            {"DATABASE": ""},
            "QUEUE_MAX['DATABASE'] must be a DATABASES alias (a non-empty str), or None, not '' (str).",
        ),
        (
            {"URL": "mysql://db/x"},
            "QUEUE_MAX['URL'] must be a postgresql:// or postgres:// URL (str), or None, not "
            "'mysql://db/x' (str).",
        ),
        ({"LISTEN": "no"}, "QUEUE_MAX['LISTEN'] must be True, False or None, not 'no' (str)."),
        ({"NOTIFY": 0}, "QUEUE_MAX['NOTIFY'] must be True or False, not 0 (int)."),
        ({"POLL_INTERVAL": "1"}, "QUEUE_MAX['POLL_INTERVAL'] must be a number of seconds, not '1' (str)."),
    ],
)
def test_e003_postgres_keys_of_the_wrong_type(keys: dict[str, Any], message: str) -> None:
    found = run(STORE="postgresql", **keys)
    assert ids(found) == [ID + "E003"] and found[0].msg == message


@pytest.mark.parametrize("value", [0, 0.001, 1.5, float("inf")])
def test_e004_poll_interval_out_of_range(pg_url: str, value: float) -> None:
    found = run(STORE="postgresql", URL=pg_url, POLL_INTERVAL=value)
    assert ids(found) == [ID + "E004"]
    assert found[0].msg == f"QUEUE_MAX['POLL_INTERVAL'] must be from 0.005 to 1, not {value!r}."


# ------------------------------------------------------------------------------------- the database


def test_e023_no_tables_names_migrate(
    pg_store: Configure, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg_store():
        with _connected(pg_url) as conn:
            schema.drop(conn)
        assert check_settings() == [
            Error(
                f"The database of the PostgreSQL store (DATABASES[{ALIAS!r}]) has no queue_max tables; this "
                f"version of queue_max_django needs schema version {schema.SCHEMA_VERSION}.",
                hint=f"Run `manage.py migrate --database {ALIAS}`: it creates (or upgrades) the store's "
                f"tables.",
                id=ID + "E023",
            )
        ]
        monkeypatch.setattr(sys, "argv", ["manage.py", "migrate", "--database", ALIAS])
        assert check_settings() == []  # migrate itself is not stopped: it makes them
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": pg_url}):
        monkeypatch.setattr(sys, "argv", ["manage.py", "check"])
        found = check_settings()
    assert ids(found) == [ID + "E023"] and "Run `manage.py migrate`:" in found[0].hint
    assert "(postgresql://postgres@/" in found[0].msg  # the URL's database, shown without a password


def test_e023_older_schema_and_e024_newer(pg_store: Configure, pg_url: str) -> None:
    with pg_store():
        sql(
            pg_url,
            "UPDATE qm_meta SET value = %s WHERE key = 'schema_version'",
            (str(schema.SCHEMA_VERSION - 1),),
        )
        assert ids(check_settings()) == [ID + "E023"]
        assert f"at schema version {schema.SCHEMA_VERSION - 1};" in check_settings()[0].msg
        sql(
            pg_url,
            "UPDATE qm_meta SET value = %s WHERE key = 'schema_version'",
            (str(schema.SCHEMA_VERSION + 1),),
        )
        assert check_settings() == [
            Error(
                f"The database of the PostgreSQL store (DATABASES[{ALIAS!r}]) has the queue_max tables at "
                f"schema version {schema.SCHEMA_VERSION + 1}, newer than this version of queue_max_django "
                f"reads ({schema.SCHEMA_VERSION}).",
                hint="Upgrade queue_max_django in this project to the version that migrated that database "
                "(every process that uses the store must run the same version).",
                id=ID + "E024",
            )
        ]
        sql(
            pg_url,
            "UPDATE qm_meta SET value = %s WHERE key = 'schema_version'",
            (str(schema.SCHEMA_VERSION),),
        )
        assert check_settings() == []


def test_w003_server_unreachable_is_a_warning() -> None:
    found = run(STORE="postgresql", URL="postgresql://queue:secret@127.0.0.1:1/jobs")
    assert ids(found) == [ID + "W003"] and isinstance(found[0], Warning)
    assert found[0].msg.startswith(
        "The database of the PostgreSQL store (postgresql://queue:***@127.0.0.1:1/jobs) cannot be reached: "
    )
    assert found[0].msg.endswith(". Whether its tables are migrated was not checked.")
    assert "secret" not in found[0].msg
    assert found[0].hint == (
        "Start the server or correct the connection settings; workers and web processes connect again by "
        "themselves once it answers."
    )
    with override_settings(QUEUE_MAX={"STORE": "postgresql", "URL": "postgresql://queue@127.0.0.1:1/jobs"}):
        assert get_config().postgres is not None  # a warning does not stop the config


class _connected:
    def __init__(self, url: str) -> None:
        from tests.pgserver import connect

        self.conn = connect(url)

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()
