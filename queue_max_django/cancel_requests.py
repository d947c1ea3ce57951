"""The cancel requests of the jobs this process runs: a per-process registry that the worker's heartbeat
fills (``worker/cancels.py``: it learns the "cancel requested" marks of the jobs it holds in the same round
trip that renews their leases) and task code reads, through ``current_job().cancelled`` (context.py) or
these functions. Safe from any thread (a set of ints under the GIL). Outside a worker (the immediate mode,
tests, a shell) nothing is ever requested.
"""

from __future__ import annotations

import threading

_requested: set[int] = set()
_thread = threading.local()  # .job_id: the job this worker thread runs now


def requested() -> bool:
    """Was a cancel requested of the job that the calling thread runs (in a worker)? False elsewhere."""
    job_id = getattr(_thread, "job_id", None)
    return job_id is not None and job_id in _requested


def running(job_id: int | None) -> None:
    """The calling worker thread starts running job ``job_id`` (None: it finished it)."""
    _thread.job_id = job_id


def is_requested(job_id: int | str) -> bool:
    """Was a cancel of job ``job_id`` (run by this process) requested? Task code polls it and stops."""
    try:
        return int(job_id) in _requested
    except (TypeError, ValueError):
        return False


def request(job_id: int) -> None:
    _requested.add(job_id)


def forget(job_id: int) -> None:
    _requested.discard(job_id)


def requested_ids() -> frozenset[int]:
    return frozenset(_requested)
