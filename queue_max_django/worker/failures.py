"""The log lines of a failed attempt (``log_failure``): one line if the job runs again; a dead letter's with
its traceback. Both say which attempt of how many it was, read back from the store, and carry the same as
structured fields (``extra``) for error trackers and JSON log formatters."""

from __future__ import annotations

import logging
import time

from ..encryption.jobs import loggable_error
from ..engine import Queue, QueueError, Record, State
from ..running.outcome import Outcome
from .logs import summary

logger = logging.getLogger("queue_max_django.worker")


def log_failure(queue: Queue, record: Record, outcome: Outcome) -> None:
    """A failed attempt: one line (``logs.summary``) if the job runs again; if it is a dead letter now,
    the full traceback as well. Both say which attempt of how many it was, read back from the store."""
    try:
        job = queue.job(record.job_id)
    except QueueError:
        job = None
    attempt = record.attempts  # this one included, as Job.attempts counts them (queue_list, the admin)
    allowed = "" if job is None else f" of {job.max_retries + 1}"
    error = loggable_error(record.payload, outcome.error)  # an encrypted job's: its type only
    raised = error if isinstance(error, BaseException) and error.__traceback__ is not None else None
    # The same as structured fields of the record, for error trackers and JSON log formatters (Sentry's
    # logging integration adds a record's extra fields to its event).
    fields = {
        "job_id": str(record.job_id),
        "task": record.name,
        "queue": record.queue,
        "attempt": attempt,
        "attempts_allowed": None if job is None else job.max_retries + 1,
        "dead_letter": outcome.state is State.FAILED,
    }
    if outcome.state is State.FAILED:
        if job is not None and job.retries > job.max_retries:
            why = "no retries left"
        else:
            why = f"not retried ({outcome.reason})" if outcome.reason else "not retried"
        logger.error("job %s (%s) failed (attempt %d%s), %s: now a dead letter: %s", record.job_id,
                     record.name, attempt, allowed, why, summary(error),
                     exc_info=raised, extra=fields)  # fmt: skip
        return
    when = "now"
    if job is not None and job.state is State.SCHEDULED and job.eta is not None:
        when = f"in {max(0.0, job.eta - time.time()):.1f} s"
    logger.warning("job %s (%s) failed (attempt %d%s), retrying %s: %s", record.job_id, record.name,
                   attempt, allowed, when, summary(error), extra=fields)  # fmt: skip
