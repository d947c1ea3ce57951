"""The PostgreSQL test server (tests/pgserver.py): each test's database has the schema and nothing else, what
one test wrote never reaches the next, a child process makes its databases on its parent's server, and a
missing server skips the tests locally but fails them under CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from queue_max_django.engine.stores.postgres import schema
from tests import pgserver

REPO_ROOT = Path(__file__).resolve().parents[1]


def _rows(url: str) -> dict[str, int]:
    with pgserver.connect(url) as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in schema.TABLES
            if table not in ("qm_meta", "qm_flow", "qm_pause_version")  # one row each, as a new database has
        }


def _dirty(url: str) -> None:
    with pgserver.connect(url) as conn:
        conn.execute("INSERT INTO qm_limits VALUES ('k', 'x')")
        conn.execute("INSERT INTO qm_locks (name, owner) VALUES ('leader', 'a')")
        conn.execute("INSERT INTO qm_workers VALUES ('w', 'x', 1, 1)")
        conn.execute("UPDATE qm_flow SET version = 41")
        conn.execute("SELECT nextval('qm_job_ids')")


def test_a_tests_database_has_the_schema_and_nothing_else(pg_url: str) -> None:
    with pgserver.connect(pg_url) as conn:
        assert schema.version(conn) == schema.SCHEMA_VERSION
        assert conn.execute("SELECT version FROM qm_flow").fetchall() == [(0,)]
        assert conn.execute("SELECT version FROM qm_pause_version").fetchall() == [(0,)]
        assert conn.execute("SELECT nextval('qm_job_ids')").fetchone() == (256,)
    assert set(_rows(pg_url).values()) == {0}


def test_what_a_test_wrote_is_gone_for_the_next(pg_server: str) -> None:
    """A database given back is emptied (rows, the flow version, the id sequence) before it is lent again,
    even with a connection of the last test still open in a transaction holding a lock."""
    server = pgserver.server()
    url = server.lend()
    _dirty(url)
    leftover = pgserver.connect(url)
    leftover.execute("BEGIN")
    leftover.execute("SELECT * FROM qm_limits FOR UPDATE")
    server.give_back(url)
    with pytest.raises(psycopg.OperationalError):  # it was ended
        leftover.execute("SELECT 1")
    leftover.close()
    again = server.lend()
    try:
        assert again == url, "the emptied database is lent again"
        assert set(_rows(again).values()) == {0}
        with pgserver.connect(again) as conn:
            assert conn.execute("SELECT version FROM qm_flow").fetchall() == [(0,)]
            assert conn.execute("SELECT nextval('qm_job_ids')").fetchone() == (256,)
            assert schema.version(conn) == schema.SCHEMA_VERSION
    finally:
        server.give_back(again)


def test_a_database_whose_schema_changed_is_not_lent_again(pg_server: str) -> None:
    server = pgserver.server()
    url = server.lend()
    with pgserver.connect(url) as conn:
        conn.execute("DROP TABLE qm_workers")
    server.give_back(url)
    with pgserver.connect(pg_server) as admin:
        assert admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (pgserver.dbname_of(url),)
        ).fetchone() == (0,)
    fresh = server.lend()
    try:
        assert fresh != url
        with pgserver.connect(fresh) as conn:
            assert conn.execute("SELECT to_regclass('qm_workers') IS NOT NULL").fetchone() == (True,)
    finally:
        server.give_back(fresh)


def test_text_sorts_by_a_language_unless_told_c(pg_url: str) -> None:
    """The tests' databases sort text like most production ones (ICU en-US where the server has ICU), so
    an ORDER BY that forgot COLLATE "C" shows."""
    with pgserver.connect(pg_url) as conn:
        provider = conn.execute(
            "SELECT datlocprovider FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]
        if provider != "i":
            pytest.skip("this server has no ICU")
        values = "(VALUES ('B'), ('a'))"
        assert conn.execute(f"SELECT x FROM {values} v(x) ORDER BY x").fetchall() == [("a",), ("B",)]
        assert conn.execute(f'SELECT x FROM {values} v(x) ORDER BY x COLLATE "C"').fetchall() == [
            ("B",),
            ("a",),
        ]


def test_the_throwaway_cluster_listens_on_no_tcp_port(pg_server: str) -> None:
    if pgserver.server().cluster is None:
        pytest.skip(f"the server is {pgserver.ENV_URL}'s, not a throwaway cluster")
    with pgserver.connect(pg_server) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)


CHILD = """
import json
from tests import pgserver
url = pgserver.fresh_database()
with pgserver.connect(url) as conn:
    conn.execute("INSERT INTO qm_locks (name, owner) VALUES ('x', 'child')")
print(json.dumps([url, pgserver.server().url]))
"""


def test_a_child_process_makes_its_database_on_the_parents_server(pg_server: str) -> None:
    """fresh_database() works without pytest: in a child it uses the session's server (no second cluster);
    what the child made is dropped with the session's other databases."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    url, server_url = json.loads(out.stdout)
    assert server_url == pg_server
    with pgserver.connect(url) as conn:
        assert conn.execute("SELECT owner FROM qm_locks").fetchall() == [("child",)]
    pgserver.drop_database(url)


def test_no_server_explains_how_to_enable_the_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pgserver.ENV_URL, raising=False)
    monkeypatch.delenv(pgserver.SESSION_ENV, raising=False)
    monkeypatch.setattr(pgserver, "find_bindir", lambda: None)
    with pytest.raises(pgserver.PgUnavailable) as raised:
        pgserver._open()
    assert pgserver.ENV_URL in str(raised.value) and "install PostgreSQL" in str(raised.value)


@pytest.mark.parametrize(
    ("ci", "skipped"), [(None, True), ("", True), ("0", True), ("1", False), ("true", False)]
)
def test_a_missing_server_skips_locally_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str | None, skipped: bool
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    expected = pytest.skip.Exception if skipped else pytest.fail.Exception
    with pytest.raises(expected) as raised:
        pgserver.unavailable("no server")
    assert "no server" in str(raised.value)


PROBE = """
def test_needs_a_server(pg_url):
    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("ci", [None, "1"])
def test_an_unreachable_server_end_to_end(tmp_path: Path, ci: str | None) -> None:
    """A whole pytest run whose only server is unreachable: skipped with the reason, or failed under CI."""
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBE))
    env = {k: v for k, v in os.environ.items() if k not in (pgserver.SESSION_ENV, "CI")}
    env[pgserver.ENV_URL] = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2"
    env["PYTHONPATH"] = str(REPO_ROOT)
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "tests.pgserver", "-p", "no:cacheprovider",
         "-p", "no:randomly", str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if ci is None:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 skipped" in done.stdout and pgserver.ENV_URL in done.stdout, done.stdout
    else:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 error" in done.stdout and "cannot run under CI" in done.stdout, done.stdout


OWN_CLUSTER = """
import sys, time
from tests import pgserver
found = pgserver.server()
print(found.cluster.root, flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_killed_sessions_cluster_is_stopped_and_removed(tmp_path: Path) -> None:
    """A session SIGKILLed with its throwaway cluster running leaves neither a server nor its directory."""
    if pgserver.find_bindir() is None:
        pytest.skip("no server binaries for a throwaway cluster")
    env = {k: v for k, v in os.environ.items() if k not in (pgserver.SESSION_ENV, pgserver.ENV_URL)}
    session = subprocess.Popen(
        [sys.executable, "-c", OWN_CLUSTER], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert session.stdout is not None
        root = Path(session.stdout.readline().strip())
        assert (root / "data" / "postmaster.pid").exists()
        postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
    finally:
        session.kill()
        session.wait()
        if session.stdout is not None:
            session.stdout.close()
    deadline = time.monotonic() + 60
    while root.exists() or _alive(postmaster):
        assert time.monotonic() < deadline, f"{root} or postmaster {postmaster} outlived the session"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
