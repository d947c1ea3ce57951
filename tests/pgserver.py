"""A PostgreSQL server for the tests, and a database per test: a pytest plugin (``tests/conftest.py`` loads
it) whose helpers also work without pytest, in the child processes of multi-process tests.

Where the server comes from, in this order (``server()``):

1. A child process of a test session uses its parent's server and template (``SESSION_ENV``, set by the
   parent and inherited), so ``fresh_database()`` in a child makes its database where the parent's live.
2. ``QUEUE_MAX_TEST_DATABASE_URL`` (a conninfo URL of a database on a server where the user may create
   databases): used as it is; the session makes every database it needs there under its own prefix
   (``qm_<tag>_``) and drops them at the end, so several sessions can share one server.
3. Otherwise a throwaway cluster from the installed binaries (``pg_config --bindir``, then ``initdb`` on
   ``PATH``, then ``/usr/lib/postgresql/*/bin``): ``initdb -A trust -E UTF8 --no-sync`` into a new
   directory of ``/tmp`` (run as the ``postgres`` user when the tests run as root: initdb refuses root),
   started with fsync and full page writes off and a Unix socket only (``listen_addresses=''``, the socket
   in that directory: no port to clash with), stopped with ``pg_ctl stop -m immediate`` at the end. A small
   watchdog process stops it too if the session is killed, so no cluster outlives its session.

There is deliberately no further fallback to a server that happens to run on ``127.0.0.1:5432``: the tests
create and drop databases, and do that only on a server someone named. When no server can be had, every
test that needs one (the ``pg_server`` and ``pg_url`` fixtures; such tests get the ``postgres`` marker) is
skipped with a reason that says how to enable it, except under CI (``CI`` set, and not to ``0``/``false``):
there it fails, so a green CI always means the PostgreSQL tests ran.

Isolation per test (``pg_url``): one database per session, emptied after each test, rather than a new
database per test from a template. Measured here (2 cores shared with other work; the median of 40
cycles, twice; each cycle: get a database, connect and write a few rows as a test would, clean up):

=====================================================  =========================
``CREATE DATABASE t TEMPLATE tpl`` + ``DROP DATABASE``   72 ms and 223 ms
one database, ``TRUNCATE`` of every table                65 ms and 95 ms
one database, ``DELETE FROM`` every table (this)         20 ms and 27 ms
=====================================================  =========================

(``CREATE DATABASE`` copies the template's 8 MB; ``DROP DATABASE`` waits, in 100 ms steps, for the test's
just-closed backends to exit; ``TRUNCATE`` makes new files for every table. Of the 20 ms of ``DELETE``, 8
are the connection.) So after each test its database is emptied: any connection the test left open is
ended first (a leftover transaction must not hold locks into the next test), then every table is emptied
with ``DELETE`` (one that held many rows is vacuumed too), every sequence restarted, and ``schema.create``
puts the schema version and the flow row back. A database whose relations are not the template's any more
(a test dropped or changed them, or its schema version) is dropped instead, and the next test gets a fresh
one from the template. ``fresh_database()`` always makes a new one from the template (for a child process,
or a test that needs two stores). What this costs in isolation: a store a test forgot to close, whose
threads reconnect later, would write into a later test's database (with a database per test it would
fail); tests close what they open, and the fixtures that open stores close them.

The template database is created with an ICU ``en-US`` collation when the server has ICU, as most
production databases sort text by a language's rules: an ``ORDER BY`` on text that forgot ``COLLATE "C"``
then sorts differently from the LMDB store (byte order) and a test sees it.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

ENV_URL = "QUEUE_MAX_TEST_DATABASE_URL"
SESSION_ENV = "QUEUE_MAX_TEST_PG_SESSION"  # set by a session for its child processes: JSON
PORT = 5432  # the throwaway cluster's (its socket's name; it listens on no TCP port)
START_TIMEOUT = 30.0
LOCAL_SERVER = ("127.0.0.1", 5432)
MANY_ROWS = 5000  # a table emptied of more rows than this is vacuumed too, so the next test walks no husks
HOW_TO_ENABLE = (
    f"set {ENV_URL} to a PostgreSQL database URL whose user may create databases "
    "(e.g. postgresql://postgres@127.0.0.1:5432/postgres), or install PostgreSQL's server binaries "
    "(initdb, pg_ctl; Debian: apt-get install postgresql) so that the tests start their own"
)


class PgUnavailable(Exception):
    """No PostgreSQL server can be had; the message says why and how to enable the tests."""


def in_ci() -> bool:
    """Whether these tests run under CI (``CI`` set to anything but empty, ``0``, ``false`` or ``no``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise PgUnavailable(f"psycopg 3 is not installed (uv sync installs it); {HOW_TO_ENABLE}") from None
    return psycopg


def connect(url: str) -> Any:
    """A new autocommit psycopg connection to ``url`` (the caller closes it)."""
    return _psycopg().connect(url, autocommit=True, connect_timeout=10)


def connections_to(url: str, application_name: str = "queue_max") -> int:
    """The connections to the database of ``url`` whose ``application_name`` is that (the store's own by
    default), counted on the server (``pg_stat_activity``)."""
    with contextlib.closing(connect(server().url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (dbname_of(url), application_name),
        ).fetchone()
    return int(row[0])


def database_url(base: str, dbname: str) -> str:
    """``base`` (a URL or a key=value conninfo) naming the database ``dbname`` instead."""
    if re.match(r"postgres(ql)?://", base):
        return urlunsplit(urlsplit(base)._replace(path="/" + quote(dbname)))
    from psycopg.conninfo import make_conninfo

    return str(make_conninfo(base, dbname=dbname))


def dbname_of(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url)["dbname"])


def _ident(name: str) -> str:
    assert re.fullmatch(r"[a-z0-9_]+", name), name  # every name here is made by this module
    return name


# ---------------------------------------------------------------------------------------------- the cluster

_WATCHDOG = """
import json, shutil, subprocess, sys
stop, root = json.loads(sys.argv[1])
sys.stdin.read()  # returns when the session closes the pipe: on purpose, or because it died
subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
shutil.rmtree(root, ignore_errors=True)
"""


def find_bindir() -> Path | None:
    """The directory of the server binaries (``initdb``, ``pg_ctl``), or None."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            candidates.append(out.stdout.strip())
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=lambda p: [int(x) for x in re.findall(r"\d+", p)], reverse=True)
    for candidate in candidates:
        path = Path(candidate)
        if candidate and (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


class Cluster:
    """A throwaway PostgreSQL cluster in a new directory, reachable by its Unix socket only (unless
    ``start(listen=...)`` names TCP addresses too). ``netns``: a network namespace (``ip netns``) that the
    server runs in, as on a machine of its own (benchmarks/multihost.py); its Unix socket, a file, is reached
    from anywhere."""

    def __init__(self, bindir: Path, *, netns: str | None = None) -> None:
        self.bindir = bindir
        self.netns = netns
        self.root = Path(tempfile.mkdtemp(prefix="qm-pg-", dir="/tmp" if os.path.isdir("/tmp") else None))
        self.data = self.root / "data"
        self.log = self.root / "log"
        self.prefix: list[str] = []  # how commands run as the cluster's owner
        self._options = ""  # the server's settings (-o of pg_ctl), set by start()
        self._watchdog: subprocess.Popen[bytes] | None = None

    def _tool(self, name: str) -> str:
        found = self.bindir / name
        return str(found) if found.is_file() else (shutil.which(name) or name)

    def _as_owner(self) -> None:
        if self.netns is not None:
            self.prefix = ["ip", "netns", "exec", self.netns]
        if os.geteuid() != 0:
            return
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PgUnavailable(f"initdb refuses to run as root and runuser is missing; {HOW_TO_ENABLE}")
        for user in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                entry = pwd.getpwnam(user)
                os.chown(self.root, entry.pw_uid, entry.pw_gid)
                self.prefix += [runuser, "-u", user, "--"]
                return
        raise PgUnavailable(f"initdb refuses to run as root and there is no postgres user; {HOW_TO_ENABLE}")

    def _run(self, what: str, *args: str) -> None:
        done = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise PgUnavailable(
                f"the throwaway PostgreSQL cluster did not start ({what} exited {done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-2000:]} {log}; {HOW_TO_ENABLE}"
            )

    def start(
        self,
        *,
        durable: bool = False,
        fsync: bool = False,
        settings: Sequence[str] = (),
        listen: str = "",
        hba: tuple[str, ...] = (),
    ) -> str:
        """Make and start the cluster. -> the URL of its ``postgres`` database (by its Unix socket).
        ``durable``: every commit's WAL is written before the commit returns (``synchronous_commit=on``), so
        that a commit survives a crash of the server's processes (``restart()``; the OS keeps what was
        written: fsync stays off). ``fsync``: also flush every write to disk (``fsync`` and
        ``full_page_writes`` on), as a production server does, for benchmarks (benchmarks/runstore.py).
        ``settings``: more ``name=value`` server settings. ``listen``: the server's ``listen_addresses``
        (none by default); ``hba``: lines added to its ``pg_hba.conf`` (e.g. ``host all all 10.213.0.0/16
        trust``)."""
        try:
            self._as_owner()
            self._run(
                "initdb", self._tool("initdb"), "-D", str(self.data), "-A", "trust", "-E", "UTF8",
                "--no-sync", "-U", "postgres", "--locale=C",
            )  # fmt: skip
            if hba:
                with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as conf:
                    conf.write("".join(f"{line}\n" for line in hba))
            stop = [*self.prefix, self._tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
            self._watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, json.dumps([stop, str(self.root)])],
                stdin=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C of the session must not kill it before it stops the server
            )
            flush = "on" if fsync else "off"
            self._options = (
                f"-c fsync={flush} -c synchronous_commit={'on' if durable else 'off'} "
                f"-c full_page_writes={flush} -c listen_addresses='{listen}' -c port={PORT} -k {self.root} "
                f"-c max_connections=200"
            ) + "".join(f" -c {setting}" for setting in settings)
            self._pg_ctl("start")
        except BaseException:
            self.stop()
            raise
        return f"postgresql://postgres@/postgres?host={quote(str(self.root), safe='')}&port={PORT}"

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m mode``: ``immediate`` ends every server process at once, as a crash does (the
        server recovers from its WAL on start); every client connection is broken."""
        self._pg_ctl("restart", "-m", mode)

    def halt(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``), keeping its data: ``resume()`` starts it again."""
        self._run("pg_ctl stop", self._tool("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self._pg_ctl("start")

    def _pg_ctl(self, action: str, *args: str) -> None:
        self._run(
            f"pg_ctl {action}", self._tool("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-t", str(int(START_TIMEOUT)), "-o", self._options, *args, action,
        )  # fmt: skip
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            ready = subprocess.run(
                [self._tool("pg_isready"), "-q", "-h", str(self.root), "-p", str(PORT), "-t", "1"],
                capture_output=True,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PgUnavailable(f"the throwaway PostgreSQL cluster did not become ready; {HOW_TO_ENABLE}")
            time.sleep(0.05)

    def stop(self) -> None:
        """``pg_ctl stop -m immediate`` and remove the directory (the watchdog does both, now)."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        try:
            watchdog.wait(90)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()


# ---------------------------------------------------------------------------------------------- the server


class PgServer:
    """A server the tests may make databases on: ``url`` is its maintenance database's; every database made
    here is named ``qm_<tag>_...``, from the template ``qm_<tag>_tpl`` that holds the schema."""

    def __init__(self, url: str, tag: str, *, cluster: Cluster | None = None, owner: bool = True) -> None:
        self.url = url
        self.tag = tag
        self.template = f"qm_{tag}_tpl"
        self.cluster = cluster
        self.owner = owner  # this process made the template and drops everything at the end
        self._pool: list[str] = []  # emptied databases, ready for the next test
        self._lock = threading.Lock()
        self._admin: Any = None

    def admin(self) -> Any:
        """This process's connection to the maintenance database (opened once)."""
        if self._admin is None or self._admin.closed:
            self._admin = connect(self.url)
        return self._admin

    def make_template(self) -> None:
        from queue_max_django.engine.stores.postgres import schema

        admin = self.admin()
        name = _ident(self.template)
        try:
            admin.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu "
                f"ICU_LOCALE 'en-US' LOCALE 'C'"
            )
        except _psycopg().Error:  # no ICU, or a server older than 15
            admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
        with contextlib.closing(connect(database_url(self.url, name))) as conn:
            schema.create(conn)

    def database_url(self, name: str) -> str:
        return database_url(self.url, name)

    def fresh_database(self) -> str:
        """A new database with the schema and nothing else. -> its URL."""
        name = _ident(f"qm_{self.tag}_{secrets.token_hex(4)}")
        self.admin().execute(f"CREATE DATABASE {name} TEMPLATE {_ident(self.template)}")
        return self.database_url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (one made here), ending the connections still open to it."""
        name = _ident(dbname_of(url))
        assert name.startswith(f"qm_{self.tag}_"), name
        self.admin().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    # -- the per-test databases: lent, emptied, lent again

    def lend(self) -> str:
        with self._lock:
            if self._pool:
                return self._pool.pop()
        return self.fresh_database()

    def give_back(self, url: str) -> None:
        """Empty the database of a finished test for the next one; drop it if it cannot be trusted."""
        try:
            emptied = self._empty(url)
        except _psycopg().Error:
            emptied = False
        if emptied:
            with self._lock:
                self._pool.append(url)
        else:
            self.drop_database(url)

    def _empty(self, url: str) -> bool:
        from queue_max_django.engine.stores.postgres import schema

        name = dbname_of(url)
        self.admin().execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
            "pg_backend_pid()",
            (name,),
        )
        with contextlib.closing(connect(url)) as conn:
            relations = _relations(conn)
            if relations != self._template_relations() or schema.version(conn) != schema.SCHEMA_VERSION:
                return False
            tables = sorted(name for name, kind in relations if kind == "r")
            sequences = sorted(name for name, kind in relations if kind == "S")
            husks = []
            with conn.transaction():
                # No trigger fires (a workflow's, releasing nodes of jobs it sees removed): an emptying
                conn.execute("SET LOCAL session_replication_role = replica")
                for table in tables:
                    if conn.execute(f'DELETE FROM "{table}"').rowcount > MANY_ROWS:
                        husks.append(table)
                for sequence in sequences:
                    conn.execute(f'ALTER SEQUENCE "{sequence}" RESTART')
            schema.create(conn)  # the schema version and the flow row, as a new database has them
            for table in husks:
                conn.execute(f'VACUUM "{table}"')
        return True

    _relations_cache: frozenset[tuple[str, str]] | None = None

    def _template_relations(self) -> frozenset[tuple[str, str]]:
        if self._relations_cache is None:
            with contextlib.closing(connect(self.database_url(self.template))) as conn:
                self._relations_cache = _relations(conn)
        return self._relations_cache

    def close(self) -> None:
        """The end of the session: drop what this session made, or stop its cluster (a child process of a
        session only closes its connection: the session owns the databases)."""
        if self.owner and self.cluster is None:
            with contextlib.suppress(Exception):
                admin = self.admin()
                names = [
                    row[0]
                    for row in admin.execute(
                        "SELECT datname FROM pg_database WHERE datname LIKE %s ORDER BY datname = %s",
                        (f"qm\\_{self.tag}\\_%", self.template),
                    )
                ]
                for name in names:  # the template last
                    admin.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
        if self.cluster is not None:
            self.cluster.stop()


def _relations(conn: Any) -> frozenset[tuple[str, str]]:
    """The tables, sequences, indexes and views of the public schema: (name, relkind)."""
    rows = conn.execute(
        "SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'i', 'v', 'm', 'p')"
    ).fetchall()
    return frozenset((name, kind) for name, kind in rows)


_server: PgServer | None = None
_failure: str | None = None
_server_lock = threading.Lock()


def server() -> PgServer:
    """This process's server (started on first use); ``PgUnavailable`` when none can be had."""
    global _server, _failure
    with _server_lock:
        if _server is not None:
            return _server
        if _failure is not None:
            raise PgUnavailable(_failure)
        try:
            _server = _open()
        except PgUnavailable as exc:
            _failure = str(exc)
            raise
        atexit.register(close_server)
        return _server


def _open() -> PgServer:
    psycopg = _psycopg()
    inherited = os.environ.get(SESSION_ENV)
    if inherited:
        session = json.loads(inherited)
        return PgServer(session["url"], session["tag"], owner=False)
    tag = f"{os.getpid()}_{secrets.token_hex(2)}"
    url = os.environ.get(ENV_URL)
    cluster = None
    if url:
        try:
            connect(url).close()
        except psycopg.Error as exc:
            raise PgUnavailable(f"{ENV_URL} names a server that cannot be reached ({exc})") from exc
    else:
        bindir = find_bindir()
        if bindir is None:
            hint = _local_hint()
            raise PgUnavailable(f"no PostgreSQL server binaries (initdb) found{hint}; {HOW_TO_ENABLE}")
        cluster = Cluster(bindir)
        url = cluster.start()
    found = PgServer(url, tag, cluster=cluster)
    try:
        found.make_template()
    except BaseException:
        found.close()
        raise
    os.environ[SESSION_ENV] = json.dumps({"url": url, "tag": tag})  # for the tests' child processes
    return found


def _local_hint() -> str:
    with contextlib.suppress(OSError), socket.create_connection(LOCAL_SERVER, timeout=0.2):
        host, port = LOCAL_SERVER
        return f" (a server answers at {host}:{port}: {ENV_URL}=postgresql://postgres@{host}:{port}/postgres)"
    return ""


def close_server() -> None:
    global _server
    with _server_lock:
        found, _server = _server, None
    if found is not None:
        found.close()
        if found.owner:
            os.environ.pop(SESSION_ENV, None)


def fresh_database() -> str:
    """A new database with the queue_max schema and nothing in it, on this process's server (in a test's
    child process: its parent's). -> its URL. It lives until ``drop_database`` or the session's end."""
    return server().fresh_database()


def drop_database(url: str) -> None:
    server().drop_database(url)


# ---------------------------------------------------------------------------------------------- pytest


def unavailable(reason: str) -> NoReturn:
    """Skip the test that needs a server, or fail it under CI (where the tests must never be skipped)."""
    if in_ci():
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"needs a PostgreSQL server: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The conninfo URL of a server's maintenance database (see the module's docstring for which server)."""
    try:
        found = server()
    except PgUnavailable as exc:
        unavailable(str(exc))
    yield found.url
    close_server()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """The URL of a database for this test only: the queue_max schema (``schema.create``), no rows. Emptied
    (or dropped) after the test, connections left open to it ended."""
    found = server()
    url = found.lend()
    yield url
    found.give_back(url)


MARKER = "postgres: needs a PostgreSQL server (tests/pgserver.py)"


def pytest_configure(config: pytest.Config) -> None:
    """The ``postgres`` marker, for a run outside this repository's pyproject.toml (which describes it)."""
    if not any(line.startswith("postgres:") for line in config.getini("markers")):
        config.addinivalue_line("markers", MARKER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs a server is marked ``postgres`` (``-m "not postgres"`` leaves them out)."""
    for item in items:
        if "pg_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
