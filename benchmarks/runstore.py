"""The store a benchmark run puts its jobs in (``--store``, ``--url``): shared by chaos.py and soak.py.

- ``lmdb`` (the default): an LMDB store in ``<run folder>/store``.
- ``postgresql``: the PostgreSQL store in a new database ``qm_bench_<pid>`` with the queue_max schema, on the
  server of ``--url`` (a database URL whose user may create databases; the scratch database is dropped at
  the end), or, without ``--url``, on a throwaway cluster the run starts itself from the installed server
  binaries, as tests/pgserver.py does (``Cluster``), but durable as a production server is: ``fsync``,
  ``full_page_writes`` and ``synchronous_commit`` on. Only that cluster can be restarted by the run
  (``restart``: ``pg_ctl restart -m immediate`` is a crash of every server process); it is stopped and
  removed at the end, or by its watchdog if the run is killed.

The run's subprocesses (``queue_worker``, producers) find the store through the environment (``env``):
tests/chaos/settings.py reads ``QUEUE_MAX_CHAOS_URL`` (``URL_ENV``), else ``QUEUE_MAX_CHAOS_DIR``'s store.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from tests.pgserver import Cluster, PgUnavailable, connect, find_bindir

URL_ENV = "QUEUE_MAX_CHAOS_URL"
KINDS = ("lmdb", "postgresql")
SHOWN = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "autovacuum", "shared_buffers")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", choices=KINDS, default="lmdb", help="the store the jobs go in")
    parser.add_argument(
        "--url",
        help="with --store postgresql: a server's database URL whose user may create databases (a scratch "
        "database is made there and dropped after); default: a throwaway durable cluster started by the run",
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the throwaway cluster (e.g. autovacuum=off); repeat for several",
    )


def target_from_env(folder: Path) -> str | Path:
    """What a run's subprocess opens its ``Queue`` on: the PostgreSQL URL of the run, or its LMDB store."""
    return os.environ.get(URL_ENV) or folder / "store"


@dataclass
class RunStore:
    """One run's store: ``target`` is what ``Queue()`` opens (a folder or a URL)."""

    kind: str
    target: str | Path
    cluster: Cluster | None = None  # the throwaway cluster, when the run started one
    admin_url: str | None = None  # the server's URL the scratch database was made from (dropped at close)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """What the run's subprocesses need in their environment besides the chaos folder."""
        return {URL_ENV: str(self.target)} if self.kind == "postgresql" else {}

    @property
    def restartable(self) -> bool:
        return self.cluster is not None

    def queue(self, **options: Any) -> Any:
        """A ``Queue`` on the store without background recovery or vacuum: the workers do that."""
        from queue_max_django.engine import Queue

        return Queue(self.target, do_recover=False, do_vacuum=False, **options)

    def restart(self, mode: str) -> float:
        """``pg_ctl restart -m mode`` of the run's own cluster, until it accepts connections. -> seconds."""
        import time

        assert self.cluster is not None, "only a cluster the run started can be restarted"
        began = time.time()
        self.cluster.restart(mode)
        ended = time.time()
        self.restarts.append({"mode": mode, "began": began, "ended": ended})
        return ended - began

    def server_settings(self) -> dict[str, str]:
        """The PostgreSQL server's settings that decide durability and speed ({} for LMDB)."""
        if self.kind != "postgresql":
            return {}
        with contextlib.closing(connect(str(self.target))) as conn:
            return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in SHOWN}

    def describe(self) -> str:
        if self.kind == "lmdb":
            return f"LMDB store {self.target}"
        where = "a throwaway durable cluster" if self.cluster is not None else "the server of --url"
        settings = ", ".join(f"{k} {v}" for k, v in self.server_settings().items())
        return f"PostgreSQL store in {where} ({settings})"

    def close(self) -> None:
        if self.admin_url is not None:
            from psycopg import sql

            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(dbname(self.target))
            )
            with contextlib.suppress(Exception), contextlib.closing(connect(self.admin_url)) as conn:
                conn.execute(drop)
        if self.cluster is not None:
            self.cluster.stop()


@contextlib.contextmanager
def open_store(
    kind: str, folder: Path, url: str | None = None, *, fsync: bool = True, settings: Sequence[str] = ()
) -> Iterator[RunStore]:
    """The run's store (see the module's docstring), closed at the end. ``fsync`` and ``settings`` are
    for the throwaway cluster (the CI-sized chaos test turns fsync off, as the other tests do)."""
    if kind == "lmdb":
        yield RunStore("lmdb", folder / "store")
        return
    if kind != "postgresql":
        raise ValueError(f"--store must be one of {KINDS}, not {kind!r}")
    cluster = None
    if url is None:
        bindir = find_bindir()
        if bindir is None:
            raise PgUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found: give --url instead")
        cluster = Cluster(bindir)
        url = cluster.start(durable=True, fsync=fsync, settings=settings)
    store = RunStore("postgresql", "", cluster=cluster)
    try:
        store.target = scratch_database(url, f"qm_bench_{os.getpid()}")
        store.admin_url = url if cluster is None else None  # a cluster goes whole
        yield store
    finally:
        store.close()


def scratch_database(url: str, name: str) -> str:
    """A new database ``name`` on the server of ``url`` (dropped first if it is there), with the queue_max
    schema. -> its URL."""
    from psycopg import sql

    from queue_max_django.engine.stores.postgres import schema

    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise SystemExit(f"--url must be a postgresql:// URL: {url!r}")
    with contextlib.closing(connect(url)) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    made = urlunsplit(parts._replace(path="/" + quote(name)))
    with contextlib.closing(connect(made)) as conn:
        schema.create(conn)
    return made


def dbname(url: str | Path) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(str(url))["dbname"])
