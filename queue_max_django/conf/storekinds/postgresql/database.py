"""The Django database a PostgreSQL store lives in: the connection URL of a ``DATABASES`` alias, and the
caller's own connection when a job is to join the caller's transaction.

The engine never imports Django, so this module turns an alias's settings (``NAME``, ``USER``,
``PASSWORD``, ``HOST``, ``PORT``, ``OPTIONS``) into a libpq URL that the engine opens with its own
connections, and hands the engine Django's psycopg connection (``connections[alias].connection``) for a put
that is part of the caller's transaction. psycopg is imported only when a PostgreSQL store is configured.

An alias also says how its connections reach the server: ``DISABLE_SERVER_SIDE_CURSORS``, the setting
Django asks for behind a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``), makes the
store's connections keep no state in a server session either (``alias_pools_transactions``), and
``OPTIONS["prepare_threshold"]``, what Django's connections prepare, is what the store's prepare
(``alias_prepare_threshold``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.db import connections

# Keys of a PostgreSQL alias's OPTIONS that Django or psycopg's connect() reads itself, not libpq: the
# store's connections leave them out (they have their own isolation, cursors and no pool).
NOT_LIBPQ = frozenset(
    {
        "assume_role", "isolation_level", "pool", "server_side_binding",  # Django's PostgreSQL backend
        "autocommit", "context", "cursor_factory", "prepare_threshold", "row_factory",  # psycopg.connect()
    }
)  # fmt: skip


def alias_pools_transactions(alias: str) -> bool:
    """Whether ``DATABASES[alias]`` says its connections go through a pooler in transaction mode: its
    ``DISABLE_SERVER_SIDE_CURSORS`` is true (Django's documented setting for exactly that)."""
    return bool(settings.DATABASES[alias].get("DISABLE_SERVER_SIDE_CURSORS"))


def transaction_pooling(setting: bool | None, alias: str | None) -> bool:
    """``QUEUE_MAX["TRANSACTION_POOLING"]``: as given, or None: from the alias (False with ``URL``)."""
    if setting is not None:
        return setting
    return alias is not None and alias_pools_transactions(alias)


def alias_options(alias: str) -> Mapping[str, Any]:
    """``DATABASES[alias]["OPTIONS"]`` (empty when not set)."""
    database: Mapping[str, Any] = settings.DATABASES[alias]
    return database.get("OPTIONS") or {}


def alias_prepare_threshold(alias: str, default: int | None) -> int | None:
    """``OPTIONS["prepare_threshold"]`` of ``DATABASES[alias]`` (psycopg's: None never prepares), or
    ``default`` when the alias does not set it (or sets what psycopg would refuse)."""
    value = alias_options(alias).get("prepare_threshold", default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return default


def alias_params(alias: str) -> dict[str, Any]:
    """The libpq connection parameters of ``settings.DATABASES[alias]``, as Django's PostgreSQL backend
    connects: ``NAME`` (None: the ``postgres`` database), ``USER``, ``PASSWORD``, ``HOST`` and ``PORT`` when
    set, and the ``OPTIONS`` libpq knows (``sslmode``, ``options``, ``service``, ...)."""
    database: Mapping[str, Any] = settings.DATABASES[alias]
    options = database.get("OPTIONS") or {}
    params: dict[str, Any] = {key: value for key, value in options.items() if key not in NOT_LIBPQ}
    name = database.get("NAME")
    if name:
        params["dbname"] = name
    elif name is None:  # Django's rule: None connects to the "postgres" database, "" leaves it to a service
        params["dbname"] = "postgres"
        params.pop("service", None)
    for key, param in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if database.get(key):
            params[param] = database[key]
    return params


def alias_url(alias: str) -> str:
    """The ``postgresql://`` URL of the database of ``alias`` (``alias_params``), for the engine's own
    connections. A URL rather than ``key=value`` text so that the store shows it without its password
    (``queue_stats``, the worker's log). ``psycopg.ProgrammingError`` names an option libpq does not know."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(make_conninfo("", **alias_params(alias)))  # libpq checks every key
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    credentials = user + ("" if password is None else ":" + quote(str(password), safe=""))
    query = urlencode({key: str(value) for key, value in params.items()}, quote_via=quote)
    return f"postgresql://{credentials}{'@' if credentials else ''}/?{query}"


def psycopg_connection(alias: str) -> Any | None:
    """The psycopg 3 connection of Django's ``alias`` in this thread (connected if it was not), or None
    when Django's backend there does not use psycopg 3 (a custom backend on psycopg2)."""
    import psycopg

    wrapper = connections[alias]
    wrapper.ensure_connection()
    raw = wrapper.connection
    return raw if isinstance(raw, psycopg.Connection) else None


def caller_connection(alias: str | None) -> Any | None:
    """The connection a put joins: Django's psycopg connection of ``alias`` when this thread is inside a
    ``transaction.atomic()`` block on it (the job then commits or rolls back with the caller's writes),
    else None (the store writes on its own connection, in a transaction of its own)."""
    if alias is None or not connections[alias].in_atomic_block:
        return None
    return psycopg_connection(alias)
