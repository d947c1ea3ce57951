"""The log line of a job lost with its worker: a holder SIGKILLed (the OOM killer, a node lost) ends no
attempt, so no worker logs the job's failure; the recovery that takes it back, in whatever process runs it,
logs one line per job instead (``signals.connect`` connects ``log_lost`` to the engine's ``job_lost``
event). WARNING when the job runs again, ERROR when it is a dead letter now, with the structured fields of
a failed attempt's line (``worker/process.py``) and the id of the worker that held it.
"""

from __future__ import annotations

import logging

from ..engine import State

logger = logging.getLogger("queue_max_django.worker")


def log_lost(
    *,
    job_id: int,
    queue: str,
    name: str | None,
    state: State,
    charged: bool,
    attempt: int,
    attempts_allowed: int,
    worker: str | None,
) -> None:
    """One line for a job that recovery took back from a holder whose lease expired."""
    dead = state is State.FAILED
    fields = {
        "job_id": str(job_id),
        "task": name,
        "queue": queue,
        "attempt": attempt,
        "attempts_allowed": attempts_allowed,
        "dead_letter": dead,
        "worker_id": worker,
    }
    holder = "an unnamed worker" if worker is None else f"worker {worker}"
    lost = f"job {job_id} ({name}) lost with {holder}, which died or stalled (attempt {attempt} of "
    lost += f"{attempts_allowed}): lease expired"
    if dead:
        logger.error("%s; no retries left: now a dead letter", lost, extra=fields)
        return
    when = "now" if state is State.PENDING else "later"
    uncounted = "" if charged else " (claimed in a batch: not counted as an attempt)"
    logger.warning("%s; retrying %s%s", lost, when, uncounted, extra=fields)
