"""The whole suite's set-up: the contract markers, the PostgreSQL server and store-kind fixtures, and one
bytecode cache for every Python process the run starts.

The suite starts hundreds of Python processes (``queue_worker`` commands, the engine's child processes, the
example project's commands), each importing Django and this package. Where they cannot keep their ``.pyc``
files (``PYTHONDONTWRITEBYTECODE`` is set, as in the environment CI runs in, or Django's folder cannot be
written), each of them compiled every module again on every start (about 0.7 s of CPU for Django and this
package on the machine of docs/benchmarks.md). Then the run gives its child processes a bytecode cache of its
own, in a temporary folder removed at the end (``PYTHONPYCACHEPREFIX``, and ``PYTHONDONTWRITEBYTECODE``
taken out of their environment): the first process compiles, the others read. Nothing is written beside the
sources, and a run where ``.pyc`` files can be written, or that names its own ``PYTHONPYCACHEPREFIX``, is
left as it is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import django
import pytest

from tests.contracts import CONTRACTS

pytest_plugins = ["tests.pgserver", "tests.stores"]

_PYC_CACHE: list[tuple[str, str | None]] = []  # (the run's own cache, PYTHONDONTWRITEBYTECODE before)


def _children_cannot_keep_bytecode() -> bool:
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return False  # the run's own choice
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return True
    return not os.access(Path(django.__file__).parent, os.W_OK)


def pytest_configure(config: pytest.Config) -> None:
    for marker, description in CONTRACTS.items():
        config.addinivalue_line("markers", f"{marker}: {description}")
    if _children_cannot_keep_bytecode():
        cache = tempfile.mkdtemp(prefix="queue-max-tests-pyc-")
        _PYC_CACHE.append((cache, os.environ.pop("PYTHONDONTWRITEBYTECODE", None)))
        os.environ["PYTHONPYCACHEPREFIX"] = cache


def pytest_unconfigure(config: pytest.Config) -> None:
    while _PYC_CACHE:
        cache, dont_write = _PYC_CACHE.pop()
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        if dont_write is not None:
            os.environ["PYTHONDONTWRITEBYTECODE"] = dont_write
        shutil.rmtree(cache, ignore_errors=True)
