"""The example's page: enqueue a batch with the button, watch its JSON go from READY to finished."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import BOUND, ROOT


def test_the_button_enqueues_a_batch_and_the_json_view_follows_it(
    example_env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("page_check.py"))],
        cwd=ROOT,
        env=example_env,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert report["empty_page"] == 200
    assert report["get_enqueue"] == 405  # enqueueing is POST only
    assert report["post"] == [302, "/"]

    before = report["before"]
    assert len(before["jobs"]) >= 60
    assert {job["status"] for job in before["jobs"]} == {"READY"}
    assert before["stats"]["pending"] + before["stats"]["scheduled"] == len(before["jobs"])
    assert before["workers"] == 0
    status, html = report["page"]
    assert status == 200
    assert "No worker is running" in html and 'id="hint">' in html  # shown: no worker
    assert before["jobs"][0]["id"] in html
    assert "<script src=" not in html  # no CDN, no framework: the page works offline

    after = report["after"]
    ids = [job["id"] for job in before["jobs"]]
    assert [job["id"] for job in after["jobs"]] == ids  # ids are strings: JSON numbers lose precision
    statuses: dict[str, set[str]] = {job["kind"]: set() for job in after["jobs"]}
    for job in after["jobs"]:
        statuses[job["kind"]].add(job["status"])
    assert set().union(*statuses.values()) <= {"SUCCESSFUL", "FAILED"}
    assert statuses["email"] == {"SUCCESSFUL"}
    failed = [job for job in after["jobs"] if job["status"] == "FAILED"]
    assert failed and all(job["kind"] == "exchange rate" for job in failed)
    assert all("HTTP" in job["detail"] for job in failed)
