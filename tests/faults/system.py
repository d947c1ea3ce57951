"""What the fault and security tests need from the operating system: tmpfs mounts (read-only, or small
enough to fill) and a root without the capabilities that let it ignore permission bits.

Without the privilege, a test skips saying why; with ``CI=true`` it fails instead, so that CI never passes
by skipping what it was meant to prove.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``; fail with it when ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: this must run in CI)")
    pytest.skip(reason)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def _mount(*args: str, what: str) -> None:
    if shutil.which("mount") is None:
        unavailable(f"cannot test {what}: no mount command")
    done = _run("mount", *args)
    if done.returncode != 0:
        unavailable(f"cannot test {what}: `mount {' '.join(args)}` failed: {done.stderr.strip()}")


def _umount(path: Path) -> None:
    done = _run("umount", str(path))
    if done.returncode != 0:  # busy: detach it lazily, never leave it behind
        _run("umount", "-l", str(path))


@contextlib.contextmanager
def tmpfs(path: Path, *, size: str = "16m", read_only: bool = False) -> Iterator[Path]:
    """A fresh tmpfs of ``size`` mounted at ``path`` (created), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0755" + (",ro" if read_only else "")
    _mount("-t", "tmpfs", "-o", options, "tmpfs", str(path), what="a tmpfs file system")
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def read_only_bind(source: Path, target: Path) -> Iterator[Path]:
    """``source`` (a populated directory) mounted read-only at ``target``, unmounted afterwards."""
    target.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(target), what="a read-only bind mount")
    try:
        done = _run("mount", "-o", "remount,ro,bind", str(target))
        if done.returncode != 0:
            unavailable(f"cannot remount {target} read-only: {done.stderr.strip()}")
        yield target
    finally:
        _umount(target)


# Capabilities that let root ignore permission bits. Without them, root is an ordinary owner.
DAC_CAPS = "-dac_override,-dac_read_search"


def as_plain_owner(command: list[str]) -> list[str]:
    """``command`` run by this user without the capabilities that bypass permission bits (``setpriv``)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        unavailable("cannot drop root's permission-bypassing capabilities: no setpriv (util-linux)")
    probe = _run("setpriv", f"--bounding-set={DAC_CAPS}", "true")
    if probe.returncode != 0:
        unavailable(f"cannot drop root's permission-bypassing capabilities: {probe.stderr.strip()}")
    return ["setpriv", f"--bounding-set={DAC_CAPS}", *command]
