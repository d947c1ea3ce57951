"""The engine's basic loop, and the rule that it never imports Django."""

from __future__ import annotations

import subprocess
import sys

from queue_max_django.engine import Queue, State


def test_put_get_ack_round_trip(queue: Queue) -> None:
    job_id = queue.put({"to": "a@example.com"}, name="mail.send")
    record = queue.get(0)
    assert record.job_id == job_id
    assert record.payload == {"to": "a@example.com"}
    record.ack(result="sent")
    job = queue.job(job_id)
    assert job is not None and job.state is State.DONE and job.result == "sent"
    assert queue.stats()["done"] == 1
    assert queue.verify() == []


def test_engine_never_imports_django() -> None:
    code = "import sys, queue_max_django.engine; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
