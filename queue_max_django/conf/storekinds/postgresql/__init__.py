"""The PostgreSQL store (``STORE = "postgresql"``), its Django side: ``KIND``, this kind of store in
``STORE_KINDS``.

- ``config.py``: ``PostgresConfig``, the settings of its keys, and the URL of its database.
- ``database.py``: the ``DATABASES`` alias it lives in: the alias's URL, and the caller's own connection
  for a put that joins the caller's transaction.
- ``checks.py``: what is wrong with its settings and with the database they point at (E019 to E025).
- ``tables.py``: its tables, made by the migration ``0002_postgres_store`` and upgraded after ``migrate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ....engine import Queue
from ....engine.stores.opening import URL_SCHEMES
from ...defaults import DEFAULTS
from ...problems import PREFIX, Problem, _Number, _number_problems, _wrong_type
from ...teststore import close_before_drop
from ..kind import QueueMaxConfig, StoreKind
from . import checks, database, tables
from .config import postgres_config, store_url

if TYPE_CHECKING:
    from ....engine.stores.postgres.store import PostgresStore

KEYS = ("DATABASE", "URL", "LISTEN", "NOTIFY", "POLL_INTERVAL", "TRANSACTION_POOLING")
# The PostgreSQL store's waits: the longest poll-only sleep; above 1 s it would change nothing (every idle
# wait of the engine is bounded by 1 s, engine/queue.py MAX_IDLE_WAIT).
_POLL_INTERVAL = _Number("seconds", 0.005, 1.0)
_URL = "a postgresql:// or postgres:// URL (str), or None"


def value_problems(values: Mapping[str, Any], base_dir: Any, found: list[Problem]) -> list[Problem]:
    """``found`` and what is wrong with the values of its keys: their types, then (when nothing is wrong so
    far) what ``checks.settings_problems`` finds."""
    found = list(found)
    database = values["DATABASE"]
    if database is not None and (not isinstance(database, str) or not database):
        found.append(_wrong_type(("DATABASE",), database, "a DATABASES alias (a non-empty str), or None"))
    url = values["URL"]
    if url is not None and (not isinstance(url, str) or not url.startswith(URL_SCHEMES)):
        found.append(_wrong_type(("URL",), url, _URL))
    if not isinstance(values["NOTIFY"], bool):
        found.append(_wrong_type(("NOTIFY",), values["NOTIFY"], "True or False"))
    found += [_wrong_type((key,), values[key], "True, False or None")
              for key in ("LISTEN", "TRANSACTION_POOLING")
              if values[key] is not None and not isinstance(values[key], bool)]  # fmt: skip
    found += _number_problems(("POLL_INTERVAL",), values["POLL_INTERVAL"], _POLL_INTERVAL)
    if found:
        return found
    return checks.settings_problems(values)


def foreign_key(key: str, kind: str) -> Problem:
    return Problem(
        f"{PREFIX}.E018",
        f"QUEUE_MAX[{key!r}] is for the PostgreSQL store, but QUEUE_MAX['STORE'] is {kind!r}"
        f"{' (the default)' if kind == DEFAULTS['STORE'] else ''}.",
        f"Set QUEUE_MAX['STORE'] to 'postgresql' to keep the jobs in PostgreSQL, or remove {key}.",
    )


def store_class() -> type[PostgresStore]:
    from ....engine.stores.postgres.store import PostgresStore  # psycopg only for this store

    return PostgresStore


def open_queue(
    config: QueueMaxConfig, options: dict[str, Any], close: Callable[[], None]
) -> tuple[Queue, Any]:
    pg = config.postgres
    assert pg is not None
    joined = caller_connection(config)  # inside atomic() on the alias: the opening runs in the transaction
    store = store_class().open(
        store_url(pg), listen=pg.listen, notify=pg.notify, poll_interval=pg.poll_interval,
        prepare_threshold=pg.prepare_threshold, connection=joined,
    )  # fmt: skip
    try:
        queue = Queue(store, **options)  # none of the LMDB-only options: Queue(store) refuses them
    except BaseException:
        store.close(flush=False)
        raise
    if pg.database is not None:  # in a test run: closed before Django drops its test database
        close_before_drop(pg.database, close)
    return queue, joined


def caller_connection(config: QueueMaxConfig) -> Any | None:
    assert config.postgres is not None
    return None if config.immediate else database.caller_connection(config.postgres.database)


def callers_alias(config: QueueMaxConfig) -> str | None:
    assert config.postgres is not None
    return config.postgres.database


def connection(config: QueueMaxConfig, alias: str) -> Any:
    assert config.postgres is not None
    return tables.store_connection(config.postgres, alias)


KIND = StoreKind(
    name="postgresql",
    summary="'postgresql' (tables in a PostgreSQL database: DATABASE or URL)",
    keys=KEYS,
    value_problems=value_problems,
    foreign_key=foreign_key,
    store_problems=lambda values, base_dir: checks.database_problems(values),
    config=lambda values, base_dir: {"data_dir": None, "postgres": postgres_config(values)},
    store_class=store_class,
    open=open_queue,
    missing=lambda config: None,  # opening never makes its tables
    caller_connection=caller_connection,
    callers_alias=callers_alias,
    connection=connection,
    after_migrate=tables.upgrade_after_migrate,
)
