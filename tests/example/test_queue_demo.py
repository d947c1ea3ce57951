"""``manage.py queue_demo`` for real: a subprocess over a database and store in ``tmp_path``, run twice."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest

from queue_max_django.engine import Queue, State
from queue_max_django.engine.stores.postgres import schema
from tests.pgserver import connect, drop_database, fresh_database

from .conftest import ROOT, Run

pytestmark = pytest.mark.slow

README_COMMAND = "uv run python example_project/manage.py queue_demo"


def finished(output: str) -> tuple[int, int, int]:
    """(jobs, done, dead letters) from the demo's "All N jobs finished" line."""
    match = re.search(r"^All (\d+) jobs finished: (\d+) done, (\d+) dead letters\.$", output, re.MULTILINE)
    assert match, output
    jobs, done, dead = (int(group) for group in match.groups())
    return jobs, done, dead


def test_the_readme_runs_the_demo_with_this_command() -> None:
    assert README_COMMAND in (ROOT / "README.md").read_text(encoding="utf-8")


def test_queue_demo_runs_every_job_to_done_or_the_dead_letters_and_runs_again(
    manage: Run, tmp_path: Path
) -> None:
    first = manage("queue_demo")
    assert first.returncode == 0, first.stdout + first.stderr
    jobs, done, dead = finished(first.stdout)
    assert jobs >= 60 and done + dead == jobs
    assert dead >= 2  # the two unknown currencies: a 404 is never retried

    out = first.stdout
    assert "Admin user: admin / password: admin" in out, out
    # the same code means the same on LMDB: the rolled-back job is not stored, the committed one runs
    task = "example_app.tasks.send_welcome_email"
    assert (
        f"In transaction.atomic(), rolled back: <JobResult task='{task}' (rolled back: never stored)>" in out
    )
    assert re.search(
        r"^In transaction.atomic\(\), committed: .*\(not committed yet\)>, then job \d+$", out, re.M
    ), out
    prefix = f"EXAMPLE_STATE_DIR={tmp_path} uv run python example_project/manage.py"
    assert f"    {prefix} runserver\n" in out, out
    assert f"    {prefix} queue_worker\n" in out, out
    assert "http://127.0.0.1:8000/admin/" in out, out
    assert "The worker exited with status 0" in out, out
    assert re.search(r"^\[#{30}\] (\d+)/\1 ", out, re.MULTILINE), out  # the progress display reaches the end
    assert "STATE       JOBS" in out, out  # queue_stats' table
    # This run's dead letters, one line each: the unknown currencies (a 404, or 503s on every attempt, rarely)
    section = out.split("This run's dead letters", 1)[1].split("All dead letters", 1)[0]
    lines = [line for line in section.splitlines() if "example_app.tasks.fetch_exchange_rate" in line]
    assert len(lines) == dead, out
    for code in ("XAU", "BTC"):
        assert any(f"no such currency: {code}" in line or "HTTP 503" in line for line in lines), out

    second = manage("queue_demo")  # re-runnable: migrations applied, admin user there, store not empty
    assert second.returncode == 0, second.stdout + second.stderr
    jobs_again, done_again, dead_again = finished(second.stdout)
    assert jobs_again == jobs

    # What is on disk: nothing left to run, and every dead letter is an exchange rate that cannot be had.
    with Queue(tmp_path / "queue_max_data") as queue:
        stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)
        assert stats["total"] == 2 * jobs
        assert (stats["done"], stats["failed"]) == (done + done_again, dead + dead_again)
        failed = queue.jobs(State.FAILED, limit=1000)
    assert {job.name for job in failed} == {"example_app.tasks.fetch_exchange_rate"}
    unknown = [job for job in failed if job.payload["args"][0] in ("XAU", "BTC")]
    assert len(unknown) == 4
    for job in unknown:  # straight to the dead letters on the 404: only 503s before it were retried
        if "404" in (job.error or ""):
            assert job.error_type == "queue_max_django.engine.classify.Permanent"

    with contextlib.closing(sqlite3.connect(tmp_path / "db.sqlite3")) as db:
        users = db.execute("SELECT username, is_staff, is_superuser FROM auth_user").fetchall()
    assert users == [("admin", 1, 1)]


@pytest.mark.postgres
def test_queue_demo_on_postgresql_migrates_the_store_and_rolls_back_a_job_with_its_transaction(
    manage: Run, example_env: dict[str, str], pg_server: str, tmp_path: Path
) -> None:
    url = fresh_database()  # the store's schema from the template: dropped first, for migrate to make
    try:
        with contextlib.closing(connect(url)) as conn:
            schema.drop(conn)
        example_env["EXAMPLE_POSTGRES_URL"] = url
        run = manage("queue_demo")
        assert run.returncode == 0, run.stdout + run.stderr
        jobs, done, dead = finished(run.stdout)
        assert done + dead == jobs and dead >= 2
        out = run.stdout
        assert "(postgresql)" in out, out
        dropped = re.search(
            r"^In transaction.atomic\(\), rolled back: <JobResult id=(\d+) .*never stored\)>$", out, re.M
        )
        kept_line = re.search(
            r"^In transaction.atomic\(\), committed: .*\(not committed yet\)>, then job (\d+)$", out, re.M
        )
        assert dropped and kept_line, out
        rolled_back, committed = int(dropped.group(1)), int(kept_line.group(1))
        assert not (tmp_path / "queue_max_data").exists()  # no LMDB store was made

        with contextlib.closing(connect(url)) as conn:  # what the database holds, as committed
            migrations = conn.execute("SELECT name FROM django_migrations WHERE app = 'queue_max_django'")
            assert "0002_postgres_store" in {name for (name,) in migrations.fetchall()}
            assert schema.version(conn) == schema.SCHEMA_VERSION
            states = dict(conn.execute("SELECT state, count(*) FROM qm_jobs GROUP BY state").fetchall())
            finished_rows = conn.execute("SELECT count(*) FROM qm_finished").fetchone()
            users = conn.execute("SELECT username, is_superuser FROM auth_user").fetchall()
        with Queue(url) as queue:
            assert queue.job(rolled_back) is None
            kept = queue.job(committed)
            assert kept is not None and kept.state == "done", kept
            stats = queue.stats()
        assert (stats["pending"], stats["scheduled"], stats["running"]) == (0, 0, 0)
        assert (stats["done"], stats["failed"], stats["total"]) == (done, dead, jobs)
        assert states == {} and finished_rows == (jobs,), (states, finished_rows)
        assert users == [("admin", True)]
    finally:
        drop_database(url)
