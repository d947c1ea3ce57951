"""Fixtures of the worker tests: real ``manage.py queue_worker`` subprocesses over a store of the test's own,
of the kind ``store_kind`` (tests/stores.py): the LMDB store in ``tmp_path``, or the PostgreSQL store in a
database of the test's (``pg_url``), which the subprocesses' settings name by URL (tests/worker/settings.py).

The test process writes and reads the store through the engine (``Queue``) directly: what the tests check is
what is stored, and which marks the tasks left (``tests/worker/workapp/tasks.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from queue_max_django.engine import Queue
from tests.engine.locations import OPENERS, StoreLocation
from tests.engine.pgprobe import PgProbe
from tests.engine.probes import LmdbProbe, StoreProbe


def probe(queue: Queue) -> StoreProbe:
    """The ``StoreProbe`` of ``queue``'s store (tests/engine/probes.py): what it holds, past the engine."""
    return PgProbe(queue) if queue.path.startswith("postgresql://") else LmdbProbe(queue)


ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.worker.workapp.tasks."
BOUND = 60.0  # no wait in these tests lasts longer than this


@dataclass
class Worker:
    """A running ``queue_worker`` command."""

    proc: subprocess.Popen[bytes]
    log: Path

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = BOUND) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"queue_worker did not exit within {timeout}s; log:\n{self.output()}"
            ) from None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@dataclass
class Site:
    """One test's store, marks folder and environment for its workers."""

    root: Path
    location: StoreLocation
    env: dict[str, str]
    workers: list[Worker]

    def queue(self, **options: Any) -> Queue:
        """A Queue on the store, as any process opens it (the LMDB store's shaping options are left out
        for the PostgreSQL store, which has one shard)."""
        return OPENERS[self.location.kind](self.location.where, options)

    def settings(self) -> dict[str, Any]:
        """The ``QUEUE_MAX`` of this store, for the test's own process (the workers have theirs)."""
        if self.location.kind == "postgres":
            return {"STORE": "postgresql", "URL": self.location.where}
        return {"DATA_DIR": Path(self.location.where)}

    def put(self, task: str, *args: Any, **options: Any) -> int:
        """Enqueue ``task`` (a name in workapp.tasks) as ``.delay()`` would: the same payload and name."""
        with self.queue() as queue:
            return queue.put({"args": list(args), "kwargs": {}}, name=TASKS + task, **options)

    def marks(self, kind: str) -> list[tuple[str, int]]:
        """(value, pid) of each mark of ``kind`` the tasks left, in order."""
        path = self.root / "marks" / kind
        if not path.exists():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        return [(value, int(pid)) for value, pid in (line.split() for line in lines)]

    def start(self, *args: str) -> Worker:
        log = self.root / f"worker-{len(self.workers)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "django", "queue_worker", *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # signals from the test reach the supervisor only
            )
        worker = Worker(proc, log)
        self.workers.append(worker)
        return worker

    def run(self, *args: str, timeout: float = BOUND) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", "queue_worker", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture
def site(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> Iterator[Site]:
    (tmp_path / "marks").mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
        "QUEUE_MAX_TEST_MARKS": str(tmp_path / "marks"),
        "PYTHONPATH": str(ROOT),
    }
    if store_kind == "postgres":
        location = StoreLocation(store_kind, str(request.getfixturevalue("pg_url")))
        env["QUEUE_MAX_TEST_PG_URL"] = location.where
    else:
        location = StoreLocation(store_kind, str(tmp_path / "store"))
        env["QUEUE_MAX_TEST_DATA_DIR"] = location.where
    made = Site(tmp_path, location, env, [])
    yield made
    for worker in made.workers:  # never leave a worker behind, whatever the test did
        if worker.proc.poll() is None:
            os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait(10)


def wait_for(condition: Callable[[], Any], timeout: float = BOUND, what: str = "the condition") -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
