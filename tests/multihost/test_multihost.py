"""The multi-host run of benchmarks/multihost.py at CI size: PostgreSQL, two ``queue_worker`` commands and
the producers on four network namespaces, each host on a link of its own; one worker host's link cut for
three lease times, then the other worker host killed whole (SIGKILL of every process in it); then the logs
compared with the store, and ``manage.py queue_check`` run on the producers' host.

10,000 jobs and 1-second leases; every wait is bounded (``time_limit``), and every process, the server and the
namespaces are removed at the end. Network namespaces need root and ``ip``: where they cannot be made the
test is skipped with the reason, under CI too (the PostgreSQL server binaries, though, must be there under
CI, as for every PostgreSQL test).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import netns
from benchmarks.multihost import CUT, KILLED, Config, run_multihost
from tests.pgserver import find_bindir, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PREFIX = "qmmt"  # the namespaces' prefix, apart from the benchmark's (qmmh)
JOBS = 10_000


@pytest.mark.inv_2
@pytest.mark.inv_3
def test_a_cut_link_and_a_killed_host_lose_nothing_and_duplicate_only_what_they_held(tmp_path: Path) -> None:
    reason = netns.unavailable(PREFIX)
    if reason is not None:
        pytest.skip(f"needs network namespaces: {reason}")
    if find_bindir() is None:
        unavailable(
            "the server binaries (initdb, pg_ctl) are not installed: this test starts a server of its own"
        )
    # The producers are paced (2 x 500 jobs/s): on a quiet machine the workers drain 3,000 jobs/s, and the
    # other host then finished every job during the cut (3 s) and the lease after it, before the kill could
    # come. At 1,000 jobs/s the run lasts 10 s at least, the kill comes ~4 s after the cut with work left.
    config = Config(
        folder=tmp_path, jobs=JOBS, lease_time=1.0, cut_at=0.1, kill_at=0.3, time_limit=240.0, prefix=PREFIX,
        produce_rate=500.0,
    )  # fmt: skip

    report = run_multihost(config)

    summary = "\n".join(report.lines() + [f"{at:8.2f} s  {what}" for at, what in report.timeline])
    assert report.errors == [], summary
    assert report.cut and report.kill, summary
    assert report.cut["held"], summary  # the cut came while the host held jobs
    assert report.acknowledged == JOBS and report.lost == [], summary
    assert report.done + report.dead_lettered == JOBS, summary
    assert report.done_without_running == [], summary
    assert report.duplicated_elsewhere == [], summary
    assert report.executions >= JOBS + len(report.duplicated), summary
    assert set(report.runs_by_host) == {CUT, KILLED}, summary
    assert report.cut_host_exit == 0 and report.cut_host_replaced == [], summary
    assert report.late_runs_not_refused == [], summary
    assert report.refused == report.refused_logged, summary
    assert report.check_problems == [], summary
    assert report.ok, summary
    assert [name for name in netns.namespaces() if name.startswith(f"{PREFIX}{os.getpid()}-")] == []
