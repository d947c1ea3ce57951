"""What is wrong with a PostgreSQL store's settings (``STORE = "postgresql"``) and with the database they
point at: check ids ``queue_max_django.E019`` to ``E025``, ``W003`` and ``W004`` (docs/reference/checks.md).

``settings_problems`` judges the settings alone (checks.py calls it once the keys' types are right): whether
``DATABASE`` names a PostgreSQL alias, whether psycopg is installed, whether what they ask contradicts a
pooler in transaction mode (``TRANSACTION_POOLING``, or the alias's ``DISABLE_SERVER_SIDE_CURSORS``).
``database_problems`` asks the server for the store's schema version (once the settings have no error): it
connects, reads, and creates nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from ....engine.stores.postgres.connection import PREPARE_THRESHOLD, display_url
from ...problems import PREFIX, Problem
from . import database

CHECK_TIMEOUT = 3  # seconds to wait for the server at check time (libpq's connect_timeout: 2 at least)
# Not on the package index: extras come with a checkout or a wheel built from one (docs/quickstart.md).
EXTRA = "pip install '<checkout or wheel>[postgres]' (or psycopg[binary]>=3.2)"


def settings_problems(values: Mapping[str, Any]) -> list[Problem]:
    """Mistakes in the PostgreSQL store's settings ``values`` (``QUEUE_MAX`` merged over the defaults,
    every key of the right type): ``DATABASE`` and ``URL`` both given, psycopg missing, an alias that is not
    in ``DATABASES`` or not a PostgreSQL database."""
    if values["DATABASE"] is not None and values["URL"] is not None:
        return [
            Problem(
                f"{PREFIX}.E019",
                f"QUEUE_MAX has both DATABASE ({values['DATABASE']!r}) and URL: the PostgreSQL store lives "
                f"in one database.",
                "Keep DATABASE to use a DATABASES alias (jobs can then join that alias's transactions), or "
                "URL for a database Django does not use; remove the other.",
            )
        ]
    found = []
    try:
        import psycopg  # noqa: F401
    except ImportError:
        found.append(
            Problem(
                f"{PREFIX}.E020",
                "QUEUE_MAX['STORE'] is 'postgresql', but psycopg 3 is not installed.",
                f"Install the PostgreSQL extra: {EXTRA}.",
            )
        )
    if values["URL"] is None:
        found += _alias_problems(values["DATABASE"] or DEFAULT_DB_ALIAS, psycopg_missing=bool(found))
    return found or _pooling_problems(values)


def _pooling_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What does not work through a pooler in transaction mode, when the settings say the store's
    connections go through one: LISTEN asked for (E025); Django's connection of the alias preparing
    statements (W004: a job enqueued in the caller's transaction runs on it)."""
    alias = None if values["URL"] is not None else (values["DATABASE"] or DEFAULT_DB_ALIAS)
    setting = values["TRANSACTION_POOLING"]
    if not database.transaction_pooling(setting, alias):
        return []
    why = (
        "QUEUE_MAX['TRANSACTION_POOLING'] is True"
        if setting
        else f"DATABASES[{alias!r}] sets DISABLE_SERVER_SIDE_CURSORS, which says its connections go through "
        f"a pooler in transaction mode (QUEUE_MAX['TRANSACTION_POOLING'] is not given, so it follows)"
    )
    found = []
    if values["LISTEN"] is True:
        found.append(
            Problem(
                f"{PREFIX}.E025",
                f"QUEUE_MAX['LISTEN'] is True, but {why}: such a pooler hands the listener's connection "
                f"back to its pool after each transaction, and no notification reaches it.",
                "Remove LISTEN (it is off then: idle workers poll, at most POLL_INTERVAL late); if the "
                "pooler runs in session mode, set QUEUE_MAX['TRANSACTION_POOLING'] to False instead.",
            )
        )
    if alias is not None and _django_prepares(alias):
        found.append(
            Problem(
                f"{PREFIX}.W004",
                f"DATABASES[{alias!r}] binds parameters on the server (OPTIONS 'server_side_binding') "
                f"and so prepares statements, but {why}: PgBouncer in transaction mode loses prepared "
                f"statements (before 1.21, or without max_prepared_statements), and jobs enqueued "
                f"inside a transaction of that alias are written through Django's connection.",
                f"Set DATABASES[{alias!r}]['OPTIONS']['prepare_threshold'] to None, or remove "
                f"'server_side_binding' (the store's own connections prepare nothing here already).",
            )
        )
    return found


def _django_prepares(alias: str) -> bool:
    """Whether Django's connections of ``alias`` prepare statements on the server: with server-side
    binding (psycopg's ``Cursor``; Django's default client-side cursors never prepare), unless its
    ``prepare_threshold`` is None."""
    binds = database.alias_options(alias).get("server_side_binding") is True
    return binds and database.alias_prepare_threshold(alias, PREPARE_THRESHOLD) is not None


def _alias_problems(alias: str, *, psycopg_missing: bool) -> list[Problem]:
    where = f"QUEUE_MAX['DATABASE'] ({alias!r})"
    configured: Mapping[str, Any] = getattr(settings, "DATABASES", {})
    if alias not in configured:
        known = ", ".join(repr(name) for name in configured) or "none"
        return [
            Problem(
                f"{PREFIX}.E021",
                f"{where} is not an alias of DATABASES (it has {known}).",
                "Set QUEUE_MAX['DATABASE'] to the alias of the PostgreSQL database that holds the store, "
                "add that alias to DATABASES, or give QUEUE_MAX['URL'] instead.",
            )
        ]
    engine = str(configured[alias].get("ENGINE", ""))
    if not _is_postgresql(alias, engine):
        return [
            Problem(
                f"{PREFIX}.E022",
                f"{where} is not a PostgreSQL database: its ENGINE is {engine!r}.",
                "Point DATABASE at an alias whose ENGINE is 'django.db.backends.postgresql', or give "
                "QUEUE_MAX['URL'] (a postgresql:// URL), or set QUEUE_MAX['STORE'] back to 'lmdb'.",
            )
        ]
    if psycopg_missing:
        return []
    try:
        database.alias_url(alias)
    except Exception as exc:  # psycopg.ProgrammingError: an option libpq does not know
        return [
            Problem(
                f"{PREFIX}.E022",
                f"{where} cannot be used by the PostgreSQL store: its connection parameters are refused "
                f"({str(exc).strip()}).",
                f"Remove or correct that key of DATABASES[{alias!r}]['OPTIONS']: the store passes NAME, "
                f"USER, PASSWORD, HOST, PORT and the OPTIONS libpq knows to its own connections.",
            )
        ]
    return []


def _is_postgresql(alias: str, engine: str) -> bool:
    """Whether Django's backend of ``alias`` is PostgreSQL (its ``vendor``; from the ENGINE's name when the
    backend cannot be loaded, which is Django's own error to report)."""
    try:
        return connections[alias].vendor == "postgresql"
    except Exception:
        return "postgresql" in engine or "postgis" in engine


def database_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What stands between the database of valid PostgreSQL settings and a store this code can open: its
    tables missing or at another schema version. The server unreachable is a warning (nothing checked)."""
    import psycopg

    from ....engine.stores.postgres import schema

    alias = None if values["URL"] is not None else (values["DATABASE"] or DEFAULT_DB_ALIAS)
    url = values["URL"] if alias is None else database.alias_url(alias)
    where = display_url(url) if alias is None else f"DATABASES[{alias!r}]"
    try:
        with contextlib.closing(psycopg.connect(url, autocommit=True, connect_timeout=CHECK_TIMEOUT)) as conn:
            found = schema.version(conn)
    except psycopg.Error as exc:
        return [
            Problem(
                f"{PREFIX}.W003",
                f"The database of the PostgreSQL store ({where}) cannot be reached: "
                f"{str(exc).strip()}. Whether its tables are migrated was not checked.",
                "Start the server or correct the connection settings; workers and web processes connect "
                "again by themselves once it answers.",
            )
        ]
    command = "manage.py migrate" + ("" if alias in (None, DEFAULT_DB_ALIAS) else f" --database {alias}")
    if found is None or found < schema.SCHEMA_VERSION:
        if _running_migrate():
            return []  # the command that creates or upgrades them
        what = (
            "has no queue_max tables"
            if found is None
            else f"has the queue_max tables at schema version {found}"
        )
        return [
            Problem(
                f"{PREFIX}.E023",
                f"The database of the PostgreSQL store ({where}) {what}; this version of queue_max_django "
                f"needs schema version {schema.SCHEMA_VERSION}.",
                f"Run `{command}`: it creates (or upgrades) the store's tables.",
            )
        ]
    if found > schema.SCHEMA_VERSION:
        return [
            Problem(
                f"{PREFIX}.E024",
                f"The database of the PostgreSQL store ({where}) has the queue_max tables at schema version "
                f"{found}, newer than this version of queue_max_django reads ({schema.SCHEMA_VERSION}).",
                "Upgrade queue_max_django in this project to the version that migrated that database (every "
                "process that uses the store must run the same version).",
            )
        ]
    return []


def _running_migrate() -> bool:
    """Whether this process is ``manage.py migrate`` (``django-admin migrate``, ``python -m django
    migrate``): Django takes the command's name from ``argv[1]``, and migrate runs these checks before it
    creates the tables they look for, so a missing schema must not stop it."""
    return sys.argv[1:2] == ["migrate"]
