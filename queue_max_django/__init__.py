"""queue_max_django: a persistent, crash-safe job queue for Django, on one machine (LMDB) or many
(PostgreSQL).

Importing this package imports nothing else, Django included: the engine (``queue_max_django.engine``) runs
without Django. The everyday names are loaded on first access: the decorators (``task``, ``retryable_task``,
``periodic_task``), what a task raises to steer its retries (``Permanent``, ``Retry``) or to stop when it was
cancelled (``Cancelled``), what a put with a unique key raises on a duplicate (``DuplicateJob``), and the
handle of an enqueued job (``JobResult``, ``JobStatus``, ``JobNotFound``, ``JobMismatch``,
``JobNotCommitted``), the running job's context (``current_job``, ``JobContext``, ``NoCurrentJob``), and
workflows of tasks (``chain``, ``group``, ``chord``, ``Workflow``, ``WorkflowResult``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import JobContext, NoCurrentJob, current_job
    from .engine import Cancelled, DuplicateJob, Permanent, Retry
    from .periodic import periodic_task
    from .results import JobMismatch, JobNotCommitted, JobNotFound, JobResult, JobStatus
    from .tasks import retryable_task, task
    from .workflows import Workflow, WorkflowResult, chain, chord, group

__all__ = [
    "Cancelled",
    "DuplicateJob",
    "JobContext",
    "JobMismatch",
    "JobNotCommitted",
    "JobNotFound",
    "JobResult",
    "JobStatus",
    "NoCurrentJob",
    "Permanent",
    "Retry",
    "Workflow",
    "WorkflowResult",
    "chain",
    "chord",
    "current_job",
    "group",
    "periodic_task",
    "retryable_task",
    "task",
]

_LAZY = {
    "task": "tasks",
    "retryable_task": "tasks",
    "periodic_task": "periodic",
    "Cancelled": "engine",
    "DuplicateJob": "engine",
    "Permanent": "engine",
    "Retry": "engine",
    "JobResult": "results",
    "JobStatus": "results",
    "JobNotFound": "results",
    "JobMismatch": "results",
    "JobNotCommitted": "results",
    "current_job": "context",
    "JobContext": "context",
    "NoCurrentJob": "context",
    "chain": "workflows",
    "group": "workflows",
    "chord": "workflows",
    "Workflow": "workflows",
    "WorkflowResult": "workflows",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
