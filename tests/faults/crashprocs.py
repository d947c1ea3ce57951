"""Children of tests/faults/test_put_many_kill.py (started by tests/engine/procs.py's ``Children``)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from queue_max_django.engine import Queue
from queue_max_django.engine.jobspec import JobSpec


def _say(*message: Any) -> None:
    os.write(sys.stdout.fileno(), (json.dumps(list(message)) + "\n").encode())


def put_many_stopped_inside(path: str, batch: int, stop_after: int, sync: bool) -> None:
    """One ``put_many`` of ``batch`` jobs that stops for good after packing ``stop_after`` records: inside
    its write transaction, with that many records already written to it. Says "inside" then, to be
    killed."""
    q = Queue(path, shards=2, do_recover=False, do_vacuum=False, sync=sync)
    real_record = JobSpec.record
    packed = 0

    def record(spec: JobSpec, *args: Any) -> bytes:
        nonlocal packed
        packed += 1
        if packed > stop_after:
            _say("inside", packed - 1)
            time.sleep(3600)
        return real_record(spec, *args)

    JobSpec.record = record  # type: ignore[method-assign]  # the shard encodes each new job's record with it
    q.put_many([{"batch": "killed", "i": i, "pad": "p" * 200} for i in range(batch)])
    _say("returned")


def put_many_forever(path: str, batch: int) -> None:
    """Batches of ``batch`` jobs until killed; says which batch returned, after it returned."""
    q = Queue(path, shards=2, do_recover=False, do_vacuum=False)
    _say("ready")
    number = 0
    while True:
        q.put_many([{"batch": number, "i": i, "pad": "p" * 500} for i in range(batch)])
        _say("returned", number)
        number += 1
