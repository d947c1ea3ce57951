"""No pickle and no code in the store (invariant 6): whatever a job's record says, a worker runs only the
tasks registered in its own process. A crafted job naming a module path that exists (but holds no
registered task), ``os.system``, or a django.tasks job naming an importable function that is not a
registered ``Task`` imports nothing and calls nothing: it becomes a dead letter with a clear error. Pickled
bytes and msgpack extension types in a payload stay inert data.

The canary (tests/security/canary.py) writes a file when imported and another when called: neither may
appear, and ``sys.modules`` must never get it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from django.test import override_settings

from queue_max_django.engine import Queue, State
from queue_max_django.running.outcome import DJANGO_TASK_KEY
from queue_max_django.running.runner import run_job
from tests.faults.corrupt import _rewrite
from tests.worker.conftest import Site, site

CANARY_MODULE = "tests.security.canary"
ECHO = "tests.testapp.tasks.echo"
__all__ = ["site"]


def django_task_payload(module_path: str, alias: str = "default") -> dict[str, Any]:
    return {DJANGO_TASK_KEY: 1, "task": module_path, "backend": alias, "args": ["x"], "kwargs": {}}


class Crafted:
    """The crafted jobs, put into ``q``: label -> job id; and the jobs that must succeed."""

    def __init__(self, q: Queue, marker: Path) -> None:
        call = {"args": [], "kwargs": {}}
        self.dead = {
            "module-path": q.put(call, name=f"{CANARY_MODULE}.run"),
            "module": q.put(call, name=CANARY_MODULE),
            "os.system": q.put({"args": [f"touch {marker}"], "kwargs": {}}, name="os.system"),
            "posix.system": q.put({"args": [f"touch {marker}"], "kwargs": {}}, name="posix.system"),
            "callable-in-payload": q.put(
                {"callable": "os.system", "args": [f"touch {marker}"], "module": CANARY_MODULE}, name=ECHO
            ),
            "django-task": q.put(django_task_payload(f"{CANARY_MODULE}.run"), name=f"{CANARY_MODULE}.run"),
            "django-task-builtin": q.put(django_task_payload("os.system"), name="os.system"),
            "django-task-other-alias": q.put(
                django_task_payload(f"{CANARY_MODULE}.run", alias="no-such-backend"), name=ECHO
            ),
        }
        # Pickled bytes that would import the canary if anyone unpickled them; and an extension type.
        self.pickled = PICKLED_CALL
        self.echoed = q.put({"args": [self.pickled], "kwargs": {"also": self.pickled}}, name=ECHO)
        self.ext = q.put({"args": [], "kwargs": {}}, name=ECHO)
        _rewrite(q, self.ext, _with_ext_payload)


# A pickle (protocol 0, written by hand: pickle.dumps would import the canary) that imports the canary
# module and calls its run(): what an unpickling worker would do.
PICKLED_CALL = f"c{CANARY_MODULE}\nrun\n(tR.".encode()


def _with_ext_payload(raw: bytes, payload: bytes | None) -> tuple[bytes, bytes | None]:
    """The payload becomes a task call whose argument is a msgpack extension type wrapping a pickle."""
    from queue_max_django.engine.stores.lmdb import layout

    record = msgpack.unpackb(raw)
    ext = msgpack.ExtType(42, PICKLED_CALL)
    record[layout.F_PAYLOAD] = msgpack.packb({"args": [ext], "kwargs": {}}, use_bin_type=True)
    return msgpack.packb(record, use_bin_type=True), None


def assert_dead_letters_with_clear_errors(q: Queue, crafted: Crafted) -> None:
    for label, job_id in crafted.dead.items():
        job = q.job(job_id)
        assert job is not None and job.state is State.FAILED, label
        error = job.error or ""
        assert (
            "is registered in this process" in error
            or "is not a task call" in error
            or "is malformed" in error
            or "django.tasks job" in error  # Django < 6: no django.tasks to run it with
        ), (label, error)
        assert job.attempts == 1, label


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "canary-imported"
    monkeypatch.setenv("QUEUE_MAX_CANARY", str(path))
    assert CANARY_MODULE not in sys.modules
    yield path
    assert not path.exists(), "the canary module was imported"
    assert not Path(f"{path}.called").exists(), "the canary's function was called"
    assert CANARY_MODULE not in sys.modules


@pytest.mark.inv_6
def test_a_crafted_job_runs_nothing_outside_the_registry_in_process(tmp_path: Path, canary: Path) -> None:
    """The runner every worker thread uses, in this process: sys.modules can be watched directly. With no
    grace period for jobs of unknown tasks, they are dead letters at once."""
    marker = tmp_path / "os-system-ran"
    no_grace = override_settings(QUEUE_MAX={"UNKNOWN_TASK_GRACE": 0})
    with no_grace, Queue(tmp_path / "store", do_recover=False, do_vacuum=False) as q:
        crafted = Crafted(q, marker)
        before = set(sys.modules)
        while q.stats()["pending"]:
            run_job(q.get(0))
        assert not {name for name in set(sys.modules) - before if "canary" in name}
        assert_dead_letters_with_clear_errors(q, crafted)
        echoed = q.job(crafted.echoed)
        assert echoed is not None and echoed.state is State.DONE
        assert echoed.result == {"args": [crafted.pickled], "kwargs": {"also": crafted.pickled}}
        ext = q.job(crafted.ext)
        assert ext is not None and ext.state is State.DONE
        assert ext.result["args"][0] == msgpack.ExtType(42, PICKLED_CALL)
        assert q.verify() == []
    assert not marker.exists(), "os.system ran"


@pytest.mark.inv_6
@pytest.mark.lmdb  # writes its crafted records below the engine, into LMDB (LmdbProbe)
def test_a_crafted_job_runs_nothing_outside_the_registry_in_a_real_worker(
    site: Site, tmp_path: Path, canary: Path
) -> None:
    marker = tmp_path / "os-system-ran"
    site.env["QUEUE_MAX_CANARY"] = str(canary)
    site.env["QUEUE_MAX_TEST_UNKNOWN_TASK_GRACE"] = "0"  # jobs of unknown tasks: dead letters at once
    with site.queue() as q:
        crafted = Crafted(q, marker)

    done = site.run("--burst", "--processes", "1", "--threads", "2", "--no-scheduler")

    assert done.returncode == 0, done.stderr[-4000:]
    assert not canary.exists(), "a worker process imported the canary module"
    assert not Path(f"{canary}.called").exists()
    assert not marker.exists(), "os.system ran"
    with site.queue() as q:
        assert_dead_letters_with_clear_errors(q, crafted)
        echoed = q.job(crafted.echoed)
        assert echoed is not None and echoed.state is State.DONE
        assert echoed.result["args"] == [crafted.pickled]
        assert q.verify() == []
    assert site.location.exists()


def test_the_canary_is_live(tmp_path: Path) -> None:
    """The instrument itself: unpickling the crafted bytes (in another interpreter) imports the canary and
    calls it, leaving both files. So the tests above would see an import or a call if one happened."""
    path = tmp_path / "canary-imported"
    done = subprocess.run(
        [sys.executable, "-c", f"import pickle; print(pickle.loads({PICKLED_CALL!r}))"],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "QUEUE_MAX_CANARY": str(path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ran", done.stderr
    assert path.exists() and Path(f"{path}.called").exists()
