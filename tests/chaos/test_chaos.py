"""The chaos run of benchmarks/chaos.py at CI size: real ``queue_worker`` commands and producer processes,
real SIGKILLs of worker processes, supervisors and producers, then the logs compared with the store.

A fixed seed and small numbers (2,400 jobs, 5 kills, 2-second leases) keep it under half a minute on two busy
cores; every wait is bounded (``time_limit``), and every process the run started is SIGKILLed at the end.
On the PostgreSQL store (a throwaway cluster of the test's own, durable: each commit's WAL written before it
returns) the server also crashes once (``pg_ctl restart -m immediate``) during the run.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from benchmarks.chaos import Config, Report, run_chaos
from benchmarks.runstore import open_store
from tests.pgserver import PgUnavailable, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.inv_1, pytest.mark.inv_2, pytest.mark.inv_3]

JOBS = 2_400
KILLS = 5


def test_kills_lose_no_acknowledged_job_and_duplicate_only_jobs_of_killed_holders(tmp_path: Path) -> None:
    # seed 4: a producer, 2 supervisors and 2 worker processes killed (in runs here; the kinds repeat)
    config = Config(
        folder=tmp_path, jobs=JOBS, kills=KILLS, seed=4, supervisors=1, processes=2, producers=2,
        produce_rate=200.0, backlog=600, lease_time=2.0, kill_gap=0.5, time_limit=90.0, check="verify",
    )  # fmt: skip

    report = run_chaos(config)

    assert_sound(report, JOBS, KILLS)


PG_JOBS = 1_000
PG_KILLS = 3


@pytest.mark.postgres
def test_on_postgresql_kills_and_a_server_crash_lose_no_acknowledged_job(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        try:
            store = stack.enter_context(open_store("postgresql", tmp_path, fsync=False))
        except PgUnavailable as exc:
            unavailable(str(exc))
        config = Config(
            folder=tmp_path, jobs=PG_JOBS, kills=PG_KILLS, seed=8, supervisors=1, processes=2, producers=2,
            produce_rate=150.0, backlog=600, lease_time=2.0, kill_gap=0.5, time_limit=120.0, check="verify",
            store=store, restarts=1,
        )  # fmt: skip

        report = run_chaos(config)

    assert [restart["mode"] for restart in report.restarts] == ["immediate"], "\n".join(report.lines())
    assert_sound(report, PG_JOBS, PG_KILLS, rounds=PG_KILLS + 1)


def assert_sound(report: Report, jobs: int, kills: int, rounds: int | None = None) -> None:
    """Nothing acknowledged lost, every duplicate explained (a lost lease of a killed holder, or across a
    server restart), and every round of checks clean."""
    summary = "\n".join(report.lines())
    rounds = kills if rounds is None else rounds
    assert report.errors == [], summary
    assert len(report.kills) == kills, summary
    assert report.rounds_checked == rounds + 1 and report.check_problems == [], summary  # + the final command
    assert report.acknowledged == jobs, summary  # each producer logs exactly its quota of returned puts
    assert report.lost == [], summary
    assert report.done + report.dead_lettered == jobs, summary
    assert report.done_without_running == [], summary
    assert report.duplicated_without_lost_lease == [], summary
    assert report.duplicated_not_held_by_a_killed_process == [], summary
    assert report.executions >= report.done, summary
    assert report.ok, summary
