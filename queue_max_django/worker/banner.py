"""What the worker's start-up banner lists besides the ``@task`` registry: the ``django.tasks`` tasks that
its processes will run (Django >= 6.0, with ``QueueMaxBackend`` in the ``TASKS`` setting)."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from django.conf import settings

logger = logging.getLogger("queue_max_django.worker")

BACKEND = "queue_max_django.backend.QueueMaxBackend"


def _our_aliases() -> list[tuple[str, dict[str, Any]]]:
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return []
    return [
        (alias, params)
        for alias, params in tasks.items()
        if isinstance(params, dict) and params.get("BACKEND") == BACKEND
    ]


def django_task_names(*, quiet: bool = False) -> list[str] | None:
    """The module paths of the ``django.tasks`` tasks this process has registered with ``QueueMaxBackend``
    (the tasks its jobs may name), after importing the modules of each such backend's ``OPTIONS["MODULES"]``
    as a worker does on the first job of a task it lacks. None when no ``TASKS`` backend is
    ``QueueMaxBackend`` or this Django has no ``django.tasks``. ``quiet``: a module that cannot be imported
    is not logged (the banner, which comes next, logs it)."""
    aliases = _our_aliases()
    if not aliases:
        return None
    try:
        from .. import backend
    except ImportError:  # Django < 6.0: the system checks say so; no django.tasks job can run here
        return None
    for alias, params in aliases:
        for module in (params.get("OPTIONS") or {}).get("MODULES", ()):
            try:
                importlib.import_module(module)
            except Exception as exc:  # the job of such a task says so too: the worker still starts
                if quiet:
                    continue
                logger.warning("TASKS[%r]['OPTIONS']['MODULES']: cannot import %r: %s: %s",
                               alias, module, type(exc).__name__, exc)  # fmt: skip
    return sorted(backend.registered._tasks)  # backend.py has no public listing of them (yet)
