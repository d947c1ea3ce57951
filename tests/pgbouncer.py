"""PgBouncer in transaction pooling mode in front of the tests' PostgreSQL server (``tests/pgserver.py``).

``Bouncer`` starts a ``pgbouncer`` process of its own (Debian's package: ``apt-get install pgbouncer``) with
``pool_mode = transaction`` and few server connections per database (``pool_size``), so that the clients'
transactions take turns on them: whatever a client left in a server session (a prepared statement, a
``LISTEN``, a ``SET``, an advisory lock) is seen by, or clashes with, another client's next transaction, and
a client's own next transaction may find it gone. It listens on a Unix socket in a new directory only (no
TCP port to clash with), trusts its clients, and forwards every database name (``*``) to the test server.

The ``bouncer`` fixture gives one for the test's database (``pg_url``); a test needing it is skipped when
``pgbouncer`` is not installed, with a reason that says how to install it, except under CI, where it fails
(``.ci/run`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.pgserver import connect, dbname_of, in_ci, server

PORT = 6432  # the name of its socket only (.s.PGSQL.6432 in its own directory): no TCP port
START_TIMEOUT = 20.0
HOW_TO_ENABLE = "install PgBouncer (Debian: apt-get install pgbouncer) so that these tests start one"
CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/bin/pgbouncer")


def find_pgbouncer() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((path for path in CANDIDATES if os.access(path, os.X_OK)), None)


class Bouncer:
    """A running ``pgbouncer`` in transaction mode in front of the server at ``server_url``."""

    def __init__(
        self, server_url: str, dbname: str, *, pool_size: int = 2, query_wait_timeout: float | None = None
    ) -> None:
        from psycopg.conninfo import conninfo_to_dict

        binary = find_pgbouncer()
        if binary is None:
            raise FileNotFoundError(f"pgbouncer is not installed; {HOW_TO_ENABLE}")
        target = conninfo_to_dict(server_url)
        self.user = str(target.get("user") or pwd.getpwuid(os.geteuid()).pw_name)
        self.pool_size = pool_size
        self.dbname = dbname
        self.root = Path(tempfile.mkdtemp(prefix="qm-pgb-"))
        self.log = self.root / "pgbouncer.log"
        forward = " ".join(
            f"{key}={target[key]}" for key in ("host", "port", "user", "password") if target.get(key)
        )
        (self.root / "users.txt").write_text(f'"{self.user}" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = {forward}\n"
            "[pgbouncer]\n"
            "listen_addr =\n"
            f"listen_port = {PORT}\n"
            f"unix_socket_dir = {self.root}\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            f"logfile = {self.log}\n"
            "server_login_retry = 1\n"
            "ignore_startup_parameters = extra_float_digits\n"
            + ("" if query_wait_timeout is None else f"query_wait_timeout = {query_wait_timeout:g}\n")
        )
        prefix: list[str] = []
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            owner = next(u for u in ("postgres", "nobody") if _has_user(u))
            entry = pwd.getpwnam(owner)
            for path in [self.root, *self.root.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            prefix = [shutil.which("runuser") or "runuser", "-u", owner, "--"]
        self.proc = subprocess.Popen(
            [*prefix, binary, str(self.root / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """The URL of the database ``dbname`` through this bouncer."""
        host = quote(str(self.root), safe="")
        return f"postgresql://{quote(self.user, safe='')}@/{quote(self.dbname)}?host={host}&port={PORT}"

    def _wait_ready(self) -> None:
        """Until the bouncer accepts a connection on its socket: the socket's file appears when pgbouncer
        binds it, a moment before it listens (a client connecting then is refused)."""
        deadline = time.monotonic() + START_TIMEOUT
        path = str(self.root / f".s.PGSQL.{PORT}")
        while True:
            if os.path.exists(path):
                with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as probe:
                    try:
                        probe.connect(path)
                    except OSError:  # bound, not listening yet
                        pass
                    else:
                        return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.output()}")
            time.sleep(0.02)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        """Shut it down (SIGINT: at once when no client is connected, where SIGTERM would linger for two
        seconds; SIGKILL after a few) and remove its directory."""
        for sig, wait in ((signal.SIGINT, 5), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        shutil.rmtree(self.root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def backends(url: str) -> int:
    """Server connections to the database of ``url`` (pgbouncer's among them), counted on the server."""
    with contextlib.closing(connect(server().url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
            (dbname_of(url),),
        ).fetchone()
    return int(row[0])


@pytest.fixture
def bouncer(pg_url: str) -> Iterator[Bouncer]:
    """A PgBouncer in transaction mode (2 server connections) in front of this test's database
    (``bouncer.url``)."""
    if find_pgbouncer() is None:
        reason = f"pgbouncer is not installed; {HOW_TO_ENABLE}"
        if in_ci():
            pytest.fail(f"PgBouncer tests cannot run under CI: {reason}", pytrace=False)
        pytest.skip(f"needs PgBouncer: {reason}")
    found = Bouncer(server().url, dbname_of(pg_url))
    try:
        yield found
    finally:
        found.stop()
