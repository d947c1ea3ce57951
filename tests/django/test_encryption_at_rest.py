"""Never in clear (issue 36): a job of an encrypted task with a known secret argument, run by a real
``queue_worker`` process to success and, with the secret in its exception's message, to failure; then the raw
bytes of every file of the LMDB store, every row of every ``qm_`` table of the PostgreSQL store (as text), and
every line the worker wrote hold none of the secret. A job of a task that is not encrypted, run beside them,
is found in the same bytes: the scan sees what is stored in clear."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.conf import get_queue
from queue_max_django.engine import State
from tests.engine.locations import StoreLocation
from tests.testapp import encrypted_tasks as et

pytest.importorskip("cryptography")

Configure = Callable[..., override_settings]
ROOT = Path(__file__).resolve().parents[2]
KEY = base64.urlsafe_b64encode(bytes(range(64, 96))).decode()
SECRET = "SECRET-7f3a9c-4111111111111111"
CLEAR = "CLEAR-CONTROL-5b2e81"
BOUND = 120.0
KEYS: dict[str, Any] = {"ENCRYPTION_KEYS": {"k1": KEY}, "RETRY_BACKOFF": 0}


@pytest.fixture(autouse=True)
def _encrypted_tasks() -> Iterator[None]:
    with et.registered():
        yield


def _settings(location: StoreLocation) -> dict[str, Any]:
    where = (
        {"STORE": "postgresql", "URL": location.where}
        if location.kind == "postgres"
        else {"DATA_DIR": location.where}
    )
    return {**where, **KEYS}


def _stored_bytes(location: StoreLocation) -> bytes:
    """Everything the store holds, as bytes: LMDB, every file of its directory; PostgreSQL, every row of
    every ``qm_`` table as its text form (bytea as hex, and decoded where it is UTF-8)."""
    if location.kind != "postgres":
        return b"".join(
            path.read_bytes() for path in sorted(Path(location.where).rglob("*")) if path.is_file()
        )
    out: list[bytes] = []
    with psycopg.connect(location.where, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'qm_%'"
        )]  # fmt: skip
        assert "qm_jobs" in tables and "qm_finished" in tables
        for table in tables:
            for (text,) in conn.execute(f"SELECT t::text FROM {table} t"):
                out.append(text.encode())
                for hexed in text.split("\\\\x")[1:]:  # bytea columns: their bytes as well
                    digits = hexed[: len(hexed) - len(hexed.lstrip("0123456789abcdef"))]
                    out.append(bytes.fromhex(digits[: len(digits) // 2 * 2]))
    return b"\n".join(out)


def test_a_secret_argument_is_nowhere_in_clear(queue_max: Configure, location: StoreLocation) -> None:
    with queue_max(**KEYS):
        ok = et.charge.using(metadata={"customer": SECRET}).delay(SECRET)
        bad = et.leak.delay(SECRET)
        control = et.clear.delay(CLEAR)
    conf.reset()
    given = json.dumps(_settings(location))
    settings = "tests.django.encryption_settings"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "PYTHONPATH": str(ROOT),
           "QUEUE_MAX_TEST_ENCRYPTION": given}  # fmt: skip
    argv = [sys.executable, "-m", "django", "queue_worker", "--burst", "--processes", "1", "--no-scheduler",
            "-v", "2"]  # fmt: skip
    worker = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND)
    assert worker.returncode == 0, worker.stderr[-3000:]
    logged = worker.stdout + worker.stderr
    assert f"job {bad.job_id}" in logged and "ValueError" in logged  # the failure's line is in what we read
    with queue_max(**KEYS):
        states = {h.job_id: get_queue().job(h.job_id or 0).state for h in (ok, bad, control)}  # type: ignore[union-attr]
        assert states == {ok.job_id: State.DONE, bad.job_id: State.FAILED, control.job_id: State.DONE}
        bad.refresh()
        assert f"card {SECRET} was declined" in bad.errors[-1].traceback  # the key opens what was stored
    conf.reset()
    raw = _stored_bytes(location)
    assert CLEAR.encode() in raw  # the scan sees data stored in clear
    assert SECRET.encode() not in raw
    assert SECRET not in logged
