"""``queue_transfer`` SIGKILLed at random instants and run again finishes the move: every job in exactly one
store, once, as it was put (``transfer_kill.py``; ``benchmarks/transfer_kill.py`` runs it over 100,000 jobs).
Real processes: the command runs as ``python -m django queue_transfer``, killed with its process group."""

from __future__ import annotations

from pathlib import Path

import pytest

from .transfer_kill import check, fill, run_with_kills

pytestmark = [pytest.mark.store_neutral, pytest.mark.postgres]


@pytest.mark.parametrize("direction", ["lmdb-to-postgresql", "postgresql-to-lmdb"])
def test_killed_at_random_instants_and_run_again_the_move_ends_with_every_job_in_one_store_once(
    direction: str, tmp_path: Path, pg_url: str
) -> None:
    lmdb = {"STORE": "lmdb", "DATA_DIR": str(tmp_path / "lmdb"), "SHARDS": 3}
    pg = {"STORE": "postgresql", "URL": pg_url}
    source, target = (lmdb, pg) if direction == "lmdb-to-postgresql" else (pg, lmdb)
    expected = fill(source, 3000, seed=7)
    outcome = run_with_kills(source, target, kills=3, seed=11, batch=100)
    assert (outcome.kills, outcome.runs) == (3, 4)  # each kill landed during the move
    assert check(source, target, expected) == []
    report = outcome.last_report
    # The last run did not move everything again. It may move nothing: a kill that lands after the last
    # batch, while the command ends its run, leaves it nothing to move (seen once in CI, under load).
    assert report["left_in_source"] == 0 and report["jobs"] < len(expected)
