"""The chaos run of benchmarks/chaos.py at CI size: real ``queue_worker`` commands and producer processes,
real SIGKILLs of worker processes, supervisors and producers, then the logs compared with the store.

A fixed seed and small numbers (2,400 jobs, 5 kills, 2-second leases) keep it under half a minute on two busy
cores; every wait is bounded (``time_limit``), and every process the run started is SIGKILLed at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos import Config, run_chaos

JOBS = 2_400
KILLS = 5


@pytest.mark.slow
@pytest.mark.inv_1
@pytest.mark.inv_2
@pytest.mark.inv_3
def test_kills_lose_no_acknowledged_job_and_duplicate_only_jobs_of_killed_holders(tmp_path: Path) -> None:
    config = Config(
        folder=tmp_path, jobs=JOBS, kills=KILLS, seed=8, supervisors=1, processes=2, producers=2,
        produce_rate=200.0, backlog=600, lease_time=2.0, kill_gap=0.5, time_limit=90.0, check="verify",
    )  # fmt: skip

    report = run_chaos(config)

    summary = "\n".join(report.lines())
    assert report.errors == [], summary
    assert len(report.kills) == KILLS, summary
    assert report.rounds_checked == KILLS + 1 and report.check_problems == [], summary  # + the final command
    assert report.acknowledged == JOBS, summary  # each producer logs exactly its quota of returned puts
    assert report.lost == [], summary
    assert report.done + report.dead_lettered == JOBS, summary
    assert report.done_without_running == [], summary
    assert report.duplicated_without_lost_lease == [], summary
    assert report.duplicated_not_held_by_a_killed_process == [], summary
    assert report.executions >= report.done, summary
    assert report.ok, summary
