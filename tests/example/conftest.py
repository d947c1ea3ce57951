"""Fixtures of the example project's tests: run its ``manage.py`` (or a script in its settings) in a
subprocess, with its database and store in ``tmp_path`` (``EXAMPLE_STATE_DIR``, read by its settings)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "example_project"
MANAGE = PROJECT / "manage.py"
BOUND = 120.0  # seconds; the demo takes about 10

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def example_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["EXAMPLE_STATE_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), str(ROOT)])
    return env


@pytest.fixture
def manage(example_env: dict[str, str]) -> Run:
    """Run ``example_project/manage.py`` with these arguments from the repository's root, as the README
    says; fail with its output if it does not end within ``BOUND`` seconds."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, os.path.relpath(MANAGE, ROOT), *args],
            cwd=ROOT,
            env=example_env,
            capture_output=True,
            text=True,
            timeout=BOUND,
        )

    return run
