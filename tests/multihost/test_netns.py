"""The namespaces of benchmarks/netns.py: those a killed run left are removed at the next start (processes
and all), those of a run still going are kept; and without root the reason is given instead of an error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from benchmarks import netns
from benchmarks.multihost import ROOT

PREFIX = "qmmn"


@pytest.fixture
def namespaces_here() -> None:
    reason = netns.unavailable(PREFIX)
    if reason is not None:
        pytest.skip(f"needs network namespaces: {reason}")


def test_a_dead_runs_namespaces_are_removed_with_their_processes_and_a_live_runs_kept(
    namespaces_here: None,
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names a run that is over
    stale, live = f"{PREFIX}{gone.pid}-db", f"{PREFIX}{os.getpid()}-db"
    for name in (stale, live):
        netns.ip("netns", "add", name)
    sleeper = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "60"])
    try:
        netns.ip("netns", "pids", stale)
        assert netns.clean_stale(PREFIX) == [stale]
        assert sleeper.wait(10) == -9  # SIGKILLed with its namespace
        names = netns.namespaces()
        assert stale not in names and live in names
    finally:
        sleeper.kill()
        sleeper.wait()
        for name in (stale, live):
            netns.ip("netns", "del", name, check=False)


def test_without_root_the_reason_is_given(namespaces_here: None) -> None:
    """As the user nobody (with the system's Python: the project's environment may be out of its reach;
    netns.py needs only the standard library)."""
    runuser, python = shutil.which("runuser"), shutil.which("python3", path="/usr/bin:/bin")
    if runuser is None or python is None:
        pytest.skip("needs runuser and a system python3 to run as another user")
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks import netns; "
        "print(netns.unavailable('qmmn'))"
    )
    done = subprocess.run(
        [runuser, "-u", "nobody", "--", python, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "network namespaces need root (ip netns add)", done.stderr
