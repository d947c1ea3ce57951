"""Test helpers: run what is queued, here, in this process, through the same runner as the worker.

``run_queued()`` claims and runs jobs until nothing is runnable; ``wait_until_empty()`` waits for other
consumers (a worker) to drain the store. Both use the queue built from the current ``QUEUE_MAX``.

Inside a transaction (Django's ``TestCase``, pytest-django's ``django_db``), ``run_queued()`` runs the jobs
of that transaction too, which no other connection sees: the jobs waiting for its commit
(``ENQUEUE_ON_COMMIT``) are stored first, as if it had committed, and with the PostgreSQL store in the
transaction's database the jobs are claimed and finished through the caller's connection, in its
transaction (rolled back with the test).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from . import commits
from .conf import caller_connection, get_queue
from .engine import QueueEmpty
from .running.outcome import Outcome
from .running.runner import run_job


def run_queued(
    *,
    queues: Iterable[str] | None = None,
    retry_delay: float | None = 0.0,
    max_jobs: int | None = None,
) -> list[Outcome]:
    """Run queued jobs in this process until none is runnable now. -> what happened to each, in order.

    ``retry_delay=0`` (the default) makes a failed attempt with retries left runnable again at once, so it
    runs again in the same call until the job is done or failed; ``None`` keeps the backoff (the job is then
    left scheduled). Jobs scheduled for later (``schedule_in``) are not run before their time. ``max_jobs``
    bounds the number of jobs run (a task that enqueues itself would otherwise never let this end). Inside
    a transaction, its own jobs are run too (see the module's docstring).
    """
    commits.flush()  # jobs that wait for the commit of this thread's transaction: stored now
    queue = get_queue()
    joined = caller_connection()
    names = None if queues is None else list(queues)
    outcomes: list[Outcome] = []
    with queue.on_connection(joined) if joined is not None else contextlib.nullcontext():
        while max_jobs is None or len(outcomes) < max_jobs:
            commits.flush()  # those the jobs run so far enqueued
            try:
                record = queue.get(0, queues=names)
            except QueueEmpty:
                break
            outcomes.append(run_job(record, retry_delay=retry_delay))
    return outcomes


def wait_until_empty(timeout: float | None = None) -> bool:
    """True once nothing is pending, scheduled or running (a worker drained the store); False on timeout."""
    return get_queue().wait_until_empty(timeout)
